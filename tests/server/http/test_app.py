"""trt serve driven over HTTP by NVIDIA's own client, tritonclient.http."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import DTYPES, ServerProcess, int_inputs


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


def _simple_inputs(
    binary: bool, batch: int = 1
) -> tuple[list[httpclient.InferInput], np.ndarray, np.ndarray]:
    first, second = int_inputs(batch)
    inputs = [
        httpclient.InferInput("INPUT0", [batch, 16], "INT32"),
        httpclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(first, binary_data=binary)
    inputs[1].set_data_from_numpy(second, binary_data=binary)
    return inputs, first, second


def test_health_and_server_metadata(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    metadata = client.get_server_metadata()
    assert metadata["name"] == "triton"
    assert {"binary_tensor_data", "model_repository", "statistics", "classification"} <= set(
        metadata["extensions"]
    )


def test_model_metadata_and_config(client: httpclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("simple")
    assert metadata["versions"] == ["1"]
    assert metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    config = client.get_model_config("simple")
    assert config["name"] == "simple" and config["max_batch_size"] == 8
    assert config["input"][0]["dims"] == [16]  # Triton prints dims as numbers, not int64 strings
    assert config["input"][0]["data_type"] == "TYPE_INT32"
    assert config["backend"] == "onnxruntime"
    assert client.get_model_metadata("simple", "1")["name"] == "simple"
    assert client.is_model_ready("simple", "1")
    assert not client.is_model_ready("simple", "2")
    assert not client.is_model_ready("no_such_model")


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_add_sub(client: httpclient.InferenceServerClient, binary: bool) -> None:
    inputs, first, second = _simple_inputs(binary, batch=3)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=not binary),
    ]
    result = client.infer("simple", inputs, outputs=outputs, request_id="req-7")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
    response = result.get_response()
    assert response["id"] == "req-7"
    assert response["model_version"] == "1"


def test_infer_returns_all_outputs_when_none_requested(client: httpclient.InferenceServerClient) -> None:
    inputs, first, second = _simple_inputs(True)
    result = client.infer("simple", inputs)
    assert {o["name"] for o in result.get_response()["outputs"]} == {"OUTPUT0", "OUTPUT1"}
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)


def _sample(wire: str) -> np.ndarray:
    rng = np.random.default_rng(3)
    if wire == "BYTES":
        return np.array(
            [[b"he\x00llo", "caf\u00e9".encode(), b""], [b"x" * 300, b"0", b"1"]], dtype=np.object_
        )
    if wire == "BOOL":
        return rng.integers(0, 2, (2, 3)).astype(bool)
    if wire.startswith("FP"):
        return rng.standard_normal((2, 3)).astype(
            {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}[wire]
        )
    info = np.iinfo(np.dtype(wire.lower()))
    return rng.integers(info.min, info.max, (2, 3), dtype=np.dtype(wire.lower()), endpoint=True)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("wire", [name for name, _, _ in DTYPES])
def test_every_dtype_round_trips(client: httpclient.InferenceServerClient, wire: str, binary: bool) -> None:
    data = _sample(wire)
    tensor = httpclient.InferInput(f"IN_{wire}", list(data.shape), wire)
    tensor.set_data_from_numpy(data, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput(f"OUT_{wire}", binary_data=binary)]
    # Every other input is required too: send empty-width tensors for them.
    others = []
    for name, _, _ in DTYPES:
        if name == wire:
            continue
        other = httpclient.InferInput(f"IN_{name}", [2, 0], name)
        empty = np.empty((2, 0), dtype=np.object_ if name == "BYTES" else np.dtype(_sample(name).dtype))
        other.set_data_from_numpy(empty, binary_data=True)
        others.append(other)
    result = client.infer("identity_all", [tensor, *others], outputs=outputs)
    got = result.as_numpy(f"OUT_{wire}")
    assert got.shape == data.shape
    if wire == "BYTES":
        # JSON responses decode BYTES to str on the client side.
        as_bytes = [x if isinstance(x, bytes) else x.encode() for x in got.reshape(-1)]
        assert as_bytes == list(data.reshape(-1))
    else:
        assert got.dtype == data.dtype
        np.testing.assert_array_equal(got, data)


def test_bytes_that_onnx_runtime_cannot_carry_are_refused_not_altered(
    client: httpclient.InferenceServerClient,
) -> None:
    data = np.array([[b"\xff\xfe"]], dtype=np.object_)
    tensor = httpclient.InferInput("IN_BYTES", [1, 1], "BYTES")
    tensor.set_data_from_numpy(data)
    others = []
    for name, _, _ in DTYPES:
        if name != "BYTES":
            other = httpclient.InferInput(f"IN_{name}", [1, 0], name)
            other.set_data_from_numpy(np.empty((1, 0), dtype=_sample(name).dtype))
            others.append(other)
    with pytest.raises(InferenceServerException, match="not valid UTF-8") as info:
        client.infer("identity_all", [tensor, *others])
    assert info.value.status() == "400"


def test_classification_returns_top_k_with_labels(client: httpclient.InferenceServerClient) -> None:
    inputs, _, _ = _simple_inputs(True, batch=2)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", class_count=3)]
    result = client.infer("simple", inputs, outputs=outputs)
    top = result.as_numpy("OUTPUT0")
    assert top.shape == (2, 3)
    assert top[0][0] == b"16:15:label15"  # value:index:label, largest first
    assert top[1][0] == b"32:15:label15"


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_request_and_response(client: httpclient.InferenceServerClient, algorithm: str) -> None:
    inputs, first, second = _simple_inputs(True)
    result = client.infer(
        "simple", inputs, request_compression_algorithm=algorithm, response_compression_algorithm=algorithm
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)


def test_custom_parameters_are_accepted_and_reserved_ones_rejected(
    client: httpclient.InferenceServerClient, server: ServerProcess
) -> None:
    inputs, first, second = _simple_inputs(True)
    result = client.infer("simple", inputs, parameters={"my_key": "value", "my_int": 3})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    # tritonclient refuses reserved keys itself, so this body goes by hand.
    body = json.dumps({"parameters": {"triton_x": 1}, "inputs": []}).encode()
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/simple/infer", data=body)
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request)
    assert info.value.code == 400
    assert "reserved" in json.loads(info.value.read())["error"]


def test_statistics_count_requests_and_batch_sizes(client: httpclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("simple")["model_stats"][0]
    inputs, _, _ = _simple_inputs(True, batch=4)
    client.infer("simple", inputs)
    after = client.get_inference_statistics("simple")["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == 4
    assert after["execution_count"] - before["execution_count"] == 1
    success = after["inference_stats"]["success"]
    assert success["count"] - before["inference_stats"]["success"]["count"] == 1
    assert success["ns"] > 0
    sizes = {b["batch_size"]: b for b in after["batch_stats"]}
    assert sizes[4]["compute_infer"]["count"] >= 1
    assert after["last_inference"] > 0
    everything = client.get_inference_statistics()["model_stats"]
    assert {s["name"] for s in everything} >= {"simple", "identity_all"}
    with pytest.raises(InferenceServerException):
        client.get_inference_statistics("no_such_model")


def test_logging_settings_read_and_update(client: httpclient.InferenceServerClient) -> None:
    settings = client.get_log_settings()
    assert settings["log_verbose_level"] == 0
    updated = client.update_log_settings({"log_verbose_level": 1})
    assert updated["log_verbose_level"] == 1
    client.update_log_settings({"log_verbose_level": 0})


def test_perf_analyzers_grpc_control_parameter_is_accepted(server: ServerProcess) -> None:
    """perf_analyzer sets triton_enable_empty_final_response on every gRPC request; Triton takes it."""
    import grpc

    from trt.protos import grpc_service_pb2, grpc_service_pb2_grpc

    first, second = int_inputs()
    request = grpc_service_pb2.ModelInferRequest(model_name="simple")
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    for name, data in (("INPUT0", first), ("INPUT1", second)):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(data.tobytes())
    with grpc.insecure_channel(server.grpc_url) as channel:
        reply = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    np.testing.assert_array_equal(np.frombuffer(reply.raw_output_contents[0], np.int32), (first + second)[0])
    request.parameters["triton_other"].bool_param = True
    with grpc.insecure_channel(server.grpc_url) as channel, pytest.raises(grpc.RpcError, match="reserved"):
        grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
