"""A server stopping releases every model's instances side by side: a Python instance stuck in
``execute()`` gets its process's 10 s grace before it is killed, and three of them took 30 s one after
another on top of ``--exit-timeout-secs``."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import psutil
import tritonclient.http as httpclient

from tests.support import ServerProcess, write_python_model

STUCK = """
import time


class TritonPythonModel:
    def execute(self, requests):
        while True:
            time.sleep(1)
"""

STUCK_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 3 kind: KIND_CPU } ]
"""


def _send(url: str) -> None:
    client = httpclient.InferenceServerClient(url, network_timeout=120)
    tensor = httpclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.ones(1, np.float32))
    try:
        client.infer("stuck", [tensor])
    except Exception:
        pass  # the server stops under it: the connection closes


def test_three_stuck_instances_are_released_side_by_side(tmp_path: Path) -> None:
    write_python_model(tmp_path / "repo", "stuck", STUCK, STUCK_CONFIG)
    server = ServerProcess([tmp_path / "repo"], ["--exit-timeout-secs=1"]).start(tmp_path)
    assert server.process is not None
    stubs = psutil.Process(server.process.pid).children(recursive=True)
    senders = [threading.Thread(target=_send, args=(server.http_url,), daemon=True) for _ in range(3)]
    for sender in senders:
        sender.start()
    time.sleep(1)  # each instance is now stuck in execute()
    began = time.monotonic()
    assert server.stop(timeout=60) == 0
    took = time.monotonic() - began
    assert took < 20, f"stopped in {took:.1f} s"  # 1 s + one 10 s grace; before, 31 s
    _, alive = psutil.wait_procs(stubs, timeout=5)
    assert alive == []
