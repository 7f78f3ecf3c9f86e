"""trt serve driven over gRPC by tritonclient.grpc, and by the raw stub where tritonclient cannot say it.

The gRPC twin of ``test_http.py``: health, metadata, inference for every dtype, typed contents,
streaming, statistics, the repository API, error codes, and log settings shared with HTTP. Every test
uses the session ``server``, which asserts at teardown that no bad request took it down.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator, Callable, Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
import tritonclient.http as httpclient
from tritonclient.utils import (
    InferenceServerException,
    deserialize_bytes_tensor,
    serialize_byte_tensor,
    triton_to_np_dtype,
)

from tests.support import DTYPES, ServerProcess, int_inputs
from trt.protos import grpc_service_pb2, grpc_service_pb2_grpc, health_pb2, health_pb2_grpc, model_config_pb2

WIRE_TYPES = [name for name, _, _ in DTYPES]


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
        yield grpc_client


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[grpc_service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)


def _simple_inputs(
    batch: int = 1, offset: int = 0
) -> tuple[list[grpcclient.InferInput], np.ndarray, np.ndarray]:
    first, second = int_inputs(batch)
    first = first + np.int32(offset)
    inputs = [
        grpcclient.InferInput("INPUT0", [batch, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(first)
    inputs[1].set_data_from_numpy(second)
    return inputs, first, second


def _assert_simple_still_answers(client: grpcclient.InferenceServerClient) -> None:
    inputs, first, second = _simple_inputs(batch=2, offset=5)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)


def _raise_code(call: Callable[[], object], code: grpc.StatusCode) -> grpc.RpcError:
    """Run a raw stub call and return its RpcError, which must carry ``code``."""
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == code, info.value.details()
    return info.value


# -- health and metadata --------------------------------------------------------------------------


def test_liveness_and_readiness(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    assert client.is_model_ready("simple", "1")
    assert client.is_model_ready("identity_all")
    # Not ready is an answer, not an error: unknown models, versions and failed loads.
    assert not client.is_model_ready("simple", "2")
    assert not client.is_model_ready("no_such_model")
    assert not client.is_model_ready("broken_config")


def test_grpc_health_check_says_serving(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_server_metadata(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_server_metadata()
    assert metadata.name == "triton"
    assert metadata.version
    assert list(metadata.extensions) == [
        "classification", "sequence", "model_repository", "model_repository(unload_dependents)",
        "schedule_policy", "model_configuration", "system_shared_memory", "cuda_shared_memory",
        "binary_tensor_data", "parameters", "statistics", "trace", "logging",
    ]  # fmt: skip
    assert client.get_server_metadata(as_json=True)["name"] == "triton"


def test_model_metadata(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("simple")
    assert metadata.name == "simple"
    assert list(metadata.versions) == ["1"]
    assert metadata.platform == "onnxruntime_onnx"
    tensors = [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs]
    assert tensors == [("INPUT0", "INT32", [-1, 16]), ("INPUT1", "INT32", [-1, 16])]
    assert [t.name for t in metadata.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert client.get_model_metadata("simple", "1").name == "simple"
    as_json = client.get_model_metadata("simple", as_json=True)
    assert as_json["inputs"][0]["shape"] == ["-1", "16"]  # protobuf JSON spells int64 as strings
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_model_metadata("no_such_model")


def test_model_config(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("simple").config
    assert config.name == "simple"
    assert config.max_batch_size == 8
    assert config.backend == "onnxruntime"
    assert [(i.name, list(i.dims), i.data_type) for i in config.input] == [
        ("INPUT0", [16], model_config_pb2.TYPE_INT32),
        ("INPUT1", [16], model_config_pb2.TYPE_INT32),
    ]
    assert config.output[0].label_filename == "labels.txt"
    as_json = client.get_model_config("simple", as_json=True)["config"]
    assert as_json["name"] == "simple" and as_json["max_batch_size"] == 8
    assert as_json["input"][0]["data_type"] == "TYPE_INT32"
    # With no config.pbtxt, everything comes from the ONNX file.
    completed = client.get_model_config("autocomplete_fp32").config
    assert [(i.name, list(i.dims), i.data_type) for i in completed.input] == [
        ("INPUT0", [4], model_config_pb2.TYPE_FP32),
        ("INPUT1", [4], model_config_pb2.TYPE_FP32),
    ]
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_model_config("no_such_model")


# -- inference ------------------------------------------------------------------------------------


def test_infer_add_sub(client: grpcclient.InferenceServerClient) -> None:
    inputs, first, second = _simple_inputs(batch=3)
    result = client.infer("simple", inputs, request_id="req-7")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
    response = result.get_response()
    assert response.id == "req-7"
    assert response.model_name == "simple"
    assert response.model_version == "1"
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        ("OUTPUT0", "INT32", [3, 16]),
        ("OUTPUT1", "INT32", [3, 16]),
    ]
    assert len(response.raw_output_contents) == 2
    explicit = client.infer("simple", inputs, model_version="1")
    np.testing.assert_array_equal(explicit.as_numpy("OUTPUT1"), first - second)


def test_infer_returns_only_the_requested_outputs(client: grpcclient.InferenceServerClient) -> None:
    inputs, first, second = _simple_inputs(batch=2)
    result = client.infer("simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)


def test_custom_parameters_are_accepted_and_reserved_ones_rejected(
    client: grpcclient.InferenceServerClient, stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    inputs, first, second = _simple_inputs()
    result = client.infer("simple", inputs, parameters={"my_key": "value", "my_int": 3, "my_flag": True})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    # tritonclient refuses reserved keys itself, so this request goes through the raw stub.
    request = _raw_simple_request(first, second)
    request.parameters["triton_x"].int64_param = 1
    error = _raise_code(lambda: stub.ModelInfer(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert "reserved" in error.details()


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_request(client: grpcclient.InferenceServerClient, algorithm: str) -> None:
    inputs, first, second = _simple_inputs()
    result = client.infer("simple", inputs, compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)


def _sample(wire: str) -> np.ndarray:
    """A [2, 3] tensor of ``wire`` type holding the values most likely to be mangled on the way."""
    if wire == "BYTES":
        # Valid UTF-8 (ONNX Runtime strings must be), with an embedded NUL, an empty string and
        # one longer than a length prefix byte.
        return np.array(
            [[b"he\x00llo", b"", "caf\u00e9 \u2603".encode()], [b"x" * 300, b"\x00", b"0"]], dtype=np.object_
        )
    if wire == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    dtype = np.dtype(triton_to_np_dtype(wire))
    if wire.startswith("FP"):
        info = np.finfo(dtype)
        return np.array([[info.min, info.max, -0.0], [np.inf, -np.inf, info.tiny]], dtype=dtype)
    info = np.iinfo(dtype)
    return np.array([[info.min, info.max, 0], [1, info.max - 1, info.min + 1]], dtype=dtype)


def _identity_inputs(wire: str, data: np.ndarray) -> list[grpcclient.InferInput]:
    """``data`` for IN_<wire>; every other input is required too, so it gets a [N, 0] tensor."""
    inputs = []
    for name in WIRE_TYPES:
        tensor_data = data if name == wire else np.empty((data.shape[0], 0), triton_to_np_dtype(name))
        tensor = grpcclient.InferInput(f"IN_{name}", list(tensor_data.shape), name)
        tensor.set_data_from_numpy(tensor_data)
        inputs.append(tensor)
    return inputs


@pytest.mark.parametrize("wire", WIRE_TYPES)
def test_every_dtype_round_trips(client: grpcclient.InferenceServerClient, wire: str) -> None:
    data = _sample(wire)
    result = client.infer(
        "identity_all", _identity_inputs(wire, data), outputs=[grpcclient.InferRequestedOutput(f"OUT_{wire}")]
    )
    output = result.get_output(f"OUT_{wire}")
    assert output.datatype == wire
    assert list(output.shape) == [2, 3]
    got = result.as_numpy(f"OUT_{wire}")
    if wire == "BYTES":
        assert got.tolist() == data.tolist()
    else:
        assert got.dtype == data.dtype
        np.testing.assert_array_equal(got, data)


def test_bytes_that_onnx_runtime_cannot_carry_are_refused_not_altered(
    client: grpcclient.InferenceServerClient,
) -> None:
    data = np.array([[b"\xff\xfe"]], dtype=np.object_)
    with pytest.raises(InferenceServerException, match="not valid UTF-8") as info:
        client.infer("identity_all", _identity_inputs("BYTES", data))
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    _assert_simple_still_answers(client)


def test_messages_over_grpcs_default_4_mib_limit_go_both_ways(
    client: grpcclient.InferenceServerClient,
) -> None:
    """Triton raises gRPC's message limits to INT32_MAX; 32 MiB each way must pass."""
    data = np.arange(8 * 1_000_000, dtype=np.float32).reshape(8, 1_000_000)
    result = client.infer(
        "identity_all", _identity_inputs("FP32", data), outputs=[grpcclient.InferRequestedOutput("OUT_FP32")]
    )
    np.testing.assert_array_equal(result.as_numpy("OUT_FP32"), data)


