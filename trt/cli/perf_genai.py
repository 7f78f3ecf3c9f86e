"""The generative half of ``trt perf`` (``--endpoint-type chat|completions|embeddings|generate|kserve``):
options resolved into ``GenAIOptions``, the run, its outputs and gates, and the exit status."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console

from trt.perf.errors import OptionError, PerfError
from trt.perf.genai.gates import evaluate, parse_genai_gate
from trt.perf.genai.goals import parse_goal
from trt.perf.genai.options import EndpointType, GenAIOptions
from trt.perf.genai.profiler import run_genai
from trt.perf.genai.report import export
from trt.perf.genai.report.console import GenAIConsoleProgress, print_report
from trt.perf.genai.report.plot import default_plot_path, write_plot
from trt.perf.options import Distribution, LoadKind
from trt.perf.report.console import print_gates

EXIT_GATE_FAILED = 1


@dataclass(frozen=True)
class GenAIOutputs:
    json_output: bool
    csv_file: Path | None
    plot: bool
    plot_file: Path | None
    artifact_dir: Path | None
    gates: tuple[str, ...]


def _extra_value(text: str) -> str | int | float | bool:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def extra_inputs(values: list[str]) -> tuple[tuple[str, str | int | float | bool], ...]:
    """genai-perf's ``--extra-inputs NAME:VALUE`` (numbers and booleans typed as such)."""
    pairs = []
    for value in values:
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            raise OptionError(f"--extra-inputs '{value}': expected NAME:VALUE, e.g. temperature:0.7")
        pairs.append((name.strip(), _extra_value(content.strip())))
    return tuple(pairs)


def build_options(
    *,
    model: str,
    model_version: str,
    endpoint_type: EndpointType,
    endpoint: str,
    tokenizer: Path | None,
    url: str,
    streaming: bool,
    load: LoadKind,
    concurrency: tuple[int, ...],
    rates: tuple[float, ...],
    distribution: Distribution,
    request_count: int,
    warmup_request_count: int,
    input_tokens_mean: int,
    input_tokens_stddev: int,
    output_tokens_mean: int,
    output_tokens_stddev: int,
    output_tokens_deterministic: bool,
    num_prompts: int,
    batch_size_text: int,
    input_file: Path | None,
    goals: list[str],
    extras: list[str],
    headers: tuple[tuple[str, str], ...],
    request_timeout_s: float,
    seed: int,
) -> GenAIOptions:
    if tokenizer is None:
        raise OptionError(
            "--endpoint-type needs --tokenizer PATH (the model's tokenizer.json or its folder): tokens are "
            "counted with the model's own tokenizer, as genai-perf counts them"
        )
    return GenAIOptions(
        model=model,
        model_version=model_version,
        endpoint_type=endpoint_type,
        endpoint=endpoint,
        tokenizer=tokenizer,
        url=url,
        streaming=streaming,
        load=load,
        concurrency=concurrency,
        request_rates=rates,
        distribution=distribution,
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
        goals=tuple(parse_goal(g) for g in goals),
        extra_inputs=extra_inputs(extras),
        http_headers=headers,
        request_timeout_s=request_timeout_s,
        seed=seed,
    )


def run_genai_command(options: GenAIOptions, outputs: GenAIOutputs, out: Console, err: Console) -> None:
    """Measure, write what was asked for, judge the gates; exits 1 when a gate fails."""
    try:
        gates = [parse_genai_gate(g) for g in outputs.gates]
        progress = GenAIConsoleProgress(
            err, "concurrency" if options.load is LoadKind.CONCURRENCY else "rate"
        )
        try:
            report = run_genai(options, progress)
        finally:
            progress.close()
    except PerfError as error:
        err.print(f"[bold red]error:[/] {error}", highlight=False)
        raise typer.Exit(error.exit_code) from None
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130) from None
    outcomes = evaluate(gates, report)
    print_report(out, report)
    if outputs.csv_file is not None:
        export.write_sweep_csv(report, outputs.csv_file)
        err.print(f"sweep table written to {outputs.csv_file}")
    if outputs.artifact_dir is not None:
        written = export.write_artifacts(report, outputs.artifact_dir)
        err.print(f"genai-perf files written under {outputs.artifact_dir} ({len(written)} files)")
    if outputs.plot or outputs.plot_file:
        path = write_plot(report, outputs.plot_file or default_plot_path(report))
        err.print(f"plot written to {path}")
    if outputs.json_output:
        document = export.report_document(report, [o.as_dict() for o in outcomes])
        sys.stdout.buffer.write(export.dumps(document) + b"\n")
        sys.stdout.flush()
    print_gates(err, outcomes)
    failed = sum(not o.passed for o in outcomes)
    if failed:
        err.print(f"[bold red]{failed} gate(s) failed[/]")
        raise typer.Exit(EXIT_GATE_FAILED)
