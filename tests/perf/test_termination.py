"""``trt perf`` ended by a signal takes its load generators with it. Before, its forked workers
outlived it and went on sending load to the server for good, whether it was sent SIGTERM or SIGKILL;
with SIGTERM it now ends as on Ctrl-C (exit 130, ``interrupted``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import tritonclient.http as httpclient

from tests.perf.perf_support import FAST, run_perf
from tests.support import ROOT, ServerProcess, still_running, wait_until


def _successes(client: httpclient.InferenceServerClient) -> int:
    stats = client.get_inference_statistics("simple")["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_trt_perf_takes_its_load_generators_with_it(
    perf_server: ServerProcess, signal_number: int, tmp_path: Path
) -> None:
    client = httpclient.InferenceServerClient(perf_server.http_url)
    # Files, not pipes: a worker that outlived it would hold a pipe open.
    output = (tmp_path / "perf.log").open("w")
    perf = subprocess.Popen(
        [sys.executable, "-m", "trt", "perf", "-m", "simple", "-u", perf_server.http_url,
         "--concurrency-range", "4", "--measurement-interval", "60000"],
        cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until(lambda: bool(psutil.Process(perf.pid).children(recursive=True)), 60)
        workers = psutil.Process(perf.pid).children(recursive=True)
        before = _successes(client)
        wait_until(lambda: _successes(client) > before + 100, 60)
        os.kill(perf.pid, signal_number)
        perf.wait(timeout=60)
    finally:
        if perf.poll() is None:
            perf.kill()
        output.close()
    running = still_running(workers, timeout=10)
    assert running == [], f"{len(running)} load generator(s) outlived trt perf"
    settled = _successes(client)
    time.sleep(1)
    assert _successes(client) == settled  # no load from anyone any more
    if signal_number == signal.SIGTERM:
        log = (tmp_path / "perf.log").read_text()
        assert perf.returncode == 130, log
        assert "interrupted" in log


def _perf_with_shared_memory(server: ServerProcess, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "trt", "perf", "-m", "simple", "-u", server.http_url, "--shared-memory",
         "system", "--concurrency-range", "2", "--measurement-interval", "60000"],
        cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip


def test_the_regions_a_killed_trt_perf_left_registered_are_released_by_the_next_run(
    perf_server: ServerProcess, tmp_path: Path
) -> None:
    """A SIGKILL leaves no chance to unregister: the server kept both regions mapped for good. The next
    run with shared memory releases them, and only them: a run still going keeps its own."""
    client = httpclient.InferenceServerClient(perf_server.http_url)

    def registered() -> set[str]:
        return {region["name"] for region in client.get_system_shared_memory_status()}

    killed, living = (_perf_with_shared_memory(perf_server, tmp_path / f"{n}.log") for n in ("k", "l"))
    try:
        regions = {
            name: {f"trt_perf_{p.pid}_in", f"trt_perf_{p.pid}_out"}
            for name, p in (("killed", killed), ("living", living))
        }
        wait_until(lambda: regions["killed"] | regions["living"] <= registered(), 60)
        killed.kill()
        killed.wait(timeout=30)
        assert regions["killed"] <= registered()

        run = run_perf("-m", "simple", "-u", perf_server.http_url, "--shared-memory", "system",
                       "--concurrency", "1", *FAST)  # fmt: skip
        assert run.returncode == 0, run
        assert "released 2 shared-memory region(s)" in run.stderr, run
        left = registered()
        assert not regions["killed"] & left
        assert regions["living"] <= left
        assert not [name for name in regions["killed"] if (Path("/dev/shm") / name).exists()]
    finally:
        for perf in (killed, living):
            if perf.poll() is None:
                perf.terminate()
                perf.wait(timeout=30)
    assert not regions["living"] & registered()  # it let its own go as it ended
