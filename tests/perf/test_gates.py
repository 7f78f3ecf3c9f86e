"""CI gates and baselines: a gate that must pass passes, one that must fail stops the pipeline."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.perf.perf_support import FAST, run_perf
from tests.support import ServerProcess


def test_gates_pass_and_fail_with_clear_messages(perf_server: ServerProcess, tmp_path: Path) -> None:
    args = ["-m", "simple", "-u", perf_server.http_url, "--concurrency", "2", *FAST]
    passing = run_perf(*args, "--gate", "p99<2s", "--gate", "throughput>10", "--gate", "errors==0", "--json")
    assert passing.returncode == 0, passing
    assert "PASS gate 'p99<2s' passed" in passing.stderr
    assert [g["passed"] for g in passing.report["gates"]] == [True, True, True]

    baseline = tmp_path / "baseline.json"
    baseline.write_text(passing.stdout)
    same = run_perf(*args, "--baseline", str(baseline), "--max-regression", "400%")
    assert same.returncode == 0, same
    assert "baseline concurrency 2: throughput" in same.stderr

    document = orjson.loads(baseline.read_text())
    level = document["results"][0]
    level["throughput"] *= 100  # a baseline this run cannot match...
    level["latency_us"] = {k: v * 100 for k, v in level["latency_us"].items()}  # ...only there
    for window in level["windows"]:  # the figures --baseline tests, window by window
        window.update({k: v * 100 for k, v in window.items() if k != "count"})
    inflated = tmp_path / "inflated.json"
    inflated.write_bytes(orjson.dumps(document))
    failing = run_perf(*args, "--gate", "p99<1us", "--gate", "throughput>10", "--baseline", str(inflated))
    assert failing.returncode == 1, failing
    assert "FAIL gate 'p99<1us' FAILED: p99 over the sweep is" in failing.stderr
    assert "PASS gate 'throughput>10'" in failing.stderr
    assert "baseline concurrency 2: throughput" in failing.stderr and "REGRESSED" in failing.stderr
    assert "2 gate(s) failed" in failing.stderr


def test_failed_requests_fail_the_run_as_perf_analyzers_do_unless_accepted(
    perf_server: ServerProcess,
) -> None:
    args = ["-m", "flaky", "-u", perf_server.http_url, "--concurrency", "1", *FAST, "--confirm", "0"]
    failing = run_perf(*args, "--json")
    assert failing.returncode == 1, failing
    assert "gate 'errors==0' added" in failing.stderr
    assert "FAIL gate 'errors==0' FAILED: errors over the sweep is" in failing.stderr
    assert '(first: HTTP 500: {"error":"every third fails"})' in failing.stderr
    assert [g["gate"] for g in failing.report["gates"]] == ["errors==0"]

    accepted = run_perf(*args, "--allow-errors")
    assert accepted.returncode == 0 and "errors==0" not in accepted.stderr, accepted
    own = run_perf(*args, "--gate", "error_rate<90%")
    assert own.returncode == 0 and "errors==0" not in own.stderr, own
    assert "PASS gate 'error_rate<90%'" in own.stderr


def test_a_malformed_gate_is_refused_before_measuring() -> None:
    run = run_perf("-m", "simple", "--gate", "p99<20")
    assert run.returncode == 2 and "give the latency a unit" in run.stderr, run
