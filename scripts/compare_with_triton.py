"""trt and Triton side by side: the same requests to both, every difference in status and text printed.

Serves one generated repository of Python models (Triton's build here has only the Python backend) from
a real Triton (``../shared/peers/run-triton.sh``, set up by ``peers/setup.sh``) and from this checkout's
``trt serve``, sends each a battery of requests (HTTP: malformed bodies, wrong tensors, unknown models
and regions, the extension routes; gRPC: the same through raw ``ModelInfer`` messages and the other
RPCs; Python models that raise, return errors or the wrong number of responses; each model's served
config field by field) and prints every case whose status or text differs. Clients and Triton's own
tests match on these texts: a difference is either fixed or kept on purpose (the README's notes say
which). Never in CI: it needs the peers.

    python scripts/compare_with_triton.py [--peers /tmp/trt-peers] [--json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format
from rich.console import Console
from rich.markup import escape
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.server.backends.python.python_models import (  # noqa: E402
    ADD_SUB,
    ADD_SUB_CONFIG,
    DOUBLES,
    ONE_NUMBER,
    OWN_TYPES,
    OWN_TYPES_CONFIG,
)
from tests.support import free_port  # noqa: E402
from trt.protos import grpc_service_pb2 as pb  # noqa: E402
from trt.protos import grpc_service_pb2_grpc as pb_grpc  # noqa: E402

ANSWERS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        how = pb_utils.get_input_tensor_by_name(requests[0], "HOW").as_numpy()[0].decode()
        if how == "raise":
            raise ValueError("boom")
        if how == "model_exception":
            raise pb_utils.TritonModelException("model said no")
        if how == "error":
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError("bad thing")) for _ in requests]
        if how == "not_found":
            error = pb_utils.TritonError("not here", pb_utils.TritonError.NOT_FOUND)
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        if how == "none":
            return []
        if how == "bare":
            return pb_utils.InferenceResponse([])
        if how == "other_name":
            tensors = [pb_utils.Tensor("Z", np.zeros(1, np.float32))]
        else:
            tensors = [pb_utils.Tensor("OUT", np.array([how], dtype=object))]
        return [pb_utils.InferenceResponse(tensors) for _ in requests]
"""
ANSWERS_CONFIG = """
name: "answers"
backend: "python"
input [{ name: "HOW" data_type: TYPE_STRING dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_STRING dims: [ 1 ] }]
"""
# A decoupled model: N responses to N, an error response to a negative N.
COUNTS = """
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            sender = request.get_response_sender()
            if n < 0:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative")), flags=FINAL)
                continue
            for i in range(n):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], np.int32))]))
            sender.send(flags=FINAL)
"""
# An ensemble of DOUBLES (from the tests' Python models).
ENSEMBLE_CONFIG = (
    'platform: "ensemble"\n' + ONE_NUMBER + 'ensemble_scheduling { step [ { model_name: "doubles" '
    'model_version: -1 input_map { key: "N" value: "N" } output_map { key: "OUT" value: "OUT" } } ] }\n'
)
# A sequence model (its CORRID a number) that adds up each sequence's values.
TOTALS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy().ravel()[0]
            sequence = int(pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().ravel()[0])
            value = int(pb_utils.get_input_tensor_by_name(request, "X").as_numpy().ravel()[0])
            self.totals[sequence] = (0 if start else self.totals.get(sequence, 0)) + value
            total = np.array([[self.totals[sequence]]], np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", total)]))
        return responses
"""
TOTALS_CONFIG = """
backend: "python"
max_batch_size: 2
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
"""
FOUR = np.array([1, 2, 3, 4], np.float32).tobytes()


@dataclass
class Difference:
    protocol: str
    case: str
    triton: str
    trt: str
    status_differs: bool


def _write_repository(repo: Path) -> None:
    batched = ADD_SUB_CONFIG.replace('name: "add_sub"', 'name: "add_sub_b"\nmax_batch_size: 8')
    for name, source, config in (
        ("add_sub", ADD_SUB, ADD_SUB_CONFIG),
        ("add_sub_b", ADD_SUB, batched + "dynamic_batching { }\n"),
        ("answers", ANSWERS, ANSWERS_CONFIG),
        ("counts", COUNTS, 'backend: "python"\nmodel_transaction_policy { decoupled: true }\n' + ONE_NUMBER),
        ("doubles", DOUBLES, 'backend: "python"\n' + ONE_NUMBER),
        ("pair", "", ENSEMBLE_CONFIG),
        ("totals", TOTALS, TOTALS_CONFIG),
        ("own_types", OWN_TYPES, OWN_TYPES_CONFIG),
    ):
        (repo / name / "1").mkdir(parents=True)
        if source:
            (repo / name / "1" / "model.py").write_text(source)
        (repo / name / "config.pbtxt").write_text(config)
    # Models that cannot load, for the load requests' answers.
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "model.py").write_text("raise RuntimeError('cannot import')\n")
    (repo / "broken" / "config.pbtxt").write_text('backend: "python"\n' + ONE_NUMBER)
    (repo / "badcfg" / "1").mkdir(parents=True)
    (repo / "badcfg" / "1" / "model.py").write_text(DOUBLES)
    (repo / "badcfg" / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: oops\n')
    (repo / "noversion").mkdir()
    (repo / "noversion" / "config.pbtxt").write_text('backend: "python"\n' + ONE_NUMBER)


# Explicit mode, every model loaded at start, the ones that cannot load left unavailable: load requests
# are among the cases.
CONTROL_FLAGS = ("--model-control-mode=explicit", "--load-model=*", "--exit-on-error=false",
                 "--strict-readiness=false")  # fmt: skip


@contextmanager
def _servers(peers: Path, repo: Path, logs: Path) -> Iterator[tuple[list[int], list[int]]]:
    triton_ports, trt_ports = [free_port() for _ in range(3)], [free_port() for _ in range(3)]
    script = ROOT.parent / "shared" / "peers" / "run-triton.sh"
    triton = subprocess.Popen(
        ["bash", str(script), str(peers), str(repo), *map(str, triton_ports), *CONTROL_FLAGS],
        stdout=(logs / "triton.log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    ours = subprocess.Popen(
        [sys.executable, "-m", "trt", "serve", f"--model-repository={repo}", "--http-address=127.0.0.1",
         f"--http-port={trt_ports[0]}", "--grpc-address=127.0.0.1", f"--grpc-port={trt_ports[1]}",
         f"--metrics-port={trt_ports[2]}", *CONTROL_FLAGS,
         "--allow-client-shm=true"],  # Triton 2.51 takes client shared memory without the flag
        cwd=ROOT, stdout=(logs / "trt.log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        for port in (triton_ports[0], trt_ports[0]):
            _wait_ready(port)
        yield triton_ports, trt_ports
    finally:
        for process in (triton, ours):
            process.terminate()
            process.wait(30)


def _wait_ready(port: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if _http(port, "GET", "/v2/health/ready")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"no server became ready on port {port}")


def _http(
    port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        connection.request(method, path, body, headers or {})
        answer = connection.getresponse()
        data = answer.read()
    finally:
        connection.close()
    try:
        return answer.status, json.loads(data)
    except ValueError:
        return answer.status, data[:300].decode("latin-1")


def _json(document: Any) -> bytes:
    return json.dumps(document).encode()


def _tensor(name: str, shape: list[int], datatype: str = "FP32", data: Any = None) -> dict[str, Any]:
    return {
        "name": name,
        "shape": shape,
        "datatype": datatype,
        "data": [1, 2, 3, 4] if data is None else data,
    }


def _infer(*inputs: dict[str, Any], outputs: list[dict[str, Any]] | None = None) -> bytes:
    document: dict[str, Any] = {"inputs": list(inputs)}
    if outputs is not None:
        document["outputs"] = outputs
    return _json(document)


def _binary(size: int, attached: bytes) -> tuple[bytes, dict[str, str]]:
    first = {"name": "INPUT0", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": size}}
    header = _infer(first, _tensor("INPUT1", [4]))
    return header + attached, {"Inference-Header-Content-Length": str(len(header))}


HttpCase = tuple[str, str, str, bytes, dict[str, str]]  # name, method, path, body, headers


def http_cases() -> list[HttpCase]:
    first, second = _tensor("INPUT0", [4]), _tensor("INPUT1", [4])
    infer, batched = "/v2/models/add_sub/infer", "/v2/models/add_sub_b/infer"
    in_region = {"name": "INPUT0", "shape": [4], "datatype": "FP32",
                 "parameters": {"shared_memory_region": "nope", "shared_memory_byte_size": 16}}  # fmt: skip
    classified = [{"name": "OUTPUT0", "parameters": {"classification": 2}}]
    register = _json({"key": "/nope", "offset": 0, "byte_size": 16})
    cases: list[HttpCase] = [
        ("answered", "POST", infer, _infer(first, second), {}),
        ("empty body", "POST", infer, b"", {}),
        ("not JSON", "POST", infer, b"{x", {}),
        ("no inputs", "POST", infer, _json({}), {}),
        ("an input missing", "POST", infer, _infer(first), {}),
        ("an input the model lacks", "POST", infer, _infer(first, second, _tensor("INPUT9", [4])), {}),
        ("an input twice", "POST", infer, _infer(first, second, first), {}),
        ("wrong datatype", "POST", infer, _infer(_tensor("INPUT0", [4], "INT32"), second), {}),
        ("unknown datatype", "POST", infer, _infer(_tensor("INPUT0", [4], "FOO"), second), {}),
        ("wrong shape", "POST", infer, _infer(_tensor("INPUT0", [2, 2]), second), {}),
        ("too few elements", "POST", infer, _infer(_tensor("INPUT0", [4], data=[1, 2]), second), {}),
        ("an output the model lacks", "POST", infer, _infer(first, second, outputs=[{"name": "NOPE"}]), {}),
        ("classification", "POST", infer, _infer(first, second, outputs=classified), {}),
        ("no batch dimension", "POST", batched, _infer(first, second), {}),
        ("unknown model", "POST", "/v2/models/nope/infer", _infer(first, second), {}),
        ("unknown version", "POST", "/v2/models/add_sub/versions/9/infer", _infer(first, second), {}),
        ("binary part short", "POST", infer, *_binary(16, FOUR[:8])),
        ("binary part long", "POST", infer, *_binary(16, FOUR + b"xx")),
        ("unregistered region", "POST", infer, _infer(in_region, second), {}),
        ("config", "GET", "/v2/models/add_sub/config", b"", {}),
        ("config, batched", "GET", "/v2/models/add_sub_b/config", b"", {}),
        ("metadata", "GET", "/v2/models/add_sub", b"", {}),
        ("unknown model's readiness", "GET", "/v2/models/nope/ready", b"", {}),
        ("unknown model's statistics", "GET", "/v2/models/nope/stats", b"", {}),
        ("unknown model's trace settings", "GET", "/v2/models/nope/trace/setting", b"", {}),
        ("load an unknown model", "POST", "/v2/repository/models/nope/load", b"", {}),
        ("register a missing key", "POST", "/v2/systemsharedmemory/region/x/register", register, {}),
        ("load a model whose model.py raises", "POST", "/v2/repository/models/broken/load", b"", {}),
        ("load a model with no version", "POST", "/v2/repository/models/noversion/load", b"", {}),
        ("load a model whose config is broken", "POST", "/v2/repository/models/badcfg/load", b"", {}),
        ("load a model that is not there", "POST", "/v2/repository/models/missing/load", b"", {}),
        ("unload a model that is not there", "POST", "/v2/repository/models/missing/unload", b"", {}),
        (
            "generate",
            "POST",
            "/v2/models/add_sub/generate",
            _json({"INPUT0": [1] * 4, "INPUT1": [2] * 4}),
            {},
        ),
    ]
    for how in ("raise", "model_exception", "error", "not_found", "none", "bare", "other_name", "fine"):
        body = _infer({"name": "HOW", "shape": [1], "datatype": "BYTES", "data": [how]})
        cases.append((f"a Python model: {how}", "POST", "/v2/models/answers/infer", body, {}))
    body = _infer({"name": "X", "shape": [2], "datatype": "INT32", "data": [3, -5]})
    cases.append(
        (
            "a Python model answering in other types than its config's",
            "POST",
            "/v2/models/own_types/infer",
            body,
            {},
        )
    )
    for model, n in (("doubles", 3), ("doubles", -1), ("pair", 3), ("pair", -1), ("counts", 2)):
        body = _infer({"name": "N", "shape": [1], "datatype": "INT32", "data": [n]})
        cases.append((f"infer {model}, N={n}", "POST", f"/v2/models/{model}/infer", body, {}))
    for route in ("generate", "generate_stream"):
        for model, n in (("doubles", 2), ("doubles", -1), ("counts", 2), ("counts", 0), ("counts", -1)):
            cases.append(
                (f"{route} {model}, N={n}", "POST", f"/v2/models/{model}/{route}", _json({"N": n}), {})
            )
    return cases + _sequence_cases()


def _sequence_cases() -> list[HttpCase]:
    """One after another (a sequence's requests depend on the ones before)."""
    path = "/v2/models/totals/infer"
    cases: list[HttpCase] = []
    for name, parameters, rows in (
        ("no sequence id", {}, 1),
        ("a sequence starts", {"sequence_id": 7, "sequence_start": True}, 1),
        ("it goes on", {"sequence_id": 7}, 1),
        ("it ends", {"sequence_id": 7, "sequence_end": True}, 1),
        ("after its end, without START", {"sequence_id": 7}, 1),
        ("two rows", {"sequence_id": 8, "sequence_start": True}, 2),
        ("a string id for a numeric CORRID", {"sequence_id": "abc", "sequence_start": True}, 1),
        ("id 0", {"sequence_id": 0, "sequence_start": True}, 1),
    ):
        tensor = {"name": "X", "shape": [rows, 1], "datatype": "INT32", "data": [[1]] * rows}
        cases.append(
            (f"sequence: {name}", "POST", path, _json({"inputs": [tensor], "parameters": parameters}), {})
        )
    return cases


def _grpc_request(**fields: Any) -> pb.ModelInferRequest:
    inputs = fields.pop("inputs", [("INPUT0", [4], "FP32"), ("INPUT1", [4], "FP32")])
    raw = fields.pop("raw", [FOUR, FOUR])
    request = pb.ModelInferRequest(model_name=fields.pop("model", "add_sub"), **fields)
    for name, shape, datatype in inputs:
        request.inputs.append(
            pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)
        )
    request.raw_input_contents.extend(raw)
    return request


def _number_request(model: str, n: int) -> pb.ModelInferRequest:
    return _grpc_request(model=model, inputs=[("N", [1], "INT32")], raw=[np.array([n], np.int32).tobytes()])


def grpc_cases() -> list[tuple[str, str, Any]]:
    first, second = ("INPUT0", [4], "FP32"), ("INPUT1", [4], "FP32")
    return [
        ("answered", "ModelInfer", _grpc_request()),
        ("unknown model", "ModelInfer", _grpc_request(model="nope")),
        ("unknown version", "ModelInfer", _grpc_request(model_version="7")),
        ("one raw entry short", "ModelInfer", _grpc_request(raw=[FOUR])),
        ("one raw entry over", "ModelInfer", _grpc_request(raw=[FOUR, FOUR, FOUR])),
        ("a raw entry short", "ModelInfer", _grpc_request(raw=[FOUR[:8], FOUR])),
        ("wrong shape", "ModelInfer", _grpc_request(inputs=[("INPUT0", [2, 2], "FP32"), second])),
        ("negative dimension", "ModelInfer", _grpc_request(inputs=[("INPUT0", [-4], "FP32"), second])),
        ("wrong datatype", "ModelInfer", _grpc_request(inputs=[("INPUT0", [4], "INT32"), second])),
        ("an input missing", "ModelInfer", _grpc_request(inputs=[first], raw=[FOUR])),
        ("no batch dimension", "ModelInfer", _grpc_request(model="add_sub_b")),
        ("a decoupled model", "ModelInfer", _number_request("counts", 2)),
        ("an ensemble whose step fails", "ModelInfer", _number_request("pair", -1)),
        ("config", "ModelConfig", pb.ModelConfigRequest(name="add_sub")),
        ("unknown model's config", "ModelConfig", pb.ModelConfigRequest(name="nope")),
        ("unknown model's trace settings", "TraceSetting", pb.TraceSettingRequest(model_name="nope")),
        ("unregister an unknown region", "SystemSharedMemoryUnregister",
         pb.SystemSharedMemoryUnregisterRequest(name="nope")),
        ("register a missing key", "SystemSharedMemoryRegister",
         pb.SystemSharedMemoryRegisterRequest(name="x", key="/nope", byte_size=16)),
    ]  # fmt: skip


def _grpc_call(port: int, method: str, message: Any) -> tuple[str, Any]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        try:
            reply = getattr(stub, method)(message, timeout=20)
        except grpc.RpcError as error:
            return error.code().name, error.details()
        return "OK", json_format.MessageToDict(reply, preserving_proto_field_name=True)


def compare(peers: Path) -> list[Difference]:
    differences = []
    with tempfile.TemporaryDirectory(prefix="compare_with_triton_") as folder:
        repo = Path(folder) / "repo"
        _write_repository(repo)
        with _servers(peers, repo, Path(folder)) as (triton, ours):
            runs: list[tuple[str, str, Callable[[int], tuple[Any, Any]], int, int]] = []
            for case, method, path, body, headers in http_cases():
                to_http = partial(_http, method=method, path=path, body=body, headers=headers)
                runs.append(("http", case, to_http, triton[0], ours[0]))
            for case, rpc, message in grpc_cases():
                runs.append(
                    ("grpc", case, partial(_grpc_call, method=rpc, message=message), triton[1], ours[1])
                )
            for protocol, case, send, triton_port, trt_port in runs:
                theirs, mine = send(triton_port), send(trt_port)
                if theirs != mine:
                    differed = theirs[0] != mine[0]
                    differences.append(
                        Difference(protocol, case, json.dumps(theirs)[:400], json.dumps(mine)[:400], differed)
                    )
    return differences


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--peers", type=Path, default=Path("/tmp/trt-peers"))
    parser.add_argument("--json", action="store_true", help="print the differences as JSON")
    args = parser.parse_args()
    differences = compare(args.peers)
    if args.json:
        print(json.dumps([asdict(d) for d in differences], indent=2))
        return
    table = Table(title=f"{len(differences)} differences from Triton (status, then text)", show_lines=True)
    for column in ("protocol", "case", "Triton", "trt"):
        table.add_column(column, overflow="fold")
    for difference in differences:
        style = "bold red" if difference.status_differs else ""
        texts = escape(difference.triton), escape(difference.trt)
        table.add_row(difference.protocol, difference.case, *texts, style=style)
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
