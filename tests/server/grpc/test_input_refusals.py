"""Inputs refused over gRPC in Triton's words: a datatype the server does not know, and contents sent
beside a shared-memory region.

Triton's gRPC front end hands such an input to its core as '<invalid>', and the core refuses it against
the model's input after the checks that come first (unknown, duplicate and missing inputs, batch sizes),
whatever its data: the texts below are those Triton 2.51 answered for the same requests. tritonclient
checks datatypes against numpy arrays, so these requests are built with the raw stub.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm

from tests.support import ServerProcess
from trt.protos import grpc_service_pb2, grpc_service_pb2_grpc

SIXTEEN_INT32 = np.arange(16, dtype=np.int32).tobytes()


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[grpc_service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)


def _request(
    datatypes: tuple[str, str], data: str = "raw", shape: tuple[int, ...] = (1, 16), first: str = "INPUT0"
) -> grpc_service_pb2.ModelInferRequest:
    """Two inputs, the first named ``first`` of ``shape``, with 16 INT32s each (raw, as FP32 contents,
    or none)."""
    request = grpc_service_pb2.ModelInferRequest(model_name="simple")
    for name, datatype in zip((first, "INPUT1"), datatypes, strict=True):
        tensor = request.inputs.add(name=name, datatype=datatype, shape=shape if name == first else (1, 16))
        if data == "raw":
            request.raw_input_contents.append(SIXTEEN_INT32)
        elif data == "fp32 contents":
            tensor.contents.fp32_contents.extend([1.0] * 16)
    return request


def _refusal(stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub, request: object) -> tuple[str, str]:
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(request, timeout=10)
    return caught.value.code().name, caught.value.details()


def _mismatch(name: str) -> str:
    return (
        f"[request id: <id_unknown>] inference input '{name}' data-type is '<invalid>', but model 'simple' "
        "expects 'INT32'"
    )


@pytest.mark.parametrize(
    ("datatype", "shape"),
    [("INT33", (1, 16)), ("int32", (1, 16)), ("", (1, 16)), ("INT33", (1, 8)), ("INT33", (1, 4, 4))],
    ids=["unknown name", "lower case", "empty", "data of another size", "another rank"],
)
def test_an_unknown_datatype_with_raw_data_is_refused_as_triton_refuses_it(
    stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub, datatype: str, shape: tuple[int, ...]
) -> None:
    refusal = _refusal(stub, _request((datatype, "INT32"), shape=shape))
    assert refusal == ("INVALID_ARGUMENT", _mismatch("INPUT0"))


def test_the_same_request_again_is_refused_the_same_way(
    stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    """A request sent again is decoded from the template kept the first time (``request_wire``), and
    is refused the same way."""
    for _ in range(3):
        assert _refusal(stub, _request(("INT33", "INT32"))) == ("INVALID_ARGUMENT", _mismatch("INPUT0"))
    answer = stub.ModelInfer(_request(("INT32", "INT32")), timeout=10)
    doubled = np.frombuffer(answer.raw_output_contents[0], np.int32)
    np.testing.assert_array_equal(doubled, 2 * np.arange(16, dtype=np.int32))


def test_of_two_unknown_datatypes_the_one_triton_names_is_named(
    stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    assert _refusal(stub, _request(("INT33", "BAD2"))) == ("INVALID_ARGUMENT", _mismatch("INPUT1"))
    assert _refusal(stub, _request(("INT32", "BAD2"))) == ("INVALID_ARGUMENT", _mismatch("INPUT1"))


def test_on_a_stream_the_refusal_is_the_requests_error_and_the_stream_goes_on(
    stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    refused, answered = _request(("INT33", "INT32")), _request(("INT32", "INT32"))
    refused.id, answered.id = "refused", "answered"
    replies = {
        reply.infer_response.id: reply
        for reply in stub.ModelStreamInfer(iter([refused, answered, refused]), timeout=20)
    }
    assert replies["refused"].error_message == _mismatch("INPUT0").replace("<id_unknown>", "refused")
    assert replies["answered"].error_message == ""


def test_typed_contents_under_an_unknown_datatype_are_refused_as_data_of_another_type(
    stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    code, text = _refusal(stub, _request(("INT33", "INT32"), data="fp32 contents"))
    assert (code, text) == (
        "INVALID_ARGUMENT",
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'FP32', "
        "expected datatype '<invalid>'",
    )


def test_the_checks_that_come_first_still_come_first(
    stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    code, text = _refusal(stub, _request(("INT33", "INT32"), first="NOPE"))
    assert code == "INVALID_ARGUMENT"
    assert text.startswith("unexpected inference input 'NOPE' for model 'simple'")
    code, text = _refusal(stub, _request(("INT33", "INT32"), data="none"))
    assert (code, text) == (
        "INVALID_ARGUMENT",
        "unable to find data for input tensor 'INPUT0' for model 'simple' in request.",
    )


def test_an_unknown_datatype_in_a_shared_memory_region_is_refused_once_the_region_is_found(
    server: ServerProcess, stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    key = f"/trt_datatype_test_{os.getpid()}"
    region = shm.create_shared_memory_region("datatype_test", key, 2 * len(SIXTEEN_INT32))
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        shm.set_shared_memory_region(region, [np.arange(16, dtype=np.int32)] * 2)
        client.register_system_shared_memory("datatype_test", key, 2 * len(SIXTEEN_INT32))
        for name in ("datatype_test", "no_such_region"):
            request = grpc_service_pb2.ModelInferRequest(model_name="simple")
            for index, (tensor_name, datatype) in enumerate((("INPUT0", "INT33"), ("INPUT1", "INT32"))):
                tensor = request.inputs.add(name=tensor_name, datatype=datatype, shape=(1, 16))
                parameters = tensor.parameters
                parameters["shared_memory_region"].string_param = name if index == 0 else "datatype_test"
                parameters["shared_memory_byte_size"].int64_param = len(SIXTEEN_INT32)
                parameters["shared_memory_offset"].int64_param = index * len(SIXTEEN_INT32)
            code, text = _refusal(stub, request)
            if name == "datatype_test":
                assert (code, text) == ("INVALID_ARGUMENT", _mismatch("INPUT0"))
            else:  # the region is looked up first, as Triton's front end does
                assert code == "NOT_FOUND" and "Unable to find shared memory region: 'no_such_region'" in text
    finally:
        client.unregister_system_shared_memory()
        client.close()
        shm.destroy_shared_memory_region(region)


def test_contents_beside_a_shared_memory_region_are_refused_as_triton_refuses_them(
    stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    request = _request(("INT32", "INT32"), data="fp32 contents")
    request.inputs[0].parameters["shared_memory_region"].string_param = "any_region"
    assert _refusal(stub, request) == (
        "INVALID_ARGUMENT",
        "unexpected 'content' provided when using shared memory for input tensor 'INPUT0' for model 'simple'",
    )
