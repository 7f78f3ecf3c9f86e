"""A stopping server keeps to ``--exit-timeout-secs``, as Triton does: a Python instance still stuck in
``execute()`` when it is spent is killed then, every stuck instance at once (three of them took 30 s
one after another, and each took its process's 10 s grace on top of the timeout), as is one still
starting again after a crash, while an idle model still runs its ``finalize()``. A stop the timeout
cut short (requests still in flight at it, a process killed) exits 1, as tritonserver's does; a
client merely holding a stream open does not make it one."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient

from tests.support import (
    ECHO_X_CONFIG,
    STUCK_PYTHON_MODEL,
    ServerProcess,
    collect_stream,
    save_onnx,
    send_x_ignoring_errors,
    simple_inputs,
    wait_until,
    write_python_model,
    write_simple,
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
    assert server.stop(timeout=60) == 1
    took = time.monotonic() - began
    # The timeout, then a second for the finalize() nobody waits on; before, the timeout + 10 s.
    assert took < EXIT_TIMEOUT_S + 3, f"stopped in {took:.1f} s"
    assert (repo / "idle" / "finalized").read_text() == "ran"
    log = server.log()
    assert log.count("was still busy") == 3
    assert "failed to stop server: exit timeout expired with work unfinished: 3 inference requests" in log
    assert log.count("killed, still busy at the exit timeout") == 3
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
    assert server.stop(timeout=60) == 1
    took = time.monotonic() - began
    assert took < EXIT_TIMEOUT_S + 3, f"stopped in {took:.1f} s"  # before, initialize()'s 300 s
    log = server.log()
    assert "was still starting at the server's exit timeout: killed" in log
    assert "with work unfinished: model 'crashing' (crashing_0) killed while it started" in log
    _, alive = psutil.wait_procs(stubs, timeout=5)
    assert alive == []


# Answers after two seconds (past a one-second exit timeout, then it finishes), having said it began.
SLOW_ECHO = """
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.began = Path(args["model_repository"]) / "began"

    def execute(self, requests):
        self.began.write_text("yes")
        time.sleep(2)
        return [pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "X")]) for r in requests]
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_a_request_in_flight_at_the_exit_timeout_makes_the_exit_status_1(
    tmp_path: Path, workers: int
) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "slow", SLOW_ECHO, ECHO_X_CONFIG)
    args = ["--exit-timeout-secs=1", f"--frontend-workers={workers}"]
    server = ServerProcess([repo], args).start(tmp_path)
    sender = threading.Thread(target=send_x_ignoring_errors, args=(server.http_url, "slow"), daemon=True)
    sender.start()
    wait_until(lambda: (repo / "slow" / "began").exists())
    assert server.stop(timeout=60) == 1
    assert "exit timeout expired with work unfinished: 1 inference request in flight" in server.log()


def test_a_stream_held_open_with_nothing_in_flight_leaves_a_clean_stop(tmp_path: Path) -> None:
    """A gRPC client keeps its ModelStreamInfer stream open past the exit timeout, every request on it
    answered: Triton waits for it, then cuts it, and exits 0 (nothing was in flight)."""
    repo = tmp_path / "repo"
    write_simple(repo)
    server = ServerProcess([repo], ["--exit-timeout-secs=1"]).start(tmp_path)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    client.async_stream_infer("simple", simple_inputs(grpcclient, data))
    result, error = received.get(timeout=15)
    assert error is None and (result.as_numpy("OUTPUT0") == data * 2).all()
    try:
        assert server.stop(timeout=60) == 0
    finally:
        client.stop_stream()
    assert "work unfinished" not in server.log()


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
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    save_onnx(model, repo / "slow" / "1" / "model.onnx")
    (repo / "slow" / "config.pbtxt").write_text(SLOW_ONNX_CONFIG)


def test_a_native_call_running_past_the_exit_timeout_does_not_hold_the_process(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _slow_onnx_model(repo)
    write_simple(repo)
    traces = tmp_path / "trace.json"
    tracing = [
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
        f"--trace-config=triton,file={traces}",
    ]
    server = ServerProcess([repo], [f"--exit-timeout-secs={EXIT_TIMEOUT_S}", *tracing]).start(tmp_path)
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    grpcclient.InferenceServerClient(server.grpc_url).infer("simple", simple_inputs(grpcclient, data))
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
    # The answered request's trace was written before the process ended (it waited for the stop).
    assert any(entry.get("model_name") == "simple" for entry in json.loads(traces.read_text()))
