"""`trt serve` as a launch script sees it: tritonserver's flag forms, start-up output, shutdown."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from tests.support import ROOT, ServerProcess, write_python_model, write_simple
from trt.server.compiled import compiled_modules


def test_json_summary_lists_endpoints_and_models(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    proc = ServerProcess([repo], ["--json", "--allow-metrics=false"]).start(tmp_path)
    try:
        summary = proc.json_summary()
        assert summary["endpoints"] == {"http": proc.http_url, "grpc": proc.grpc_url}
        assert summary["models"] == [{"name": "simple", "version": "1", "state": "READY", "reason": ""}]
        assert summary["compiled_modules"] == list(compiled_modules())  # this tree's build, either way
    finally:
        proc.stop()


def test_boolean_flags_take_true_false_and_reject_anything_else(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trt", "serve", "--strict-readiness=maybe"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "--strict-readiness takes true or false" in result.stderr + result.stdout


def test_a_port_in_use_is_reported_and_the_server_exits(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = ServerProcess([repo])
        proc.http_port = taken.getsockname()[1]
        proc.start(tmp_path, wait=False)
        assert proc.process is not None
        assert proc.process.wait(60) == 1
    assert f"127.0.0.1:{proc.http_port}" in proc.log()


def test_sigterm_lets_in_flight_requests_finish(tmp_path: Path) -> None:
    # cnn_onnx at batch 32 takes ~10 ms: eight such requests queue up behind one instance.
    proc = ServerProcess([ROOT / "model_repository"], ["--exit-timeout-secs=20"]).start(tmp_path)
    images = np.random.default_rng(0).standard_normal((32, 3, 64, 64)).astype(np.float32).tobytes()
    header = json.dumps(
        {
            "inputs": [
                {"name": "input", "shape": [32, 3, 64, 64], "datatype": "FP32",
                 "parameters": {"binary_data_size": len(images)}}
            ],
            "outputs": [{"name": "logits", "parameters": {"binary_data": True}}],
        }
    ).encode()  # fmt: skip
    connections = [http.client.HTTPConnection("127.0.0.1", proc.http_port, timeout=30) for _ in range(8)]
    for connection in connections:
        connection.connect()
    statuses: list[int] = []

    def send(connection: http.client.HTTPConnection) -> None:
        connection.request(
            "POST", "/v2/models/cnn_onnx/infer", header + images,
            {"Inference-Header-Content-Length": str(len(header))},
        )  # fmt: skip
        response = connection.getresponse()
        response.read()
        statuses.append(response.status)

    threads = [threading.Thread(target=send, args=(c,)) for c in connections]
    for thread in threads:
        thread.start()
    time.sleep(0.03)
    assert proc.process is not None
    proc.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(30)
    assert proc.process.wait(30) == 0
    assert statuses == [200] * 8


def test_help_lists_serve() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trt", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    assert "serve" in result.stdout


# Fails its first initialize(): a marker file beside it says whether this is a second try.
FAILS_ONCE = """
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        marker = os.path.join(os.path.dirname(__file__), "tried")
        if not os.path.exists(marker):
            open(marker, "w").close()
            raise pb_utils.TritonModelException("not this time")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "X")]) for r in requests]
"""

FAILS_ONCE_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def _states_with_flaky_model(tmp_path: Path, *flags: str) -> dict[str, str]:
    repo = tmp_path / "repo"
    write_python_model(repo, "flaky", FAILS_ONCE, FAILS_ONCE_CONFIG)
    write_simple(repo)
    proc = ServerProcess([repo], ["--exit-on-error=false", "--strict-readiness=false", *flags])
    proc.start(tmp_path)
    try:
        connection = http.client.HTTPConnection(proc.http_url)
        connection.request("POST", "/v2/repository/index", body="{}")
        return {entry["name"]: entry["state"] for entry in json.loads(connection.getresponse().read())}
    finally:
        proc.stop()


def test_model_load_retry_count_tries_a_failed_version_again(tmp_path: Path) -> None:
    assert _states_with_flaky_model(tmp_path / "retried", "--model-load-retry-count=1") == {
        "flaky": "READY",
        "simple": "READY",
    }
    assert _states_with_flaky_model(tmp_path / "once") == {"flaky": "UNAVAILABLE", "simple": "READY"}
