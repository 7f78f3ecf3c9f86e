"""A server stopping releases every model's instances side by side: a Python instance stuck in
``execute()`` gets its process's 10 s grace before it is killed, and three of them took 30 s one after
another on top of ``--exit-timeout-secs``."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil

from tests.support import (
    ECHO_X_CONFIG,
    STUCK_PYTHON_MODEL,
    ServerProcess,
    send_x_ignoring_errors,
    write_python_model,
)

STUCK_CONFIG = ECHO_X_CONFIG + "instance_group [ { count: 3 kind: KIND_CPU } ]\n"


def test_three_stuck_instances_are_released_side_by_side(tmp_path: Path) -> None:
    write_python_model(tmp_path / "repo", "stuck", STUCK_PYTHON_MODEL, STUCK_CONFIG)
    server = ServerProcess([tmp_path / "repo"], ["--exit-timeout-secs=1"]).start(tmp_path)
    assert server.process is not None
    stubs = psutil.Process(server.process.pid).children(recursive=True)
    senders = [
        threading.Thread(target=send_x_ignoring_errors, args=(server.http_url, "stuck"), daemon=True)
        for _ in range(3)
    ]
    for sender in senders:
        sender.start()
    time.sleep(1)  # each instance is now stuck in execute()
    began = time.monotonic()
    assert server.stop(timeout=60) == 0
    took = time.monotonic() - began
    assert took < 20, f"stopped in {took:.1f} s"  # 1 s + one 10 s grace; before, 31 s
    _, alive = psutil.wait_procs(stubs, timeout=5)
    assert alive == []
