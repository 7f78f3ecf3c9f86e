"""BF16 tensors end to end, as current tritonclient sends and reads them (``ml_dtypes.bfloat16`` arrays):
through ONNX Runtime, TorchScript, OpenVINO and Python models (DLPack, as in Triton), over HTTP
(binary only: JSON is refused both ways in Triton's words) and gRPC, with warm-up samples of BF16 data."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from tests.support import ServerProcess, save_onnx, write_python_model

BF16 = ml_dtypes.bfloat16
# Values bfloat16 holds exactly (8 bits of mantissa), so that every comparison below is exact.
X = np.array([[1.5, -2.25, 3.0, 0.0078125], [-0.5, 256.0, 1e-3, -7.0]], dtype=BF16)
W = np.array([0.1, 2.5, -3.75, 1000.0], dtype=np.float32)

ONNX_CONFIG = """
name: "bf16_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "X" data_type: TYPE_BF16 dims: [ 4 ] },
  { name: "W" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "Y" data_type: TYPE_BF16 dims: [ 4 ] },
  { name: "Z" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "V" data_type: TYPE_BF16 dims: [ 4 ] }
]
model_warmup [ {
  name: "random bf16"
  batch_size: 2
  inputs { key: "X" value: { data_type: TYPE_BF16 dims: [ 4 ] random_data: true } }
  inputs { key: "W" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
} ]
"""
TORCH_CONFIG = """
name: "bf16_torch"
backend: "pytorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_BF16 dims: [ 4 ] } ]
output [
  { name: "OUTPUT__0" data_type: TYPE_BF16 dims: [ 4 ] },
  { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""
OPENVINO_CONFIG = """
name: "bf16_openvino"
backend: "openvino"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_BF16 dims: [ 2, 4 ] } ]
output [ { name: "Y" data_type: TYPE_BF16 dims: [ 2, 4 ] } ]
"""


# Triton's way with BF16 in a Python model: DLPack to torch and back (as_numpy() refuses it).
PYTHON_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils
from torch.utils.dlpack import from_dlpack, to_dlpack

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            try:
                x.as_numpy()
                refusal = "as_numpy() took BF16"
            except pb_utils.TritonModelException as exc:
                refusal = str(exc)
            doubled = from_dlpack(x.to_dlpack()) * 2
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor.from_dlpack("Y", to_dlpack(doubled)),
                pb_utils.Tensor("REFUSAL", np.array([refusal.encode()], dtype=np.object_)),
                pb_utils.Tensor("DTYPE", np.array([x.triton_dtype()], dtype=np.int32)),
            ]))
        return responses
"""
PYTHON_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_BF16 dims: [ -1, -1 ] } ]
output [
  { name: "Y" data_type: TYPE_BF16 dims: [ -1, -1 ] },
  { name: "REFUSAL" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "DTYPE" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""


def _save_graph(repo: Path, name: str, graph: object, config: str | None) -> None:
    """``graph`` as ``name``'s version 1 (opset 17), with ``config`` or none (auto-completed)."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    save_onnx(model, repo / name / "1" / "model.onnx")
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)


def _write_onnx(repo: Path) -> None:
    """Y = X and Z = X as FP32 (bfloat16 passed through and widened), V = W narrowed to bfloat16."""
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["X"], ["Y"]),
            helper.make_node("Cast", ["X"], ["Z"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["W"], ["V"], to=TensorProto.BFLOAT16),
        ],
        "bf16",
        [
            helper.make_tensor_value_info("X", TensorProto.BFLOAT16, ["batch", 4]),
            helper.make_tensor_value_info("W", TensorProto.FLOAT, ["batch", 4]),
        ],
        [
            helper.make_tensor_value_info("Y", TensorProto.BFLOAT16, ["batch", 4]),
            helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("V", TensorProto.BFLOAT16, ["batch", 4]),
        ],
    )
    _save_graph(repo, "bf16_onnx", graph, ONNX_CONFIG)


NARROW_CONFIG = """
name: "bf16_narrow"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "W" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "V" data_type: TYPE_BF16 dims: [ 4 ] } ]
"""


def _write_onnx_narrowing(repo: Path) -> None:
    """V = W narrowed to bfloat16: a BF16 output of a model that a generate request can reach."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["W"], ["V"], to=TensorProto.BFLOAT16)],
        "bf16_narrow",
        [helper.make_tensor_value_info("W", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("V", TensorProto.BFLOAT16, [4])],
    )
    _save_graph(repo, "bf16_narrow", graph, NARROW_CONFIG)


def _write_onnx_with_text(repo: Path) -> None:
    """A BF16 input beside a string one: ONNX Runtime's Python API cannot feed both."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"]), helper.make_node("Identity", ["S"], ["T"])],
        "bf16_text",
        [
            helper.make_tensor_value_info("X", TensorProto.BFLOAT16, [2]),
            helper.make_tensor_value_info("S", TensorProto.STRING, [2]),
        ],
        [
            helper.make_tensor_value_info("Y", TensorProto.BFLOAT16, [2]),
            helper.make_tensor_value_info("T", TensorProto.STRING, [2]),
        ],
    )
    _save_graph(repo, "bf16_text", graph, None)


