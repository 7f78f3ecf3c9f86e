"""NVIDIA's perf_analyzer loads and drives trt serve (it needs the model-config call and binary tensors).

perf_analyzer is not installed in CI: this runs where ../shared/peers/setup.sh put it
($TRT_PERF_ANALYZER, or /tmp/trt-peers/perf/perf_analyzer) and is skipped elsewhere.
"""

from __future__ import annotations

import csv
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import ServerProcess

CANDIDATES = [os.environ.get("TRT_PERF_ANALYZER", ""), "/tmp/trt-peers/perf/perf_analyzer"]
PERF_ANALYZER = next((c for c in CANDIDATES if c and os.path.exists(c)), None)


@pytest.mark.skipif(PERF_ANALYZER is None, reason="perf_analyzer not installed (see ../shared/PEERS.md)")
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_measures_trt_serve(server: ServerProcess, protocol: str, tmp_path: Path) -> None:
    assert PERF_ANALYZER is not None
    url = server.http_url if protocol == "http" else server.grpc_url
    out = tmp_path / "out.csv"
    result = subprocess.run(
        [PERF_ANALYZER, "-m", "simple", "-u", url, "-i", protocol, "--concurrency-range", "1:2",
         "-p", "1000", "-s", "50", "-r", "5", "-f", str(out)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 2
    assert all(float(row["Inferences/Second"]) > 0 for row in rows)
    assert "Server Compute Infer" in rows[0]  # it read our statistics extension
