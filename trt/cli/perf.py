"""``trt perf``: load-test any server that speaks Triton's protocol (trt, Triton, MLServer, KServe).

perf_analyzer's flags, long and short, so existing scripts switch by changing the program name; its CSV
columns; plus a JSON report, a throughput-latency plot and CI gates. With a server running::

    trt serve --model-repository model_repository &

these run as written::

    trt perf -m simple --concurrency 1:8 -p 1000
    trt perf -m simple -i grpc -u localhost:8001 --concurrency-range 1:4 -p 1000 -f results.csv
    trt perf -m simple --async --request-rate-range 200:600:200 --request-distribution poisson -p 1000
    trt perf -m simple --concurrency 4 -p 1000 --json > run.json
    trt perf -m simple --concurrency 4 -p 1000 --gate "p99<50ms" --gate "throughput>100"
    trt perf -m simple --concurrency 4 -p 1000 --baseline run.json --max-regression 25%
    trt perf -m simple --concurrency 1:16 -p 1000 --plot

``--concurrency 1:64`` doubles (1, 2, 4, ... 64); ``--concurrency-range 1:64`` steps by 1 as perf_analyzer
does; give a step (``1:64:8``) for either. Exit status: 0 measured (and every gate passed; a level that did
not settle is reported, marked unstable), 1 a gate or the baseline failed on every measurement of its
level (requests that failed are a gate of their own, ``errors==0``, unless ``--allow-errors`` or a gate
on errors says otherwise), 2 a bad option or input data, 3 a level did not stabilize and
``--require-stable`` was given, 4 the server or the measurement failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from trt.cli.console import make_console
from trt.cli.perf_genai import GenAIOutputs, build_options, run_genai_command
from trt.cli.termination import interrupt_on_sigterm
from trt.open_files import raise_open_file_limit
from trt.perf.errors import OptionError, PerfError
from trt.perf.gating import NO_ERRORS, GateSettings, judge, options_for_levels, with_error_gate
from trt.perf.genai.options import EndpointType
from trt.perf.options import (
    Distribution,
    LoadKind,
    MeasurementMode,
    PerfOptions,
    Protocol,
    SequenceOptions,
    SharedMemoryKind,
    TensorFormat,
)
from trt.perf.profiler import run_profile
from trt.perf.ranges import concurrency_levels, parse_id_range, parse_shapes, rate_levels
from trt.perf.report import csv_report, gates, json_report
from trt.perf.report.console import ConsoleProgress, print_gates, print_summary
from trt.perf.report.plot import default_plot_path, write_plot
from trt.perf.results import ProfileReport
from trt.perf.schedule import read_intervals

EXIT_GATE_FAILED = 1
EXIT_UNSTABLE = 3


def _headers(values: list[str]) -> tuple[tuple[str, str], ...]:
    headers = []
    for value in values:
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            raise OptionError(f"-H '{value}': expected Name:Value")
        headers.append((name.strip(), content.strip()))
    return tuple(headers)


def _load(
    concurrency: str | None, concurrency_range: str | None, rates: str | None, intervals: Path | None
) -> tuple[LoadKind, tuple[int, ...], tuple[float, ...], tuple[int, ...]]:
    given = [
        n
        for n, v in (
            ("--concurrency", concurrency),
            ("--concurrency-range", concurrency_range),
            ("--request-rate-range", rates),
            ("--request-intervals", intervals),
        )
        if v
    ]
    if len(given) > 1:
        raise OptionError(f"{' and '.join(given)} are different load modes: give one")
    if rates:
        return LoadKind.REQUEST_RATE, (1,), tuple(rate_levels(rates)), ()
    if intervals:
        return LoadKind.CUSTOM_INTERVALS, (1,), (), read_intervals(intervals)
    if concurrency_range:
        return LoadKind.CONCURRENCY, tuple(concurrency_levels(concurrency_range, False)), (), ()
    return LoadKind.CONCURRENCY, tuple(concurrency_levels(concurrency or "1", True)), (), ()


def perf_command(
    model: str = typer.Option(..., "-m", "--model-name", "--model", help="Model to measure."),
    model_version: str = typer.Option("", "-x", "--model-version", help="Version (default: the server's)."),
    url: str = typer.Option("", "-u", "--url", help="HOST:PORT (default localhost:8000, gRPC :8001)."),
    protocol: Protocol = typer.Option(Protocol.HTTP, "-i", "--protocol", case_sensitive=False),
    service_kind: str = typer.Option(
        "triton",
        "--service-kind",
        help="'triton' (KServe v2), or 'openai' (generative: --endpoint-type chat).",
    ),
    endpoint_type: EndpointType | None = typer.Option(
        None,
        "--endpoint-type",
        case_sensitive=False,
        help="Generative: chat, completions, embeddings (OpenAI routes), generate (Triton's), kserve (gRPC).",
    ),
    endpoint: str = typer.Option("", "--endpoint", help="Generative: a path instead of the default route."),
    tokenizer: Path | None = typer.Option(
        None, "--tokenizer", help="Generative: the model's tokenizer.json (or its folder) to count tokens."
    ),
    input_tokens_mean: int = typer.Option(550, "--synthetic-input-tokens-mean"),
    input_tokens_stddev: int = typer.Option(0, "--synthetic-input-tokens-stddev"),
    output_tokens_mean: int = typer.Option(0, "--output-tokens-mean", help="0: as many as the server gives."),
    output_tokens_stddev: int = typer.Option(0, "--output-tokens-stddev"),
    output_tokens_deterministic: bool = typer.Option(
        False, "--output-tokens-mean-deterministic", help="Ask for exactly that many (min_tokens)."
    ),
    num_prompts: int = typer.Option(100, "--num-prompts"),
    batch_size_text: int = typer.Option(
        1, "--batch-size-text", help="Embeddings: texts a request (OpenAI's list input)."
    ),
    input_file: Path | None = typer.Option(
        None, "--input-file", help='Generative: prompts from a JSON-lines file of {"text": ...} objects.'
    ),
    request_count: int = typer.Option(
        0, "--request-count", help="Generative: requests a level (0: 4 per slot)."
    ),
    warmup_request_count: int = typer.Option(0, "--warmup-request-count"),
    goal: list[str] = typer.Option(
        None, "--goal", metavar="SLO", help='Generative goodput objective, e.g. "ttft<200ms"; repeatable.'
    ),
    extra_input: list[str] = typer.Option(None, "--extra-inputs", metavar="NAME:VALUE"),
    artifact_dir: Path | None = typer.Option(
        None, "--artifact-dir", help="Generative: write genai-perf's CSV/JSON for each level there."
    ),
    concurrency: str | None = typer.Option(
        None, "--concurrency", metavar="START[:END[:STEP]]", help="Closed loop; without STEP doubles: 1:64."
    ),
    concurrency_range: str | None = typer.Option(
        None,
        "--concurrency-range",
        metavar="START[:END[:STEP]]",
        help="As perf_analyzer: STEP defaults to 1.",
    ),
    request_rate_range: str | None = typer.Option(
        None, "--request-rate-range", metavar="START[:END[:STEP]]", help="Open loop, requests per second."
    ),
    request_distribution: Distribution = typer.Option(Distribution.CONSTANT, "--request-distribution"),
    request_intervals: Path | None = typer.Option(
        None, "--request-intervals", help="Open loop from a file of intervals (microseconds, one per line)."
    ),
    async_mode: bool | None = typer.Option(
        None, "--async/--sync", "-a/ ", help="asyncio clients, or one blocking request per slot (default)."
    ),
    streaming: bool = typer.Option(
        False, "--streaming", help="gRPC ModelStreamInfer (decoupled models); generative: stream tokens."
    ),
    batch_size: int = typer.Option(1, "-b", "--batch-size"),
    shape: list[str] = typer.Option(None, "--shape", metavar="NAME:D1,D2", help="Variable dims; repeatable."),
    input_data: list[str] = typer.Option(
        None, "--input-data", metavar="random|zero|FILE.json|DIR", help="Repeatable (default random)."
    ),
    string_length: int = typer.Option(128, "--string-length"),
    string_data: str | None = typer.Option(None, "--string-data"),
    input_tensor_format: TensorFormat | None = typer.Option(
        None, "--input-tensor-format", help="HTTP: binary (default where the server supports it) or json."
    ),
    output_tensor_format: TensorFormat | None = typer.Option(None, "--output-tensor-format"),
    shared_memory: SharedMemoryKind = typer.Option(
        SharedMemoryKind.NONE,
        "--shared-memory",
        help="Inputs and outputs through POSIX regions (system) or GPU 0's memory (cuda); the server on "
        "this machine, started with --allow-client-shm=true.",
    ),
    output_shared_memory_size: int = typer.Option(
        102400, "--output-shared-memory-size", help="Bytes of shared memory per output."
    ),
    measurement_interval: int = typer.Option(5000, "-p", "--measurement-interval", help="Window, ms."),
    measurement_mode: MeasurementMode | None = typer.Option(None, "--measurement-mode"),
    measurement_request_count: int | None = typer.Option(None, "--measurement-request-count"),
    stability_percentage: float = typer.Option(10.0, "-s", "--stability-percentage"),
    max_trials: int = typer.Option(10, "-r", "--max-trials"),
    percentile: int | None = typer.Option(None, "--percentile", help="Stabilize on (and report) pN."),
    latency_threshold: float = typer.Option(0.0, "-l", "--latency-threshold", help="ms; stops the sweep."),
    warmup: int | None = typer.Option(
        None, "--warmup", help="ms discarded per level (default min(p, 1000))."
    ),
    sequence_length: int | None = typer.Option(None, "--sequence-length"),
    sequence_length_variation: float = typer.Option(20.0, "--sequence-length-variation"),
    num_of_sequences: int = typer.Option(4, "--num-of-sequences"),
    sequence_id_range: str = typer.Option("1", "--sequence-id-range", metavar="START[:END]"),
    processes: int = typer.Option(
        0, "--processes", help="Load-generator processes (default cores/4, max 8)."
    ),
    max_threads: int = typer.Option(16, "--max-threads"),
    request_timeout: float = typer.Option(30.0, "--request-timeout", help="Seconds."),
    header: list[str] = typer.Option(None, "-H", metavar="NAME:VALUE", help="HTTP header; repeatable."),
    seed: int = typer.Option(0, "--seed"),
    csv_file: Path | None = typer.Option(None, "-f", "--filename", help="perf_analyzer's CSV."),
    verbose_csv: bool = typer.Option(False, "--verbose-csv"),
    json_output: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    plot: bool = typer.Option(False, "--plot", help="Write a throughput-latency PNG into reports/."),
    plot_file: Path | None = typer.Option(None, "--plot-file", help="Where --plot writes (implies --plot)."),
    gate: list[str] = typer.Option(
        None, "--gate", metavar="EXPR", help='e.g. "p99<20ms", "throughput@8>500".'
    ),
    baseline: Path | None = typer.Option(
        None, "--baseline", help="A previous --json report to compare with."
    ),
    max_regression: str = typer.Option("10%", "--max-regression"),
    confidence: str = typer.Option(
        "95%", "--confidence", help="How sure --baseline must be that a change exceeds the limit."
    ),
    confirm: int = typer.Option(
        1, "--confirm", help="Re-measures of a level that fails a gate before the run fails (0: none)."
    ),
    allow_errors: bool = typer.Option(
        False, "--allow-errors", help="Exit 0 though requests failed (without: exit 1, as perf_analyzer)."
    ),
    require_stable: bool = typer.Option(
        False, "--require-stable", help="Exit 3 when a level did not settle (perf_analyzer's strictness)."
    ),
    allow_unstable: bool = typer.Option(
        False, "--allow-unstable", help="Accepted for older scripts: an unsettled level no longer fails."
    ),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Print every measurement window."),
) -> None:
    """Measure throughput and latency of a model at increasing load, as perf_analyzer does; with
    --endpoint-type, a generative model's TTFT, inter-token latency and token throughput, as genai-perf."""
    out, err = make_console(stderr=json_output), make_console(stderr=True)
    interrupt_on_sigterm()  # so that its shared-memory regions are unregistered and removed
    raise_open_file_limit()  # a connection per concurrent request, and its workers inherit it
    if service_kind == "openai" and endpoint_type is None:
        endpoint_type = EndpointType.CHAT
    if endpoint_type is not None:
        try:
            load, levels, rates, _ = _load(
                concurrency, concurrency_range, request_rate_range, request_intervals
            )
            refused = [
                name
                for name, given in (
                    ("--baseline", baseline),
                    ("--input-data", input_data),
                    ("--shape", shape),
                    ("-b", batch_size != 1),
                    ("--shared-memory", shared_memory is not SharedMemoryKind.NONE),
                )
                if given
            ]
            if refused:
                raise OptionError(f"{', '.join(refused)}: not for generative runs (--endpoint-type)")
            generative = build_options(
                model=model,
                model_version=model_version,
                endpoint_type=endpoint_type,
                endpoint=endpoint,
                tokenizer=tokenizer,
                url=url,
                streaming=streaming,
                load=load,
                concurrency=levels,
                rates=rates,
                distribution=request_distribution,
                request_count=request_count,
                warmup_request_count=warmup_request_count,
                input_tokens_mean=input_tokens_mean,
                input_tokens_stddev=input_tokens_stddev,
                output_tokens_mean=output_tokens_mean,
                output_tokens_stddev=output_tokens_stddev,
                output_tokens_deterministic=output_tokens_deterministic,
                num_prompts=num_prompts,
                batch_size_text=batch_size_text,
                input_file=input_file,
                goals=goal or [],
                extras=extra_input or [],
                headers=_headers(header or []),
                request_timeout_s=request_timeout,
                seed=seed,
            )
        except PerfError as error:
            err.print(f"[bold red]error:[/] {error}", highlight=False)
            raise typer.Exit(error.exit_code) from None
        outputs = GenAIOutputs(json_output, csv_file, plot, plot_file, artifact_dir, tuple(gate or []))
        run_genai_command(generative, outputs, out, err)
        return
    try:
        if service_kind != "triton":
            raise OptionError(
                f"--service-kind {service_kind}: trt perf speaks Triton's (KServe v2) protocol only"
            )
        if batch_size_text != 1:
            raise OptionError("--batch-size-text is for --endpoint-type embeddings; -b batches tensors")
        if input_file is not None:
            raise OptionError("--input-file holds prompts, for --endpoint-type runs; tensors: --input-data")
        load, levels, rates, intervals = _load(
            concurrency, concurrency_range, request_rate_range, request_intervals
        )
        id_start, id_count = parse_id_range(sequence_id_range)
        count_mode = measurement_mode or (
            MeasurementMode.COUNT_WINDOWS if measurement_request_count else MeasurementMode.TIME_WINDOWS
        )
        if require_stable and allow_unstable:
            raise OptionError("--require-stable and --allow-unstable contradict each other: give one")
        if confirm < 0:
            raise OptionError("--confirm must be 0 or more")
        settings = GateSettings(
            thresholds=tuple(gates.parse_gate(g) for g in gate or []),
            baseline=json_report.load_baseline(baseline) if baseline else None,
            max_regression=gates.parse_regression(max_regression),
            confidence=gates.parse_confidence(confidence),
            confirm=confirm,
        )
        options = PerfOptions(
            model=model,
            model_version=model_version,
            url=url,
            protocol=protocol,
            load=load,
            concurrency=levels,
            request_rates=rates,
            request_intervals_us=intervals,
            distribution=request_distribution,
            batch_size=batch_size,
            shapes=tuple(parse_shapes(shape or []).items()),
            input_data=tuple(input_data or ["random"]),
            string_length=string_length,
            string_data=string_data,
            async_mode=async_mode,
            streaming=streaming,
            input_format=input_tensor_format,
            output_format=output_tensor_format,
            measurement_interval_ms=measurement_interval,
            measurement_mode=count_mode,
            measurement_request_count=measurement_request_count or 50,
            stability_percentage=stability_percentage,
            max_trials=max_trials,
            percentile=percentile,
            latency_threshold_ms=latency_threshold,
            warmup_ms=warmup,
            sequence=SequenceOptions(
                length=sequence_length or 20,
                length_variation=sequence_length_variation,
                length_given=sequence_length is not None,
                num_sequences=num_of_sequences,
                id_start=id_start,
                id_count=id_count,
            ),
            shared_memory=shared_memory,
            output_shared_memory_size=output_shared_memory_size,
            processes=processes,
            max_threads=max_threads,
            request_timeout_s=request_timeout,
            http_headers=_headers(header or []),
            seed=seed,
        )
        progress = ConsoleProgress(err, load, percentile, verbose)
        try:
            report = run_profile(options, progress)
        finally:
            progress.close()

        def remeasure(levels: tuple[float, ...]) -> ProfileReport:
            again = ConsoleProgress(err, load, percentile, verbose)
            try:
                return run_profile(options_for_levels(options, levels), again)
            finally:
                again.close()

        if not allow_errors and (gated := with_error_gate(settings, report)) is not settings:
            settings = gated
            err.print(
                f"[yellow]note:[/] requests failed: gate '{NO_ERRORS}' added, as perf_analyzer fails such a "
                "run (--allow-errors, or a gate on errors or error_rate of your own, to accept some)",
                highlight=False,
            )
        report, outcomes = judge(
            settings, report, remeasure, lambda note: err.print(f"[yellow]note:[/] {note}", highlight=False)
        )
    except PerfError as error:
        err.print(f"[bold red]error:[/] {error}", highlight=False)
        raise typer.Exit(error.exit_code) from None
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130) from None

    if csv_file is not None:
        csv_report.write_csv(report, csv_file, verbose_csv)
    if plot or plot_file:
        path = write_plot(report, plot_file or default_plot_path(report))
        err.print(f"plot written to {path}")
    print_summary(out, report)
    if json_output:
        document = json_report.report_dict(report, [o.as_dict() for o in outcomes])
        sys.stdout.buffer.write(json_report.dumps(document) + b"\n")
        sys.stdout.flush()
    print_gates(err, outcomes)
    if any(not o.passed for o in outcomes):
        failed = sum(not o.passed for o in outcomes)
        err.print(f"[bold red]{failed} gate(s) failed[/]")
        raise typer.Exit(EXIT_GATE_FAILED)
    if not report.stable:
        unsettled = ", ".join(f"{r.level:g}" for r in report.results if not r.stable)
        err.print(
            f"[yellow]unstable:[/] {report.level_name.lower()} {unsettled} did not settle within "
            f"-s {report.stability_percentage:g}%; its figures are reported all the same"
            + (" (--require-stable: exit 3)" if require_stable else ""),
            highlight=False,
        )
        if require_stable:
            raise typer.Exit(EXIT_UNSTABLE)
