"""trt serve driven over gRPC by NVIDIA's own client, tritonclient.grpc (and the raw stub)."""

from __future__ import annotations

import queue
from functools import partial

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from protos import grpc_service_pb2, grpc_service_pb2_grpc, health_pb2, health_pb2_grpc
from tests.support import DTYPES, ServerProcess, int_inputs


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc_url)


def _simple_inputs(batch: int = 1) -> tuple[list[grpcclient.InferInput], np.ndarray, np.ndarray]:
    first, second = int_inputs(batch)
    inputs = [
        grpcclient.InferInput("INPUT0", [batch, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(first)
    inputs[1].set_data_from_numpy(second)
    return inputs, first, second


def test_health_metadata_and_config(client: grpcclient.InferenceServerClient, server: ServerProcess) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("simple") and not client.is_model_ready("no_such_model")
    assert client.get_server_metadata().name == "triton"
    metadata = client.get_model_metadata("simple")
    assert metadata.platform == "onnxruntime_onnx"
    assert list(metadata.inputs[0].shape) == [-1, 16]
    config = client.get_model_config("simple").config
    assert config.max_batch_size == 8 and list(config.input[0].dims) == [16]
    assert client.get_model_config("simple", as_json=True)["config"]["name"] == "simple"
    with grpc.insecure_channel(server.grpc_url) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_infer_with_subset_of_outputs_and_request_id(client: grpcclient.InferenceServerClient) -> None:
    inputs, first, second = _simple_inputs(batch=2)
    result = client.infer(
        "simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT1")], request_id="g-1"
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
    assert result.as_numpy("OUTPUT0") is None
    response = result.get_response()
    assert response.id == "g-1" and response.model_version == "1"


@pytest.mark.parametrize("wire", [name for name, _, _ in DTYPES])
def test_every_dtype_round_trips(client: grpcclient.InferenceServerClient, wire: str) -> None:
    if wire == "BYTES":
        data = np.array([[b"he\x00llo", b""], [b"x" * 100, "caf\u00e9".encode()]], dtype=np.object_)
    elif wire == "BOOL":
        data = np.array([[True, False], [False, True]])
    else:
        data = (np.arange(4) + 1).astype(np.dtype(wire.lower().replace("fp", "float"))).reshape(2, 2)
    inputs = []
    for name, _, _ in DTYPES:
        shape = [2, 2] if name == wire else [2, 0]
        tensor = grpcclient.InferInput(f"IN_{name}", shape, name)
        if name == wire:
            tensor.set_data_from_numpy(data)
        else:
            empty_type = (
                np.object_
                if name == "BYTES"
                else (bool if name == "BOOL" else name.lower().replace("fp", "float"))
            )
            tensor.set_data_from_numpy(np.empty((2, 0), dtype=empty_type))
        inputs.append(tensor)
    result = client.infer("identity_all", inputs, outputs=[grpcclient.InferRequestedOutput(f"OUT_{wire}")])
    got = result.as_numpy(f"OUT_{wire}")
    if wire == "BYTES":
        assert got.tolist() == data.tolist()
    else:
        assert got.dtype == data.dtype
        np.testing.assert_array_equal(got, data)


def test_classification(client: grpcclient.InferenceServerClient) -> None:
    inputs, _, _ = _simple_inputs()
    result = client.infer(
        "simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=3)]
    )
    assert result.as_numpy("OUTPUT0")[0][0] == b"16:15:label15"


def test_typed_contents_instead_of_raw(server: ServerProcess) -> None:
    first, second = int_inputs()
    request = grpc_service_pb2.ModelInferRequest(model_name="simple")
    for name, data in (("INPUT0", first), ("INPUT1", second)):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        tensor.contents.int_contents.extend(data.reshape(-1).tolist())
    with grpc.insecure_channel(server.grpc_url) as channel:
        reply = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert [o.name for o in reply.outputs] == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(np.frombuffer(reply.raw_output_contents[0], np.int32), (first + second)[0])


def test_streaming_answers_each_request_and_survives_an_error(
    client: grpcclient.InferenceServerClient,
) -> None:
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), answers))
    try:
        for index in range(3):
            inputs, _, _ = _simple_inputs()
            client.async_stream_infer("simple", inputs, request_id=f"s-{index}")
        bad = grpcclient.InferInput("NOPE", [1, 16], "INT32")
        bad.set_data_from_numpy(np.zeros((1, 16), np.int32))
        client.async_stream_infer("simple", [bad], request_id="s-bad")
        inputs, first, second = _simple_inputs()
        client.async_stream_infer("simple", inputs, request_id="s-after")
        received = [answers.get(timeout=10) for _ in range(5)]
    finally:
        client.stop_stream()
    good = {r.get_response().id: r for r, e in received if e is None}
    errors = [e for r, e in received if e is not None]
    assert set(good) == {"s-0", "s-1", "s-2", "s-after"}
    np.testing.assert_array_equal(good["s-after"].as_numpy("OUTPUT0"), first + second)
    assert len(errors) == 1 and "NOPE" in str(errors[0])


def test_statistics_and_repository_index(client: grpcclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("simple").model_stats[0]
    inputs, _, _ = _simple_inputs(batch=3)
    client.infer("simple", inputs)
    after = client.get_inference_statistics("simple").model_stats[0]
    assert after.inference_count - before.inference_count == 3
    assert after.execution_count - before.execution_count == 1
    assert any(b.batch_size == 3 for b in after.batch_stats)
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert index["simple"].state == "READY"
    assert index["broken_config"].state == "UNAVAILABLE" and index["broken_config"].reason
    with pytest.raises(InferenceServerException):
        client.get_inference_statistics("no_such_model")


def test_load_outside_explicit_mode_is_unavailable(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.load_model("simple")
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    assert "explicit model load / unload is not allowed" in info.value.message()


@pytest.mark.parametrize(
    ("name", "shape", "datatype", "fragment"),
    [
        ("INPUT0", [1, 15], "INT32", "expected shape"),
        ("INPUT0", [1, 16], "FP32", "datatype"),
        ("INPUT0", [9, 16], "INT32", "batch size 9"),
    ],
)
def test_bad_requests_are_invalid_argument_and_the_next_succeeds(
    client: grpcclient.InferenceServerClient, name: str, shape: list[int], datatype: str, fragment: str
) -> None:
    inputs, first, second = _simple_inputs()
    bad = grpcclient.InferInput(name, shape, datatype)
    bad.set_data_from_numpy(np.zeros(shape, dtype=np.float32 if datatype == "FP32" else np.int32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", [bad, inputs[1]])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert fragment in info.value.message()
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), first + second)


def test_unknown_model_and_short_raw_contents(
    client: grpcclient.InferenceServerClient, server: ServerProcess
) -> None:
    inputs, _, _ = _simple_inputs()
    with pytest.raises(InferenceServerException, match="Request for unknown model") as info:
        client.infer("no_such_model", inputs)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    request = grpc_service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(b"\x00" * 60)  # 4 bytes short
    with grpc.insecure_channel(server.grpc_url) as channel, pytest.raises(grpc.RpcError) as error:
        grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_log_settings_are_shared_with_http(
    client: grpcclient.InferenceServerClient, server: ServerProcess
) -> None:
    client.update_log_settings({"log_verbose_level": 2})
    try:
        assert httpclient.InferenceServerClient(server.http_url).get_log_settings()["log_verbose_level"] == 2
    finally:
        client.update_log_settings({"log_verbose_level": 0})
