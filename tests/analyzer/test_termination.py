"""``trt analyze`` ended by a signal stops the scratch ``trt serve`` it measures on. Before, the
server (and the load generators measuring it) outlived it for good, serving from a temporary folder
nobody removed. On SIGTERM it ends as on Ctrl-C (exit 130, the checkpoint kept) and removes the
folder; on SIGKILL the kernel sends the server SIGTERM (``PR_SET_PDEATHSIG``), and the folder is
left for the next run to remove."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.analyzer.test_analyze import SPACE, TARGET, write_mlp
from tests.support import ROOT, still_running
from trt.analyzer.deployment import remove_abandoned_scratch


def _scratch_server(analyze: subprocess.Popen[bytes]) -> psutil.Process | None:
    for child in psutil.Process(analyze.pid).children():
        if "serve" in child.cmdline():
            return child
    return None


def _option(process: psutil.Process, name: str) -> str:
    return next(arg.split("=", 1)[1] for arg in process.cmdline() if arg.startswith(f"{name}="))


def _live(port: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/live", timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_trt_analyze_stops_its_scratch_server(tmp_path: Path, signal_number: int) -> None:
    write_mlp(tmp_path / "repo")
    output = (tmp_path / "analyze.log").open("w")  # not a pipe: a process that outlived it holds one
    analyze = subprocess.Popen(
        [sys.executable, "-m", "trt", "analyze", "mlp", "-r", str(tmp_path / "repo"), "--target-p99", TARGET,
         "--output-dir", str(tmp_path / "out"), *SPACE],
        cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        server = _scratch_server(analyze)
        while (server is None or not _live(_option(server, "--http-port"))) and time.monotonic() < deadline:
            time.sleep(0.2)
            server = server or _scratch_server(analyze)
        assert server is not None, (tmp_path / "analyze.log").read_text()
        scratch_repository = Path(_option(server, "--model-repository"))
        time.sleep(1)  # measuring
        started = psutil.Process(analyze.pid).children(recursive=True)
        os.kill(analyze.pid, signal_number)
        analyze.wait(timeout=90)
    finally:
        if analyze.poll() is None:
            analyze.kill()
        output.close()
    running = still_running(started, timeout=60)
    assert running == [], f"{len(running)} of its processes outlived trt analyze"
    if signal_number == signal.SIGTERM:
        log = (tmp_path / "analyze.log").read_text()
        assert analyze.returncode == 130, log
        assert "interrupted" in log
        assert not scratch_repository.exists()
    else:  # killed outright, it leaves the folder and the server's log beside it, for the next run
        log = scratch_repository.with_name(f"{scratch_repository.name}.log")
        assert scratch_repository.exists() and log.exists()
        an_hour_ago = time.time() - 3600
        os.utime(log, (an_hour_ago, an_hour_ago))  # as the next run finds it (a fresh log is spared)
        assert scratch_repository in remove_abandoned_scratch(scratch_repository.parent)
        assert not scratch_repository.exists() and not log.exists()
