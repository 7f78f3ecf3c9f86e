"""The long fuzzing run: the property-based tests of tests/fuzz with many more examples than CI gives.

CI runs each fuzz test with 400 examples (``ci`` profile, seconds). This runs them with ``--examples``
each (``long`` profile), one test at a time, prints a table (test, examples, outcome, time) and writes
it as JSON. A failure prints hypothesis' minimal failing example: make it a regression test beside
the property that found it.

    python scripts/fuzz.py [--examples 20000] [-k http] [--json reports/fuzz/fuzz.json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]


def collect(selection: str) -> list[str]:
    """The fuzz tests' node ids, as pytest collects them."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/fuzz"]
    if selection:
        command += ["-k", selection]
    listing = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False).stdout
    return [line for line in listing.splitlines() if "::" in line]


def run(test: str, examples: int) -> tuple[bool, float, str]:
    env = {**os.environ, "TRT_FUZZ_PROFILE": "long", "TRT_FUZZ_EXAMPLES": str(examples)}
    started = time.perf_counter()
    result = subprocess.run(
        # No per-test timeout: a long run of one property takes as long as its examples do. One test,
        # so no workers (-n 0).
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:randomly", "--timeout=0", test],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return result.returncode == 0, time.perf_counter() - started, result.stdout[-4000:]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=20_000, help="examples per test (CI runs 400)")
    parser.add_argument("-k", dest="selection", default="", help="pytest -k expression to pick tests")
    parser.add_argument("--json", type=Path, default=ROOT / "reports" / "fuzz" / "fuzz.json")
    args = parser.parse_args()

    console = Console()
    tests = collect(args.selection)
    if not tests:
        console.print("[red]no fuzz tests collected[/red]")
        return 2
    rows = []
    with Progress(console=console) as progress:
        task = progress.add_task("fuzzing", total=len(tests))
        for test in tests:
            progress.update(task, description=test.split("::")[-1])
            passed, seconds, output = run(test, args.examples)
            rows.append(
                {"test": test, "examples": args.examples, "passed": passed, "seconds": round(seconds, 1)}
            )
            if not passed:
                console.print(f"[red]{test} failed[/red]\n{output}")
            progress.advance(task)

    table = Table(title=f"Fuzzing, {args.examples} examples a test")
    for column in ("test", "outcome", "seconds"):
        table.add_column(column)
    for row in rows:
        outcome = "[green]passed[/green]" if row["passed"] else "[red]FAILED[/red]"
        table.add_row(str(row["test"]), outcome, str(row["seconds"]))
    console.print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(
        orjson.dumps({"examples_per_test": args.examples, "tests": rows}, option=orjson.OPT_INDENT_2)
    )
    console.print(f"written: {args.json}")
    return 0 if all(row["passed"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