def test_an_output_requested_twice_is_refused_in_current_tritons_words(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    """Triton 2.51 answered it once; current Triton refuses it (its L0_http and L0_grpc tests match the
    text), and so does trt, over both protocols."""
    inputs, _, _ = _simple_inputs()
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT0")]
    with pytest.raises(InferenceServerException) as refused:
        client.infer("simple", inputs, outputs=outputs, request_id="twice")
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert refused.value.message() == "[request id: twice] output 'OUTPUT0' already exists in request"
    http = httpclient.InferenceServerClient(server.http_url)
    http_inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.zeros((1, 16), np.int32))
        http_inputs.append(tensor)
    with pytest.raises(InferenceServerException) as refused:
        http.infer("simple", http_inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT0")] * 2)
    assert refused.value.status() == "400"
    assert refused.value.message() == "[request id: <id_unknown>] output 'OUTPUT0' already exists in request"
    http.close()


def test_classification_returns_top_k_with_labels(client: grpcclient.InferenceServerClient) -> None:
    inputs, _, _ = _simple_inputs(batch=2)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0", class_count=3)]
    result = client.infer("simple", inputs, outputs=outputs)
    assert result.get_output("OUTPUT0").datatype == "BYTES"
    top = result.as_numpy("OUTPUT0")
    assert top.shape == (2, 3)
    assert top[0].tolist() == [b"16:15:label15", b"15:14:label14", b"14:13:label13"]  # largest first
    assert top[1][0] == b"32:15:label15"


# -- typed contents instead of raw_input_contents --------------------------------------------------


def _raw_simple_request(first: np.ndarray, second: np.ndarray) -> grpc_service_pb2.ModelInferRequest:
    request = grpc_service_pb2.ModelInferRequest(model_name="simple")
    for name, data in (("INPUT0", first), ("INPUT1", second)):
        request.inputs.add(name=name, datatype="INT32", shape=list(data.shape))
        request.raw_input_contents.append(data.tobytes())
    return request


def test_int_contents_instead_of_raw(stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    first, second = int_inputs(batch=2)
    request = _typed_simple_request(first, second)
    request.id = "typed"
    reply = stub.ModelInfer(request)
    assert reply.id == "typed"
    # Triton answers in raw_output_contents whatever the request used.
    assert [(o.name, list(o.shape)) for o in reply.outputs] == [("OUTPUT0", [2, 16]), ("OUTPUT1", [2, 16])]
    assert not any(o.HasField("contents") for o in reply.outputs)
    sums = np.frombuffer(reply.raw_output_contents[0], np.int32).reshape(2, 16)
    diffs = np.frombuffer(reply.raw_output_contents[1], np.int32).reshape(2, 16)
    np.testing.assert_array_equal(sums, first + second)
    np.testing.assert_array_equal(diffs, first - second)


def test_bytes_contents_instead_of_raw(stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    data = _sample("BYTES")
    request = grpc_service_pb2.ModelInferRequest(model_name="identity_all")
    for name in WIRE_TYPES:
        tensor = request.inputs.add(
            name=f"IN_{name}", datatype=name, shape=[2, 3] if name == "BYTES" else [2, 0]
        )
        if name == "BYTES":
            tensor.contents.bytes_contents.extend(data.reshape(-1).tolist())
    request.outputs.add(name="OUT_BYTES")
    reply = stub.ModelInfer(request)
    assert [(o.name, o.datatype, list(o.shape)) for o in reply.outputs] == [("OUT_BYTES", "BYTES", [2, 3])]
    got = deserialize_bytes_tensor(reply.raw_output_contents[0])
    assert got.tolist() == data.reshape(-1).tolist()


def _typed_simple_request(first: np.ndarray, second: np.ndarray) -> grpc_service_pb2.ModelInferRequest:
    request = grpc_service_pb2.ModelInferRequest(model_name="simple")
    for name, data in (("INPUT0", first), ("INPUT1", second)):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=list(data.shape))
        tensor.contents.int_contents.extend(data.reshape(-1).tolist())
    return request


def _one_element_short(request: grpc_service_pb2.ModelInferRequest) -> None:
    del request.inputs[0].contents.int_contents[-1]


def _also_raw(request: grpc_service_pb2.ModelInferRequest) -> None:
    request.raw_input_contents.extend([b"\x00" * 64, b"\x00" * 64])


def _in_fp32_contents(request: grpc_service_pb2.ModelInferRequest) -> None:
    contents = request.inputs[0].contents
    contents.fp32_contents.extend(float(value) for value in contents.int_contents)
    contents.ClearField("int_contents")


def _no_data(request: grpc_service_pb2.ModelInferRequest) -> None:
    request.inputs[0].ClearField("contents")


def _fp16_typed(request: grpc_service_pb2.ModelInferRequest) -> None:
    request.inputs[0].datatype = "FP16"


def _bf16_typed(request: grpc_service_pb2.ModelInferRequest) -> None:
    request.inputs[0].datatype = "BF16"


BAD_CONTENTS = {
    "one element short": (
        _one_element_short,
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'simple'. "
        "Expected 64, got 60",
    ),
    "typed and raw mixed": (
        _also_raw,
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'",
    ),
    # FP16 and BF16 have no typed field: their contents are in another type's, as Triton says.
    "FP16 in typed contents": (
        _fp16_typed,
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'INT32', "
        "expected datatype 'FP16'",
    ),
    "BF16 in typed contents": (
        _bf16_typed,
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'INT32', "
        "expected datatype 'BF16'",
    ),
    "data in another type's field": (
        _in_fp32_contents,
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'FP32', "
        "expected datatype 'INT32'",
    ),
    "an input without data": (
        _no_data,
        "unable to find data for input tensor 'INPUT0' for model 'simple' in request.",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CONTENTS))
def test_typed_contents_that_do_not_fit_are_invalid_argument(
    client: grpcclient.InferenceServerClient, stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub, case: str
) -> None:
    spoil, fragment = BAD_CONTENTS[case]
    request = _typed_simple_request(*int_inputs())
    spoil(request)
    error = _raise_code(lambda: stub.ModelInfer(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert "INPUT0" in error.details()
    assert fragment in error.details()
    _assert_simple_still_answers(client)


# -- streaming ------------------------------------------------------------------------------------


class _Answers:
    """The stream callback: collects (result, error) pairs for the test thread."""

    def __init__(self) -> None:
        self.queue: queue.Queue[tuple[grpcclient.InferResult | None, InferenceServerException | None]] = (
            queue.Queue()
        )

    def __call__(self, result: grpcclient.InferResult | None, error: InferenceServerException | None) -> None:
        self.queue.put((result, error))

    def take(self, count: int) -> list[tuple[grpcclient.InferResult | None, InferenceServerException | None]]:
        return [self.queue.get(timeout=20) for _ in range(count)]


def test_stream_answers_every_request_by_id(server: ServerProcess) -> None:
    answers = _Answers()
    expected = {}
    with grpcclient.InferenceServerClient(server.grpc_url) as stream_client:
        stream_client.start_stream(callback=answers)
        try:
            for index in range(6):
                inputs, first, second = _simple_inputs(batch=1 + index % 3, offset=100 * index)
                expected[f"s-{index}"] = (first + second, first - second)
                stream_client.async_stream_infer("simple", inputs, request_id=f"s-{index}")
            received = answers.take(6)
        finally:
            stream_client.stop_stream()
    assert [error for _, error in received] == [None] * 6
    by_id = {result.get_response().id: result for result, _ in received}
    assert set(by_id) == set(expected)
    for request_id, (sums, diffs) in expected.items():
        np.testing.assert_array_equal(by_id[request_id].as_numpy("OUTPUT0"), sums)
        np.testing.assert_array_equal(by_id[request_id].as_numpy("OUTPUT1"), diffs)
        response = by_id[request_id].get_response()
        assert response.model_version == "1"
        assert response.parameters["triton_final_response"].bool_param


def test_stream_error_comes_back_in_band_and_the_stream_keeps_working(server: ServerProcess) -> None:
    answers = _Answers()
    with grpcclient.InferenceServerClient(server.grpc_url) as stream_client:
        stream_client.start_stream(callback=answers)
        try:
            inputs, _, _ = _simple_inputs()
            bad = grpcclient.InferInput("NOPE", [1, 16], "INT32")
            bad.set_data_from_numpy(np.zeros((1, 16), np.int32))
            stream_client.async_stream_infer("simple", [*inputs, bad], request_id="bad")
            [(result, error)] = answers.take(1)
            assert result is None
            assert isinstance(error, InferenceServerException)
            assert "NOPE" in error.message()
            inputs, first, second = _simple_inputs(offset=9)
            stream_client.async_stream_infer("simple", inputs, request_id="after")
            [(result, error)] = answers.take(1)
        finally:
            stream_client.stop_stream()
    assert error is None and result is not None
    assert result.get_response().id == "after"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)


def test_stream_error_reply_names_its_request(stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    """tritonclient drops the infer_response of an error; a client that demuxes by id needs it."""
    first, second = int_inputs()
    unknown = grpc_service_pb2.ModelInferRequest(model_name="no_such_model", id="lost")
    good = _raw_simple_request(first, second)
    good.id = "found"
    replies = list(stub.ModelStreamInfer(iter([unknown, good]), timeout=20))
    by_id = {reply.infer_response.id: reply for reply in replies}
    assert set(by_id) == {"lost", "found"}
    assert "Request for unknown model" in by_id["lost"].error_message
    assert by_id["lost"].infer_response.parameters["triton_final_response"].bool_param
    assert by_id["found"].error_message == ""
    sums = np.frombuffer(by_id["found"].infer_response.raw_output_contents[0], np.int32)
    np.testing.assert_array_equal(sums, (first + second)[0])


def test_aio_stream_infer(server: ServerProcess) -> None:
    async def requests() -> AsyncIterator[dict[str, object]]:
        for index in range(3):
            inputs, _, _ = _simple_inputs(offset=index)
            yield {"model_name": "simple", "inputs": inputs, "request_id": f"aio-{index}"}

    async def run() -> dict[str, np.ndarray]:
        async with aiogrpcclient.InferenceServerClient(server.grpc_url) as aio_client:
            assert await aio_client.is_model_ready("simple")
            sums = {}
            async for result, error in aio_client.stream_infer(requests(), stream_timeout=20):
                assert error is None
                sums[result.get_response().id] = result.as_numpy("OUTPUT0")
            return sums

    sums = asyncio.run(run())
    assert set(sums) == {"aio-0", "aio-1", "aio-2"}
    for index in range(3):
        _, first, second = _simple_inputs(offset=index)
        np.testing.assert_array_equal(sums[f"aio-{index}"], first + second)


# -- statistics -----------------------------------------------------------------------------------


def test_statistics_count_requests_and_batch_sizes(client: grpcclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("simple").model_stats[0]
    inputs, _, _ = _simple_inputs(batch=4)
    client.infer("simple", inputs)
    after = client.get_inference_statistics("simple").model_stats[0]
    assert (after.name, after.version) == ("simple", "1")
    assert after.inference_count - before.inference_count == 4
    assert after.execution_count - before.execution_count == 1
    success = after.inference_stats.success
    assert success.count - before.inference_stats.success.count == 1
    assert success.ns > before.inference_stats.success.ns
    sizes = {b.batch_size: b for b in after.batch_stats}
    previous = {b.batch_size: b.compute_infer.count for b in before.batch_stats}
    assert sizes[4].compute_infer.count - previous.get(4, 0) == 1
    assert after.last_inference > 0
    as_json = client.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    assert int(as_json["inference_count"]) == after.inference_count  # uint64 is a string in JSON


def test_statistics_for_every_model_and_unknown_model(client: grpcclient.InferenceServerClient) -> None:
    everything = client.get_inference_statistics().model_stats
    assert {s.name for s in everything} >= {"simple", "identity_all", "autocomplete_fp32"}
    with pytest.raises(InferenceServerException, match="no_such_model"):
        client.get_inference_statistics("no_such_model")


# -- model repository -----------------------------------------------------------------------------


def test_repository_index_includes_broken_models_with_a_reason(
    client: grpcclient.InferenceServerClient, stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert {"simple", "identity_all", "autocomplete_fp32", "broken_config", "missing_file"} <= set(index)
    assert (index["simple"].version, index["simple"].state) == ("1", "READY")
    for broken in ("broken_config", "missing_file"):
        assert index[broken].state == "UNAVAILABLE"
        assert index[broken].reason
    ready_only = stub.RepositoryIndex(grpc_service_pb2.RepositoryIndexRequest(ready=True))
    ready_names = {m.name for m in ready_only.models}
    assert {"simple", "identity_all", "autocomplete_fp32"} <= ready_names
    assert not ready_names & {"broken_config", "missing_file"}


@pytest.mark.parametrize("action", ["load_model", "unload_model"])
def test_load_and_unload_outside_explicit_mode_are_unavailable(
    client: grpcclient.InferenceServerClient, action: str
) -> None:
    with pytest.raises(InferenceServerException) as info:
        getattr(client, action)("simple")
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    assert "explicit model load / unload is not allowed" in info.value.message()
    assert client.is_model_ready("simple")


# -- errors ---------------------------------------------------------------------------------------


def _bad_tensor(name: str, shape: list[int], datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, shape, datatype)
    tensor.set_data_from_numpy(np.zeros(shape, dtype=triton_to_np_dtype(datatype)))
    return tensor


# Each case: the inputs to send (given the good INPUT0 and INPUT1), and what the error must say.
BAD_TENSORS: dict[str, tuple[Callable[[grpcclient.InferInput, grpcclient.InferInput], list], str]] = {
    "wrong shape": (
        lambda _, input1: [_bad_tensor("INPUT0", [1, 15], "INT32"), input1],
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'simple'. "
        "Expected [-1,16], got [1,15].",
    ),
    "wrong dtype": (
        lambda _, input1: [_bad_tensor("INPUT0", [1, 16], "FP32"), input1],
        "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
    ),
    "unknown input": (lambda input0, input1: [input0, input1, _bad_tensor("EXTRA", [1], "INT32")], "EXTRA"),
    "missing input": (
        lambda input0, _: [input0],
        (
            "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], "
            "but missing required input(s) ['INPUT1']. Please provide all required input(s)."
        ),
    ),
}


@pytest.mark.parametrize("case", list(BAD_TENSORS))
def test_bad_tensors_are_invalid_argument_and_the_next_request_succeeds(
    client: grpcclient.InferenceServerClient, case: str
) -> None:
    make_inputs, fragment = BAD_TENSORS[case]
    good, _, _ = _simple_inputs()
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", make_inputs(*good))
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert fragment in info.value.message()
    _assert_simple_still_answers(client)


def test_batch_over_max_batch_size_is_invalid_argument(client: grpcclient.InferenceServerClient) -> None:
    inputs, _, _ = _simple_inputs(batch=9)
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", inputs)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "inference request batch-size must be <= 8 for 'simple'" in info.value.message()
    _assert_simple_still_answers(client)


def test_unknown_model_and_version_are_not_found(client: grpcclient.InferenceServerClient) -> None:
    inputs, _, _ = _simple_inputs()  # as Triton 2.51 answers them
    with pytest.raises(InferenceServerException, match="Request for unknown model") as info:
        client.infer("no_such_model", inputs)
    assert info.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException, match="version 7") as info:
        client.infer("simple", inputs, model_version="7")
    assert info.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException, match="NOPE") as info:
        client.infer("simple", inputs, outputs=[grpcclient.InferRequestedOutput("NOPE")])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    _assert_simple_still_answers(client)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (
            [b"\x00" * 60, b"\x00" * 64],
            "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
        ),
        (
            [b"\x00" * 68, b"\x00" * 64],
            "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 68",
        ),
        ([b"\x00" * 64], "unable to find data for input tensor 'INPUT1' for model 'simple' in request."),
    ],
    ids=["shorter than the shape", "longer than the shape", "fewer entries than inputs"],
)
def test_raw_contents_that_do_not_fit_are_invalid_argument(
    client: grpcclient.InferenceServerClient,
    stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub,
    raw: list[bytes],
    fragment: str,
) -> None:
    request = grpc_service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    request.raw_input_contents.extend(raw)
    error = _raise_code(lambda: stub.ModelInfer(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert fragment in error.details()
    _assert_simple_still_answers(client)


@pytest.mark.parametrize("contents", ["raw", "typed", "empty"])
def test_a_shape_with_more_dimensions_than_numpy_allows_is_invalid_argument(
    client: grpcclient.InferenceServerClient,
    stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub,
    contents: str,
) -> None:
    first, second = int_inputs()
    request = _raw_simple_request(first, second)
    request.inputs[0].shape[:] = [1, 0 if contents == "empty" else 16] + [1] * 70
    if contents != "raw":
        del request.raw_input_contents[:]
        request.inputs[1].contents.int_contents.extend(second.reshape(-1).tolist())
        if contents == "typed":
            request.inputs[0].contents.int_contents.extend(first.reshape(-1).tolist())
    error = _raise_code(lambda: stub.ModelInfer(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert "INPUT0" in error.details()
    _assert_simple_still_answers(client)


def test_bytes_raw_contents_with_a_truncated_length_prefix_are_invalid_argument(
    client: grpcclient.InferenceServerClient, stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    request = grpc_service_pb2.ModelInferRequest(model_name="identity_all")
    for name in WIRE_TYPES:
        request.inputs.add(name=f"IN_{name}", datatype=name, shape=[1, 2] if name == "BYTES" else [1, 0])
        if name == "BYTES":
            whole = serialize_byte_tensor(np.array([b"abc", b"defg"], dtype=np.object_)).item()
            request.raw_input_contents.append(whole[:-2])  # the second element is cut short
        else:
            request.raw_input_contents.append(b"")
    error = _raise_code(lambda: stub.ModelInfer(request), grpc.StatusCode.INVALID_ARGUMENT)
    assert "IN_BYTES" in error.details()
    _assert_simple_still_answers(client)


# -- logging --------------------------------------------------------------------------------------


def test_log_settings_are_shared_with_http(
    client: grpcclient.InferenceServerClient, server: ServerProcess
) -> None:
    http_client = httpclient.InferenceServerClient(server.http_url)
    settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_verbose_level"] == {"uint32_param": 0}
    assert settings["log_info"] == {"bool_param": True}
    try:
        updated = client.update_log_settings({"log_verbose_level": 2, "log_format": "ISO8601"})
        assert updated.settings["log_verbose_level"].uint32_param == 2
        seen_over_http = http_client.get_log_settings()
        assert seen_over_http["log_verbose_level"] == 2
        assert seen_over_http["log_format"] == "ISO8601"
        http_client.update_log_settings({"log_warning": False})
        assert client.get_log_settings().settings["log_warning"].bool_param is False
    finally:
        client.update_log_settings({"log_verbose_level": 0, "log_format": "default", "log_warning": True})
        http_client.close()
    with pytest.raises(InferenceServerException) as info:
        client.update_log_settings({"log_format": "loud"})
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