def _write_torch(repo: Path) -> bool:
    try:
        import torch
    except ImportError:
        return False

    class Doubler(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x * 2, x.float()

    (repo / "bf16_torch" / "1").mkdir(parents=True)
    torch.jit.script(Doubler()).save(str(repo / "bf16_torch" / "1" / "model.pt"))
    (repo / "bf16_torch" / "config.pbtxt").write_text(TORCH_CONFIG)
    return True


def _write_openvino(repo: Path) -> bool:
    try:
        import openvino as ov
        import openvino.opset13 as ops
    except ImportError:
        return False
    x = ops.parameter([2, 4], ov.Type.bf16, name="X")
    two = ops.convert(ops.constant(np.array([2.0], dtype=np.float32)), "bf16")
    y = ops.multiply(x, two)
    y.output(0).get_tensor().set_names({"Y"})
    (repo / "bf16_openvino" / "1").mkdir(parents=True)
    ov.save_model(
        ov.Model([y], [x], "bf16"), str(repo / "bf16_openvino" / "1" / "model.xml"), compress_to_fp16=False
    )
    (repo / "bf16_openvino" / "config.pbtxt").write_text(OPENVINO_CONFIG)
    return True


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, set[str]]]:
    repo = tmp_path_factory.mktemp("bf16_repo")
    _write_onnx(repo)
    _write_onnx_narrowing(repo)
    _write_onnx_with_text(repo)
    models = {"bf16_onnx", "bf16_narrow"}
    if _write_torch(repo):
        models.add("bf16_torch")
    if _write_openvino(repo):
        models.add("bf16_openvino")
    if "bf16_torch" in models:  # the Python model's DLPack needs torch too
        write_python_model(repo, "bf16_python", PYTHON_MODEL, PYTHON_CONFIG)
        models.add("bf16_python")
    process = ServerProcess([repo], ["--exit-on-error=false"]).start(tmp_path_factory.mktemp("bf16_logs"))
    yield process, models
    assert process.alive(), process.log()
    process.stop()


def _inputs(module: object, arrays: dict[str, np.ndarray]) -> list[object]:
    tensors = []
    for name, array in arrays.items():
        datatype = "BF16" if array.dtype == BF16 else "FP32"
        tensor = module.InferInput(name, list(array.shape), datatype)  # type: ignore[attr-defined]
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_bf16_crosses_onnx_runtime_both_ways(server: tuple[ServerProcess, set[str]], module: object) -> None:
    process, _ = server
    client = module.InferenceServerClient(process.http_url if module is httpclient else process.grpc_url)  # type: ignore[attr-defined]
    weights = np.stack([W, W * 2])
    result = client.infer("bf16_onnx", _inputs(module, {"X": X, "W": weights}))
    y, z, v = (result.as_numpy(name) for name in ("Y", "Z", "V"))
    assert y.dtype == BF16 and np.array_equal(y.view(np.uint16), X.view(np.uint16))
    assert z.dtype == np.float32 and np.array_equal(z, X.astype(np.float32))
    assert v.dtype == BF16 and np.array_equal(v.view(np.uint16), weights.astype(BF16).view(np.uint16))
    metadata = client.get_model_metadata("bf16_onnx")
    datatype = metadata["inputs"][0]["datatype"] if module is httpclient else metadata.inputs[0].datatype
    assert datatype == "BF16"


def test_bf16_crosses_torchscript(server: tuple[ServerProcess, set[str]]) -> None:
    process, models = server
    if "bf16_torch" not in models:
        pytest.skip("torch is not installed")
    result = httpclient.InferenceServerClient(process.http_url).infer(
        "bf16_torch", _inputs(httpclient, {"INPUT__0": X})
    )
    doubled = result.as_numpy("OUTPUT__0")
    assert doubled.dtype == BF16 and np.array_equal(doubled.astype(np.float32), X.astype(np.float32) * 2)
    assert np.array_equal(result.as_numpy("OUTPUT__1"), X.astype(np.float32))


def test_bf16_crosses_openvino(server: tuple[ServerProcess, set[str]]) -> None:
    process, models = server
    if "bf16_openvino" not in models:
        pytest.skip("openvino is not installed")
    client = grpcclient.InferenceServerClient(process.grpc_url)
    result = client.infer("bf16_openvino", _inputs(grpcclient, {"X": X}))
    doubled = result.as_numpy("Y")
    assert doubled.dtype == BF16 and np.array_equal(doubled.astype(np.float32), X.astype(np.float32) * 2)


