"""A stopping server keeps to ``--exit-timeout-secs``, as Triton does: a Python instance still stuck in
``execute()`` when it is spent is killed then, every stuck instance at once (three of them took 30 s
one after another, and each took its process's 10 s grace on top of the timeout), as is one still
starting again after a crash, while an idle model still runs its ``finalize()``."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import psutil

from tests.support import (
    ECHO_X_CONFIG,
    STUCK_PYTHON_MODEL,
    ServerProcess,
    save_onnx,
    send_x_ignoring_errors,
    wait_until,
    write_python_model,
)

STUCK_CONFIG = ECHO_X_CONFIG + "instance_group [ { count: 3 kind: KIND_CPU } ]\n"

IDLE_MODEL = """
from pathlib import Path


class TritonPythonModel:
    def initialize(self, args):
        self.finalized = Path(args["model_repository"]) / "finalized"

    def execute(self, requests):
        return []

    def finalize(self):
        self.finalized.write_text("ran")
"""

EXIT_TIMEOUT_S = 2


def test_the_exit_timeout_bounds_the_stop_and_idle_models_still_finalize(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "stuck", STUCK_PYTHON_MODEL, STUCK_CONFIG)
    write_python_model(repo, "idle", IDLE_MODEL, ECHO_X_CONFIG)
    server = ServerProcess([repo], [f"--exit-timeout-secs={EXIT_TIMEOUT_S}"]).start(tmp_path)
    assert server.process is not None
    stubs = psutil.Process(server.process.pid).children(recursive=True)
    assert len(stubs) == 4
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
    # The timeout, then a second for the finalize() nobody waits on; before, the timeout + 10 s.
    assert took < EXIT_TIMEOUT_S + 3, f"stopped in {took:.1f} s"
    assert (repo / "idle" / "finalized").read_text() == "ran"
    assert server.log().count("was still busy") == 3
    _, alive = psutil.wait_procs(stubs, timeout=5)
    assert alive == []


# Crashes on its first request; started again, its initialize() takes minutes (weights loading).
CRASHES_THEN_STARTS_SLOWLY = """
import os
import time
from pathlib import Path


class TritonPythonModel:
    def initialize(self, args):
        started = Path(args["model_repository"]) / "started"
        if started.exists():
            time.sleep(300)
        started.write_text("once")

    def execute(self, requests):
        os._exit(1)
"""


def test_a_process_starting_again_at_the_exit_timeout_is_killed_then(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "crashing", CRASHES_THEN_STARTS_SLOWLY, ECHO_X_CONFIG)
    server = ServerProcess([repo], [f"--exit-timeout-secs={EXIT_TIMEOUT_S}"]).start(tmp_path)
    assert server.process is not None
    send_x_ignoring_errors(server.http_url, "crashing")
    wait_until(lambda: "restarting it" in server.log())
    time.sleep(1)  # the new process is in its initialize()
    stubs = psutil.Process(server.process.pid).children(recursive=True)
    began = time.monotonic()
    assert server.stop(timeout=60) == 0
    took = time.monotonic() - began
    assert took < EXIT_TIMEOUT_S + 3, f"stopped in {took:.1f} s"  # before, initialize()'s 300 s
    assert "was still starting at the server's exit timeout: killed" in server.log()
    _, alive = psutil.wait_procs(stubs, timeout=5)
    assert alive == []


SLOW_ONNX_CONFIG = """
platform: "onnxruntime_onnx"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def _slow_onnx_model(repo: Path) -> None:
    """An ONNX model whose one inference takes seconds of native code (two 6000 x 6000 matrix
    products of its input broadcast): nothing in Python can interrupt it."""
    from onnx import TensorProto, helper, numpy_helper

    constants = [
        numpy_helper.from_array(np.array([6000, 6000], np.int64), "square"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    nodes = [
        helper.make_node("Expand", ["X", "square"], ["E"]),
        helper.make_node("MatMul", ["E", "E"], ["M"]),
        helper.make_node("MatMul", ["M", "E"], ["M2"]),
        helper.make_node("ReduceSum", ["M2"], ["S"], keepdims=0),
        helper.make_node("Reshape", ["S", "one"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes, "slow", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])], initializer=constants,
    )  # fmt: skip
    (repo / "slow" / "1").mkdir(parents=True)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    save_onnx(model, repo / "slow" / "1" / "model.onnx")
    (repo / "slow" / "config.pbtxt").write_text(SLOW_ONNX_CONFIG)


def test_a_native_call_running_past_the_exit_timeout_does_not_hold_the_process(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _slow_onnx_model(repo)
    server = ServerProcess([repo], [f"--exit-timeout-secs={EXIT_TIMEOUT_S}"]).start(tmp_path)
    sender = threading.Thread(target=send_x_ignoring_errors, args=(server.http_url, "slow"), daemon=True)
    sender.start()
    time.sleep(1)  # the inference has begun: seconds of matrix products on ONNX Runtime's threads
    began = time.monotonic()
    code = server.stop(timeout=60)
    took = time.monotonic() - began
    # The timeout, a second of the stop's own slack and two past it; before, the whole inference.
    assert took < EXIT_TIMEOUT_S + 5, f"stopped in {took:.1f} s"
    assert code == 1  # as tritonserver's after "Exit timeout expired"
    assert "exit timeout expired with models still running" in server.log()
