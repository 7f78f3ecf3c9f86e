"""Support for the trt perf tests: models for the perf server, ``trt perf`` as a subprocess, and a
minimal KServe-v2 server that records what it receives (no model-config call unless asked)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from onnx import TensorProto, helper

from tests.support import ROOT, save_onnx, write_python_model

# Short windows keep the suite fast; --allow-unstable because these tests check behaviour, not figures.
FAST = ["-p", "200", "--warmup", "100", "-s", "100", "-r", "4", "--allow-unstable"]


@dataclass
class PerfRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def report(self) -> dict[str, Any]:
        return json.loads(self.stdout)

    def __str__(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def run_perf(*args: str, timeout: float = 120) -> PerfRun:
    result = subprocess.run(
        [sys.executable, "-m", "trt", "perf", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return PerfRun(result.returncode, result.stdout, result.stderr)


def write_string_identity(repo: Path) -> None:
    """BYTES in, BYTES out: an ONNX Identity on TensorProto.STRING, variable length."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "string_identity",
        [helper.make_tensor_value_info("INPUT0", TensorProto.STRING, ["batch", "n"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.STRING, ["batch", "n"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    save_onnx(model, repo / "strings" / "1" / "model.onnx")
    (repo / "strings" / "config.pbtxt").write_text(
        'name: "strings"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    )


def write_accumulator(repo: Path) -> None:
    """A stateful sequence model: OUTPUT = running sum of INPUT since the sequence started. The server
    rejects a request of an unknown sequence without the start flag, so wrong flags show as errors."""
    one = helper.make_tensor("one", TensorProto.INT32, [1], [1])
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["one", "START"], ["keep"]),
            helper.make_node("Mul", ["ACC_IN", "keep"], ["kept"]),
            helper.make_node("Add", ["kept", "INPUT"], ["OUTPUT"]),
            helper.make_node("Identity", ["OUTPUT"], ["ACC_OUT"]),
        ],
        "accumulate",
        [
            helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 1])
            for n in ("INPUT", "START", "ACC_IN")
        ],
        [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 1]) for n in ("OUTPUT", "ACC_OUT")],
        [one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    save_onnx(model, repo / "accumulate" / "1" / "model.onnx")
    (repo / "accumulate" / "config.pbtxt").write_text(
        'name: "accumulate"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        "sequence_batching {\n  max_sequence_idle_microseconds: 5000000\n"
        '  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START '
        "int32_false_true: [ 0, 1 ] } ] } ]\n"
        '  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ]\n'
        '            initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } }'
        " ]\n}\n"
    )


# Like Triton's square_int32 example: IN = n -> n responses, then the final flag on its own.
SQUARE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            for index in range(count):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([index], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


ONE_INT32_IN_ONE_OUT = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def write_square(repo: Path) -> None:
    write_python_model(
        repo, "square", SQUARE, ONE_INT32_IN_ONE_OUT + "model_transaction_policy { decoupled: true }\n"
    )


FLAKY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.count = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.count += 1
            if self.count % 3 == 0:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("every third fails")))
            else:
                value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
"""


def write_flaky(repo: Path) -> None:
    """A Python model that answers every third request with an error."""
    write_python_model(repo, "flaky", FLAKY, ONE_INT32_IN_ONE_OUT)


@dataclass
class RecordingServer:
    """KServe v2 over HTTP/1.1 keep-alive, as MLServer and KServe serve it: metadata and infer (JSON
    tensors only), no statistics, and a model-config call only for models listed in ``configs``."""

    metadata: dict[str, dict[str, Any]]
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    received: list[dict[str, Any]] = field(default_factory=list)
    shm_calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (action, region, body)

    def __post_init__(self) -> None:
        owner = self
        self.lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                if parts == ["v2"]:
                    self._reply(200, {"name": "recording", "version": "0", "extensions": []})
                elif parts[:2] == ["v2", "models"] and len(parts) == 3 and parts[2] in owner.metadata:
                    self._reply(200, owner.metadata[parts[2]])
                elif parts[:2] == ["v2", "models"] and parts[-1] == "config" and parts[2] in owner.configs:
                    self._reply(200, owner.configs[parts[2]])
                else:
                    self._reply(404, {"error": f"not found: {self.path}"})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = self.path.strip("/").split("/")
                if parts[:2] == ["v2", "systemsharedmemory"]:
                    with owner.lock:
                        owner.shm_calls.append((parts[-1], parts[-2], json.loads(body) if body else {}))
                    self._reply(200, {})
                    return
                if parts[-1] != "infer" or parts[2] not in owner.metadata:
                    self._reply(404, {"error": f"not found: {self.path}"})
                    return
                header_length = self.headers.get("Inference-Header-Content-Length")
                request = json.loads(body[: int(header_length)] if header_length else body)
                request["_binary"] = header_length is not None
                with owner.lock:
                    owner.received.append(request)
                outputs = [
                    {"name": o["name"], "datatype": o["datatype"], "shape": [1], "data": [0]}
                    for o in owner.metadata[parts[2]]["outputs"]
                ]
                self._reply(200, {"model_name": parts[2], "outputs": outputs})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> RecordingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
