"""A Python model's process ends when its server has gone (killed, crashed, stopped while it loads),
even from an ``execute()`` or ``initialize()`` that never returns: given the grace a stopping server
gives, it finishes what it runs, runs ``finalize()`` and ends; one still stuck after the grace ends
anyway. Before, such a process lived on for good, holding its memory (and its GPU, where it has one)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import psutil

from tests.support import (
    ECHO_X_CONFIG,
    STUCK_PYTHON_MODEL,
    ServerProcess,
    send_x_ignoring_errors,
    still_running,
    wait_until,
    write_python_model,
)
from trt.server.backends.python.stub._ipc import FINALIZE_GRACE_S

SLOW = """
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.finalized = Path(args["model_repository"]) / "finalized"

    def execute(self, requests):
        time.sleep(3)
        return [pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "X")]) for r in requests]

    def finalize(self):
        self.finalized.write_text("ran")
"""

LOADS_FOR_GOOD = """
import time


class TritonPythonModel:
    def initialize(self, args):
        while True:
            time.sleep(1)
"""


def test_model_processes_end_after_their_server_is_killed_even_when_stuck_in_execute(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "slow", SLOW, ECHO_X_CONFIG)
    write_python_model(repo, "stuck", STUCK_PYTHON_MODEL, ECHO_X_CONFIG)
    server = ServerProcess([repo]).start(tmp_path)
    assert server.process is not None
    model_processes = psutil.Process(server.process.pid).children(recursive=True)
    assert len(model_processes) == 2
    for model in ("slow", "stuck"):
        threading.Thread(target=send_x_ignoring_errors, args=(server.http_url, model), daemon=True).start()
    time.sleep(1)  # both are in execute(): one for 3 s, the other for good

    os.kill(server.process.pid, signal.SIGKILL)
    killed = time.monotonic()
    server.process.wait()
    running = still_running(model_processes, timeout=FINALIZE_GRACE_S + 8)
    assert running == [], f"{len(running)} model process(es) outlived their server"
    took = time.monotonic() - killed
    assert took >= FINALIZE_GRACE_S - 1, f"the stuck process ended {took:.1f} s after its server"
    assert (repo / "slow" / "finalized").read_text() == "ran"  # the slow one finished and ran finalize()


def test_a_model_process_ends_after_its_server_is_stopped_while_initialize_runs(tmp_path: Path) -> None:
    write_python_model(tmp_path / "repo", "loading", LOADS_FOR_GOOD, ECHO_X_CONFIG)
    server = ServerProcess([tmp_path / "repo"]).start(tmp_path, wait=False)
    assert server.process is not None
    server_process = psutil.Process(server.process.pid)
    wait_until(lambda: bool(server_process.children(recursive=True)), 60)
    model_processes = server_process.children(recursive=True)
    time.sleep(1)  # in initialize()

    server.process.terminate()  # while loading, the server ends at once (as tritonserver does)
    server.process.wait(timeout=30)
    running = still_running(model_processes, timeout=FINALIZE_GRACE_S + 8)
    assert running == [], "the model process outlived its server"