# The small one crosses in the instance's shared-memory arena; the one past its 16 MiB in the message.
@pytest.mark.parametrize("shape", [(2, 4), (3000, 3000)], ids=["arena", "in-message"])
def test_bf16_reaches_a_python_model_through_dlpack_as_in_triton(
    server: tuple[ServerProcess, set[str]], shape: tuple[int, int]
) -> None:
    process, models = server
    if "bf16_python" not in models:
        pytest.skip("torch is not installed")
    x = (np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape) % 256 - 128).astype(BF16)
    result = grpcclient.InferenceServerClient(process.grpc_url).infer(
        "bf16_python", _inputs(grpcclient, {"X": x})
    )
    doubled = result.as_numpy("Y")
    assert doubled.dtype == BF16 and np.array_equal(doubled.astype(np.float32), x.astype(np.float32) * 2)
    assert result.as_numpy("REFUSAL")[0].decode() == (
        "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() instead."
    )
    assert result.as_numpy("DTYPE")[0] == 14  # TYPE_BF16


def _post(
    process: ServerProcess,
    header: dict[str, object],
    binary: bytes = b"",
    path: str = "/v2/models/bf16_onnx/infer",
) -> tuple[int, dict[str, object]]:
    """A request to bf16_onnx (or ``path``): a JSON body, or a JSON header and binary tensors after it."""
    body = json.dumps(header).encode()
    headers = {"Inference-Header-Content-Length": str(len(body))} if binary else {}
    host, port = process.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", path, body + binary, headers)
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        connection.close()


def test_bf16_in_json_is_refused_both_ways_in_tritons_words(server: tuple[ServerProcess, set[str]]) -> None:
    process, _ = server
    weights = {"name": "W", "datatype": "FP32", "shape": [1, 4], "data": W.tolist()}
    as_json = {"name": "X", "datatype": "BF16", "shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]}
    status, body = _post(process, {"inputs": [as_json, weights]})
    assert status == 400
    assert body["error"] == (
        "receiving BF16 data via JSON is not supported. Please use the binary data format for input X"
    )
    # Inputs in binary, the BF16 output asked for as JSON.
    header = {
        "inputs": [
            {"name": "X", "datatype": "BF16", "shape": [1, 4], "parameters": {"binary_data_size": 8}},
            {"name": "W", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}},
        ],
        "outputs": [{"name": "Y", "parameters": {"binary_data": False}}],
    }
    status, body = _post(process, header, X[:1].tobytes() + W.tobytes())
    assert status == 400
    assert body["error"] == (
        "sending BF16 data via JSON is not supported. Please use the binary data format for output"
    )


# Triton's generate endpoint writes outputs as /infer's JSON does, so it refuses BF16 in the same
# words; streaming too, with the first response's status.
@pytest.mark.parametrize("action", ["generate", "generate_stream"])
def test_generate_refuses_a_bf16_output_as_triton_does(
    server: tuple[ServerProcess, set[str]], action: str
) -> None:
    process, _ = server
    status, body = _post(process, {"W": W.tolist()}, path=f"/v2/models/bf16_narrow/{action}")
    assert status == 400
    assert body["error"] == (
        "sending BF16 data via JSON is not supported. Please use the binary data format for output"
    )
    # The model itself answers: binary output over /infer carries the narrowed values.
    result = httpclient.InferenceServerClient(process.http_url).infer(
        "bf16_narrow", _inputs(httpclient, {"W": W})
    )
    assert np.array_equal(result.as_numpy("V").view(np.uint16), W.astype(BF16).view(np.uint16))


def test_an_onnx_model_with_bf16_and_string_inputs_is_refused_at_load_by_name(
    server: tuple[ServerProcess, set[str]],
) -> None:
    """Rather than a load that succeeds and a model that fails every request."""
    process, _ = server
    client = httpclient.InferenceServerClient(process.http_url)
    assert not client.is_model_ready("bf16_text")
    (entry,) = [m for m in client.get_model_repository_index() if m["name"] == "bf16_text"]
    assert entry["state"] == "UNAVAILABLE"
    assert "both BF16 tensors and string inputs (S)" in entry["reason"]


def test_a_bf16_warmup_sample_runs_at_load(server: tuple[ServerProcess, set[str]]) -> None:
    """bf16_onnx warms up on random BF16 data: a sample that failed would have failed its load."""
    process, _ = server
    assert httpclient.InferenceServerClient(process.http_url).is_model_ready("bf16_onnx")
