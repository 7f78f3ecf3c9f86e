"""Triton's raw binary request: ``Inference-Header-Content-Length: 0`` and a body that is the bytes of
the model's one input, whose name, datatype and shape come from the model's config. Every output comes
back binary. Sent with ``http.client``, as curl sends them (tritonclient has no call for it); the
error texts are Triton's (``InferenceRequest::Normalize`` of its core)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.support import ServerProcess, save_onnx, write_simple

NO_ID = "[request id: <id_unknown>] "  # how Triton's core names a request without an id

# name: (ONNX element type, the config's data type and dims, max_batch_size)
MODELS = {
    "raw_rows": (TensorProto.FLOAT, "TYPE_FP32", "[ -1 ]", 8),
    "raw_square": (TensorProto.FLOAT, "TYPE_FP32", "[ 2, 2 ]", 0),
    "raw_any_rows": (TensorProto.INT64, "TYPE_INT64", "[ 3, -1 ]", 0),
    "raw_text": (TensorProto.STRING, "TYPE_STRING", "[ 1 ]", 0),
    "raw_two_texts": (TensorProto.STRING, "TYPE_STRING", "[ 2 ]", 0),
    "raw_grid": (TensorProto.FLOAT, "TYPE_FP32", "[ -1, -1 ]", 0),
}


def _write_identity(repo: Path, name: str, onnx_type: int, config_type: str, dims: str, batch: int) -> None:
    # The ONNX shape: the config's dims, named where they vary, after a batch dimension where it batches.
    config_dims = [int(d) for d in dims.strip("[ ]").split(",")]
    shape = [f"d{axis}" if dim == -1 else dim for axis, dim in enumerate(config_dims)]
    shape = ["batch", *shape] if batch else shape
    graph = helper.make_graph(
        [helper.make_node("Identity", ["IN"], ["OUT"])],
        name,
        [helper.make_tensor_value_info("IN", onnx_type, shape)],
        [helper.make_tensor_value_info("OUT", onnx_type, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    save_onnx(model, repo / name / "1" / "model.onnx")
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {batch}\n'
        f'input [ {{ name: "IN" data_type: {config_type} dims: {dims} }} ]\n'
        f'output [ {{ name: "OUT" data_type: {config_type} dims: {dims} }} ]\n'
    )


@pytest.fixture(scope="module")
def raw_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("raw_repo")
    for name, (onnx_type, config_type, dims, batch) in MODELS.items():
        _write_identity(repo, name, onnx_type, config_type, dims, batch)
    write_simple(repo)
    server = ServerProcess([repo])
    server.start(tmp_path_factory.mktemp("raw_logs"))
    yield server
    assert server.alive(), server.log()
    server.stop()


def _post_raw(server: ServerProcess, model: str, body: bytes) -> tuple[int, dict, bytes]:
    """A raw binary request: the status, the JSON header of the answer (or its error) and what follows it."""
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": "0"}
        connection.request("POST", f"/v2/models/{model}/infer", body, headers)
        response = connection.getresponse()
        payload = response.read()
        header_length = response.getheader("Inference-Header-Content-Length")
    finally:
        connection.close()
    if header_length is None:
        return response.status, json.loads(payload), b""
    return response.status, json.loads(payload[: int(header_length)]), payload[int(header_length) :]


def _echoed(server: ServerProcess, model: str, values: np.ndarray) -> dict:
    """Send ``values`` raw to an identity model; the description of its one output, whose bytes must
    be the values sent."""
    status, header, binary = _post_raw(server, model, values.tobytes())
    assert status == 200, header
    (output,) = header["outputs"]
    np.testing.assert_array_equal(np.frombuffer(binary, values.dtype), values)
    return output


def test_a_batching_models_variable_dimension_comes_from_the_byte_count(raw_server: ServerProcess) -> None:
    # A batch of one; every output binary, as Triton answers a raw request.
    assert _echoed(raw_server, "raw_rows", np.array([1.5, -2.0, 3.25], dtype="<f4")) == {
        "name": "OUT", "datatype": "FP32", "shape": [1, 3], "parameters": {"binary_data_size": 12}
    }  # fmt: skip


def test_a_fixed_shape_takes_its_bytes_and_no_other_count(raw_server: ServerProcess) -> None:
    values = np.arange(4, dtype="<f4")
    assert _echoed(raw_server, "raw_square", values)["shape"] == [2, 2]
    status, error, _ = _post_raw(raw_server, "raw_square", values[:3].tobytes())
    assert status == 400
    assert error == {
        "error": f"{NO_ID}input byte size mismatch for input 'IN' for model 'raw_square'. Expected 16, got 12"
    }


def test_the_variable_dimension_may_sit_after_fixed_ones(raw_server: ServerProcess) -> None:
    assert _echoed(raw_server, "raw_any_rows", np.arange(6, dtype="<i8"))["shape"] == [3, 2]
    # 7 elements do not make rows of 3: the shape is rounded down, and the bytes do not fill it
    status, error, _ = _post_raw(raw_server, "raw_any_rows", np.arange(7, dtype="<i8").tobytes())
    assert (status, error["error"]) == (
        400,
        f"{NO_ID}input byte size mismatch for input 'IN' for model 'raw_any_rows'. Expected 48, got 56",
    )


def test_a_bytes_input_is_the_whole_body_as_one_element(raw_server: ServerProcess) -> None:
    text = "raw \x00 text, ünïcode".encode()  # ONNX Runtime's string tensors hold UTF-8
    status, header, binary = _post_raw(raw_server, "raw_text", text)
    assert status == 200, header
    assert header["outputs"][0]["datatype"] == "BYTES" and header["outputs"][0]["shape"] == [1]
    assert binary == len(text).to_bytes(4, "little") + text  # Triton's serialized BYTES


def test_an_empty_body_is_an_empty_tensor(raw_server: ServerProcess) -> None:
    status, header, binary = _post_raw(raw_server, "raw_rows", b"")
    assert status == 200, header
    assert header["outputs"][0]["shape"] == [1, 0] and binary == b""


@pytest.mark.parametrize(
    ("model", "error"),
    [
        (
            "simple",
            "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'simple' model "
            "configuration",
        ),
        (
            "raw_grid",
            "The shape of the raw input 'IN' can not be deduced because there are more than one "
            "variable-sized dimension",
        ),
        ("raw_two_texts", "For BYTE datatype raw input 'IN', the model must have input shape [1]"),
    ],
)
def test_models_whose_input_cannot_be_deduced_refuse_it(
    raw_server: ServerProcess, model: str, error: str
) -> None:
    status, answer, _ = _post_raw(raw_server, model, b"\x00" * 16)
    assert (status, answer) == (400, {"error": NO_ID + error})
    status, header, _ = _post_raw(raw_server, "raw_rows", b"\x00" * 8)  # the server serves on
    assert status == 200, header
