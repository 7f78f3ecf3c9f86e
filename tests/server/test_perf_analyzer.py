"""NVIDIA's perf_analyzer loads and drives trt serve (it needs the model-config call and binary tensors).

perf_analyzer is not installed in CI: these run where ../shared/peers/setup.sh put it
($TRT_PERF_ANALYZER, or /tmp/trt-peers/perf/perf_analyzer) and are skipped elsewhere.
"""

from __future__ import annotations

import csv
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import ServerProcess

CANDIDATES = [os.environ.get("TRT_PERF_ANALYZER", ""), "/tmp/trt-peers/perf/perf_analyzer"]
PERF_ANALYZER = next((c for c in CANDIDATES if c and os.path.isfile(c)), None)
# report_writer.cc's columns when no response cache and no --verbose-csv.
CSV_HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency"
)

pytestmark = pytest.mark.skipif(
    PERF_ANALYZER is None, reason="perf_analyzer not installed (see ../shared/PEERS.md)"
)


UNSTABLE = "Failed to obtain stable measurement"
ATTEMPTS = 3


def _perf_analyzer(
    server: ServerProcess, protocol: str, out: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """Runs it, again when the machine was too noisy for it to settle (and only then).

    On a loaded 2-core machine one window in a few misses the 50% band: perf_analyzer then exits 2
    without a CSV, or exits 0 with the rows it did settle. That is noise, not the server; the last
    attempt takes any three windows (under the full suite all three attempts once missed the band).
    """
    assert PERF_ANALYZER is not None
    url = server.http_url if protocol == "http" else server.grpc_url
    for attempt in range(ATTEMPTS):
        stability = "50" if attempt < ATTEMPTS - 1 else "10000"
        command = [
            PERF_ANALYZER, "-m", "simple", "-u", url, "-i", protocol, "--concurrency-range", "1:2",
            "-p", "1000", "-s", stability, "-r", "5", "-f", str(out), *extra,
        ]  # fmt: skip
        out.unlink(missing_ok=True)
        result = subprocess.run(command, capture_output=True, text=True, timeout=240)
        if UNSTABLE not in result.stdout + result.stderr:
            break
    return result


def _assert_measured(result: subprocess.CompletedProcess[str], out: Path) -> None:
    # On failure perf_analyzer's own words are the finding: show all of them.
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "had error" not in result.stdout + result.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == CSV_HEADER
    rows = list(csv.DictReader(lines))
    assert len(rows) == 2
    assert sorted(int(row["Concurrency"]) for row in rows) == [1, 2]
    assert all(float(row["Inferences/Second"]) > 0 for row in rows)
    # It read our statistics extension: the server-side columns are filled in.
    assert all(int(row["Server Compute Infer"]) > 0 for row in rows)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_measures_trt_serve(server: ServerProcess, protocol: str, tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    _assert_measured(_perf_analyzer(server, protocol, out), out)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_with_system_shared_memory(
    server: ServerProcess, protocol: str, tmp_path: Path
) -> None:
    """Outputs written to shared memory are answered without parameters, as Triton does: perf_analyzer's
    C++ HTTP client reads any output 'parameters' as binary data and stopped with "attempt to access
    non-existing object member 'binary_data_size'" when they carried the region's name."""
    out = tmp_path / "out.csv"
    _assert_measured(_perf_analyzer(server, protocol, out, "--shared-memory", "system"), out)
