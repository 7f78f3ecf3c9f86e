"""`trt analyze --mode quick` against `--mode brute` on the same model, in one run.

Both searches run from empty checkpoints on `model_repository/mlp_onnx` (256-wide MLP, ONNX) with the same
space and target. Then the two chosen configs are measured again head to head, alternating, so that the
comparison of what each search picked is not at the mercy of the machine's noise during either search.

    python benchmarks/analyze_quick_vs_brute.py [--target-p99 5ms] [--interval-ms 250] [--repeats 3]

Acceptance (issue 7): quick's choice within 5% of brute's best, with at most a third of its measurements.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trt.analyzer.analysis import AnalyzeRequest, analyze  # noqa: E402
from trt.analyzer.deployment import ScratchServer  # noqa: E402
from trt.analyzer.goals import Goals, parse_duration_s  # noqa: E402
from trt.analyzer.report import Outcome  # noqa: E402
from trt.analyzer.search import Mode  # noqa: E402
from trt.analyzer.session import MeasureSettings  # noqa: E402
from trt.analyzer.space import SpaceLimits  # noqa: E402
from trt.perf.options import PerfOptions  # noqa: E402
from trt.perf.profiler import run_profile  # noqa: E402
from trt.server.core.models.config import config_to_dict  # noqa: E402

MODEL = "mlp_onnx"


def search(mode: Mode, goals: Goals, settings: MeasureSettings, output: Path, limits: SpaceLimits) -> Outcome:
    request = AnalyzeRequest(
        model=MODEL,
        repository=ROOT / "model_repository",
        goals=goals,
        mode=mode,
        limits=limits,
        concurrency=(1, 2, 4, 8, 16, 32),
        settings=settings,
        output_dir=output,
        fresh=True,
    )
    return analyze(request)


def head_to_head(
    outcomes: dict[str, Outcome], repeats: int, interval_ms: int
) -> dict[str, list[tuple[float, float]]]:
    """Each chosen config served side by side (one loaded at a time), measured alternately."""
    server = ScratchServer()
    throughputs: dict[str, list[tuple[float, float]]] = {mode: [] for mode in outcomes}
    try:
        for mode, outcome in outcomes.items():
            assert outcome.chosen is not None and outcome.config is not None
            precision = outcome.chosen.candidate.precision
            model_file = outcome.precisions[precision].path
            server.add_model(mode, ROOT / "model_repository" / MODEL, model_file)
        for repeat in range(repeats):
            order = list(outcomes) if repeat % 2 == 0 else list(reversed(outcomes))
            for mode in order:
                outcome = outcomes[mode]
                assert outcome.config is not None and outcome.chosen and outcome.chosen.best
                config = type(outcome.config)()
                config.CopyFrom(outcome.config)
                config.name = mode
                server.load(mode, config_to_dict(config))
                options = PerfOptions(
                    model=mode,
                    url=server.http_url,
                    concurrency=(outcome.chosen.best.concurrency,),
                    measurement_interval_ms=interval_ms * 4,
                    stability_percentage=10,
                    max_trials=6,
                    processes=1,
                )
                level = run_profile(options).results[0]
                throughputs[mode].append((level.throughput, float(level.latency.percentiles[99])))
                server.unload(mode)
    finally:
        server.close()
    return throughputs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target-p99", default="5ms")
    parser.add_argument("--interval-ms", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--json", type=Path, default=ROOT / "reports" / "benchmarks" / "analyze_quick_vs_brute.json"
    )
    args = parser.parse_args()
    goals = Goals(latency_limit_us=parse_duration_s(args.target_p99, "--target-p99") * 1e6)
    settings = MeasureSettings(
        measurement_interval_ms=args.interval_ms, stability_percentage=15, max_trials=5, warmup_ms=250
    )
    # The default space on this machine, less the max_batch_size values between the ends.
    limits = SpaceLimits(max_batch_sizes=(64, 8, 32), precisions=("fp32", "fp16", "int8"))
    console = Console(stderr=True)
    outcomes: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in (Mode.BRUTE, Mode.QUICK):
            console.print(f"searching: {mode}")
            outcomes[str(mode)] = search(mode, goals, settings, Path(tmp) / str(mode), limits)
            o = outcomes[str(mode)]
            console.print(
                f"  {mode}: {o.measurements_used} measurements, {len(o.result.readings)} configs, "
                f"{o.duration_s:.0f} s -> "
                + (o.chosen.candidate.label if o.chosen else "nothing meets the goals")
            )
        if not all(o.met for o in outcomes.values()):
            raise SystemExit("a search found no config meeting the target; loosen --target-p99")
        console.print("head to head: the two chosen configs, alternately")
        again = head_to_head(outcomes, args.repeats, args.interval_ms)

    brute, quick = outcomes["brute"], outcomes["quick"]
    table = Table(
        title=f"trt analyze quick vs brute: {MODEL}, p99 <= {args.target_p99}, -p {args.interval_ms} ms"
    )
    for column in (
        "search", "measurements", "configs read", "seconds", "chosen config", "concurrency",
        "infer/s in search", f"infer/s head to head (median of {args.repeats})", "p99 ms head to head",
    ):  # fmt: skip
        table.add_column(column, justify="right")
    rows = []
    for mode, outcome in (("brute", brute), ("quick", quick)):
        assert outcome.chosen and outcome.chosen.best
        row = {
            "search": mode,
            "measurements": outcome.measurements_used,
            "configs": len(outcome.result.readings),
            "seconds": round(outcome.duration_s, 1),
            "chosen": outcome.chosen.candidate.label,
            "concurrency": outcome.chosen.best.concurrency,
            "throughput_in_search": round(outcome.chosen.best.throughput, 1),
            "throughput_head_to_head": round(statistics.median(t for t, _ in again[mode]), 1),
            "p99_ms_head_to_head": round(statistics.median(p for _, p in again[mode]) / 1000, 2),
        }
        rows.append(row)
        table.add_row(
            mode, str(row["measurements"]), str(row["configs"]), f"{row['seconds']:.0f}", row["chosen"],
            str(row["concurrency"]), f"{row['throughput_in_search']:,.0f}",
            f"{row['throughput_head_to_head']:,.0f}", f"{row['p99_ms_head_to_head']:.2f}",
        )  # fmt: skip
    ratio = rows[1]["throughput_head_to_head"] / rows[0]["throughput_head_to_head"]  # type: ignore[operator]
    share = quick.measurements_used / brute.measurements_used
    Console(width=200).print(table)
    verdict = "ok" if ratio >= 0.95 and share <= 1 / 3 else "OUT"
    Console().print(
        f"quick / brute: throughput {ratio:.3f} (goal >= 0.95), "
        f"measurements {share:.2f} (goal <= 0.33): {verdict}"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"rows": rows, "throughput_ratio": ratio, "measurement_share": share}, indent=2)
    )


if __name__ == "__main__":
    main()
