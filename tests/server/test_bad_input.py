"""Bad input gets a clear error and never takes the server down; the next good request succeeds.

Requests go out raw (``http.client``, the bare gRPC stub) because tritonclient refuses to send most of
them. Every test ends by checking that a good request still gets the right answer.
"""

from __future__ import annotations

import gzip
import http.client
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest

from tests.support import ServerProcess
from trt.protos import grpc_service_pb2, grpc_service_pb2_grpc

INFER = "/v2/models/simple/infer"
FIRST = list(range(16))
GOOD_INPUTS = [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": FIRST},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
]


def _request(
    server: ServerProcess,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    method: str = "POST",
) -> tuple[int, str, dict]:
    """One request on its own connection: the status, the Content-Type and the JSON body."""
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        connection.request(method, path, body, headers or {})
        response = connection.getresponse()
        payload = response.read()
    finally:
        connection.close()
    return response.status, response.getheader("Content-Type", ""), (json.loads(payload) if payload else {})


def _document(inputs: list[dict], **fields: object) -> bytes:
    return json.dumps({"inputs": inputs, **fields}).encode()


def _with(name: str, **changes: object) -> list[dict]:
    """GOOD_INPUTS with one input's fields replaced."""
    return [dict(tensor, **changes) if tensor["name"] == name else tensor for tensor in GOOD_INPUTS]


def _assert_still_serving(server: ServerProcess) -> None:
    status, _, body = _request(server, INFER, _document(GOOD_INPUTS))
    assert status == 200, body
    assert [output["name"] for output in body["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert body["outputs"][0]["data"] == [value + 1 for value in FIRST]
    assert body["outputs"][1]["data"] == [value - 1 for value in FIRST]
    assert server.alive()


def _assert_error(
    server: ServerProcess,
    status: int,
    fragment: str,
    path: str = INFER,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    method: str = "POST",
) -> None:
    """The request is answered with ``status`` and a JSON error naming the problem; then a good one works."""
    got, content_type, answer = _request(server, path, body, headers, method)
    assert got == status, answer
    assert content_type == "application/json"
    assert set(answer) == {"error"}
    assert fragment in answer["error"], answer["error"]
    _assert_still_serving(server)


# -- bodies that are not an inference request ------------------------------------------------------

UNPARSABLE_BODIES = {
    "malformed JSON": (b'{"inputs": [', "failed to parse the request JSON"),
    "empty body": (b"", "the request body is empty"),
    "JSON array": (b"[1, 2]", "must be an object"),
    "no inputs": (b'{"id": "7"}', "'inputs'"),
    "inputs not an array": (b'{"inputs": {"name": "INPUT0"}}', "'inputs'"),
}


@pytest.mark.parametrize("case", list(UNPARSABLE_BODIES))
def test_unparsable_bodies_are_400_not_500(server: ServerProcess, case: str) -> None:
    body, fragment = UNPARSABLE_BODIES[case]
    # Triton 2.51 answers 500 for malformed JSON and for a missing 'inputs': a client mistake is a 400.
    _assert_error(server, 400, fragment, body=body)


# -- tensors that do not fit the model -------------------------------------------------------------

BAD_TENSORS = {
    "unknown input name": (
        [*GOOD_INPUTS, {"name": "EXTRA", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}],
        "unexpected inference input 'EXTRA'",
    ),
    "missing required input": (
        GOOD_INPUTS[:1],
        (
            "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], "
            "but missing required input(s) ['INPUT1']. Please provide all required input(s)."
        ),
    ),
    "wrong shape": (
        _with("INPUT0", shape=[1, 15], data=list(range(15))),
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'simple'. "
        "Expected [-1,16], got [1,15].",
    ),
    "wrong datatype": (
        _with("INPUT0", datatype="FP32"),
        "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
    ),
    "fewer elements than the shape": (
        _with("INPUT0", data=list(range(10))),
        "shape [1, 16] needs 16 elements but 'data' has 10",
    ),
    "more elements than the shape": (
        _with("INPUT0", data=list(range(20))),
        "shape [1, 16] needs 16 elements but 'data' has 20",
    ),
    "non-numeric data for INT32": (_with("INPUT0", data=["a"] * 16), "Unable to parse 'data' as INT32"),
    "batch size over max_batch_size": (
        [dict(tensor, shape=[9, 16], data=tensor["data"] * 9) for tensor in GOOD_INPUTS],
        "inference request batch-size must be <= 8 for 'simple'",
    ),
    "negative dimension": (_with("INPUT0", shape=[1, -16]), "non-negative"),
    "unknown datatype": (_with("INPUT0", datatype="INT33"), "invalid datatype for input INPUT0"),
}


@pytest.mark.parametrize("case", list(BAD_TENSORS))
def test_tensors_that_do_not_fit_are_400_naming_the_input(server: ServerProcess, case: str) -> None:
    inputs, fragment = BAD_TENSORS[case]
    _assert_error(server, 400, fragment, body=_document(inputs))


# -- the binary tensor extension -------------------------------------------------------------------


def _binary_header(size: int) -> bytes:
    parameters = {"binary_data_size": size}
    return _document(
        [
            {"name": name, "shape": [1, 16], "datatype": "INT32", "parameters": parameters}
            for name in ("INPUT0", "INPUT1")
        ]
    )


def _binary_body(declared: int, attached: int) -> tuple[bytes, int]:
    """A JSON header declaring ``declared`` bytes per input, then ``attached`` bytes in all."""
    header = _binary_header(declared)
    return header + b"\x01" * attached, len(header)


BINARY_CASES = {
    # (bytes declared per input, bytes attached, Inference-Header-Content-Length or None for the true one)
    # Triton's texts, then trt's detail
    "payload shorter than binary_data_size": (
        64, 100, None,
        "unexpected size for input 'INPUT1', expecting 28 additional bytes for model 'simple' "
        "(binary_data_size is 64 but only 36 bytes of binary data remain",
    ),
    "extra bytes no input claims": (
        64, 200, None, "unexpected additional input data for model 'simple' (72 bytes of binary data that no"
    ),
    "binary_data_size that does not fit the shape": (60, 120, None, "Expected 64, got 60"),
    # Triton's texts; the body is the JSON header's 210 bytes and 128 attached
    "header length larger than the body": (64, 128, "99999", "should be in range (0, 338), got: 99999"),
    "header length not a number": (64, 128, "abc", "parse Inference-Header-Content-Length, got: abc"),
    "header length negative": (64, 128, "-5", "inference header size should be in range (0, 338), got: -5"),
    "header length past int32": (
        64, 128, "2147483648",
        "Inference-Header-Content-Length, value is out of range [ -2147483648, 2147483647 ], got: 2147483648",
    ),
    # std::stoi reads "2_10" as 2, a JSON header of two bytes (int() would read the true 210)
    "header length with an underscore": (64, 128, "2_10", "failed to parse the request JSON: unexpected"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BINARY_CASES))
def test_binary_payload_errors_are_400(server: ServerProcess, case: str) -> None:
    declared, attached, header_length, fragment = BINARY_CASES[case]
    body, true_length = _binary_body(declared, attached)
    headers = {"Inference-Header-Content-Length": header_length or str(true_length)}
    _assert_error(server, 400, fragment, body=body, headers=headers)


@pytest.mark.parametrize("written", ["{length}", " {length}", "+{length}", "{length}abc", "000{length}"])
def test_the_header_length_is_read_as_triton_reads_it(server: ServerProcess, written: str) -> None:
    """As C++'s ``std::stoi``: blanks and a sign before the digits, anything after them, ignored."""
    header = _binary_header(64)
    tensors = np.arange(16, dtype="<i4").tobytes() + np.ones(16, dtype="<i4").tobytes()
    headers = {"Inference-Header-Content-Length": written.format(length=len(header))}
    status, _, body = _request(server, INFER, header + tensors, headers)
    assert status == 200, body
    assert body["outputs"][0]["data"] == [value + 1 for value in FIRST]


def test_a_well_formed_binary_request_is_answered(server: ServerProcess) -> None:
    """The counterpart of the cases above, so they fail for the reason they name."""
    header = _binary_header(64)
    tensors = np.arange(16, dtype="<i4").tobytes() + np.ones(16, dtype="<i4").tobytes()
    status, _, body = _request(
        server, INFER, header + tensors, {"Inference-Header-Content-Length": str(len(header))}
    )
    assert status == 200, body
    assert body["outputs"][0]["data"] == [value + 1 for value in FIRST]


# -- models, versions, outputs, routes, encodings, parameters --------------------------------------

OTHER_CASES = {
    # As Triton 2.51: an unknown model or version is NOT_FOUND (404), with its text.
    "unknown model": (
        "POST", "/v2/models/no_such_model/infer", _document(GOOD_INPUTS), {},
        404, "Request for unknown model: 'no_such_model' is not found",
    ),
    "unknown version": (
        "POST", "/v2/models/simple/versions/7/infer", _document(GOOD_INPUTS), {},
        404, "Request for unknown model: 'simple' version 7 is not found",
    ),
    "unknown requested output": (
        "POST", INFER, _document(GOOD_INPUTS, outputs=[{"name": "NOPE"}]), {},
        400, "unexpected inference output 'NOPE'",
    ),
    "GET on /infer": ("GET", INFER, b"", {}, 405, "Method Not Allowed"),
    "unknown route": ("GET", "/v2/no/such/route", b"", {}, 404, "Not Found"),
    "version not a number": ("POST", "/v2/models/simple/versions/one/infer", b"", {}, 404, "Not Found"),
    "gzip body that is not gzip": (
        "POST", INFER, _document(GOOD_INPUTS), {"Content-Encoding": "gzip"},
        400, "cannot decompress the gzip body",
    ),
    "reserved triton_ parameter": (
        "POST", INFER, _document(GOOD_INPUTS, parameters={"triton_secret": 1}), {},
        400, "parameter keys starting with 'triton_' are reserved",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(OTHER_CASES))
def test_requests_the_server_cannot_route_or_accept(server: ServerProcess, case: str) -> None:
    method, path, body, headers, status, fragment = OTHER_CASES[case]
    _assert_error(server, status, fragment, path=path, body=body, headers=headers, method=method)


def test_a_model_that_failed_to_load_is_not_found(server: ServerProcess) -> None:
    # Triton 2.51 answers 404 here (no version of the model is serving), as for unknown models.
    _assert_error(
        server,
        404,
        "Request for unknown model: 'broken_config' has no available versions",
        path="/v2/models/broken_config/infer",
        body=_document(GOOD_INPUTS),
    )


def test_a_real_gzip_body_is_accepted(server: ServerProcess) -> None:
    """The counterpart of the not-gzip case: the header itself is honoured."""
    body = gzip.compress(_document(GOOD_INPUTS))
    status, _, answer = _request(server, INFER, body, {"Content-Encoding": "gzip"})
    assert status == 200, answer
    assert answer["outputs"][0]["data"] == [value + 1 for value in FIRST]


# -- gRPC ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[grpc_service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)


def _raw_request(model: str = "simple") -> grpc_service_pb2.ModelInferRequest:
    request = grpc_service_pb2.ModelInferRequest(model_name=model)
    for name, values in (("INPUT0", np.arange(16)), ("INPUT1", np.ones(16))):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(values.astype("<i4").tobytes())
    return request


def _drop_last_raw(request: grpc_service_pb2.ModelInferRequest) -> None:
    request.raw_input_contents.pop()


def _add_raw(request: grpc_service_pb2.ModelInferRequest) -> None:
    request.raw_input_contents.append(b"\x00" * 64)


def _shorten_raw(request: grpc_service_pb2.ModelInferRequest) -> None:
    request.raw_input_contents[0] = request.raw_input_contents[0][:60]


def _wrong_dtype(request: grpc_service_pb2.ModelInferRequest) -> None:
    request.inputs[0].datatype = "FP32"


def _unknown_model(request: grpc_service_pb2.ModelInferRequest) -> None:
    request.model_name = "no_such_model"


def _unknown_version(request: grpc_service_pb2.ModelInferRequest) -> None:
    request.model_version = "7"


def _version_not_a_number(request: grpc_service_pb2.ModelInferRequest) -> None:
    request.model_version = "one"


def _negative_version(request: grpc_service_pb2.ModelInferRequest) -> None:
    request.model_version = "-2"


GRPC_CASES: dict[str, tuple[Callable[[grpc_service_pb2.ModelInferRequest], None], str]] = {
    "fewer raw contents than inputs": (
        _drop_last_raw,
        "unable to find data for input tensor 'INPUT1' for model 'simple' in request.",
    ),
    "more raw contents than inputs": (_add_raw, "2 inputs outside shared memory but 3 entries"),
    "raw bytes shorter than the shape": (
        _shorten_raw,
        "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got",
    ),
    "wrong datatype": (
        _wrong_dtype,
        "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
    ),
    "unknown model": (_unknown_model, "Request for unknown model: 'no_such_model' is not found"),
    "unknown version": (_unknown_version, "Request for unknown model: 'simple' version 7 is not found"),
    "version not a number": (
        _version_not_a_number,
        "failed to get model version from specified version string 'one' (details: stol), version "
        "should be an integral value > 0",
    ),
    "negative version": (_negative_version, "invalid model version specified '-2' , version should be"),
}
# As Triton 2.51 answers them: an unknown model or version is NOT_FOUND, the rest INVALID_ARGUMENT.
NOT_FOUND_CASES = {"unknown model", "unknown version"}


@pytest.mark.parametrize("case", list(GRPC_CASES))
def test_grpc_bad_requests_answer_with_tritons_status_and_text(
    server: ServerProcess, stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub, case: str
) -> None:
    spoil, fragment = GRPC_CASES[case]
    request = _raw_request()
    spoil(request)
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(request, timeout=30)
    error = caught.value
    expected = grpc.StatusCode.NOT_FOUND if case in NOT_FOUND_CASES else grpc.StatusCode.INVALID_ARGUMENT
    assert error.code() == expected, error.details()
    assert fragment in error.details()

    reply = stub.ModelInfer(_raw_request(), timeout=30)
    sums = np.frombuffer(reply.raw_output_contents[0], dtype="<i4")
    assert sums.tolist() == [value + 1 for value in FIRST]
    _assert_still_serving(server)


# -- many at once ----------------------------------------------------------------------------------

_TRUNCATED, _TRUNCATED_HEADER_LENGTH = _binary_body(64, 100)
BURST_BAD = [
    (
        _document(_with("INPUT0", datatype="FP32")),
        {},
        "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
    ),
    (b'{"inputs": [', {}, "failed to parse"),
    (_document(GOOD_INPUTS[:1]), {}, "missing required input"),
    (_TRUNCATED, {"Inference-Header-Content-Length": str(_TRUNCATED_HEADER_LENGTH)}, "only 36 bytes"),
]


def test_a_burst_of_good_and_bad_requests_each_gets_its_answer(server: ServerProcess) -> None:
    """50 requests from 16 threads, every third one bad: each is answered, none lost or mixed up."""

    def one(index: int) -> tuple[int, int, dict]:
        if index % 3 == 0:
            body, headers, _ = BURST_BAD[index // 3 % len(BURST_BAD)]
            status, _, answer = _request(server, INFER, body, headers)
        else:
            inputs = _with("INPUT0", data=[index * 100 + i for i in range(16)])
            status, _, answer = _request(server, INFER, _document(inputs, id=str(index)))
        return index, status, answer

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(50)))

    assert sorted(index for index, _, _ in results) == list(range(50))
    for index, status, answer in results:
        if index % 3 == 0:
            fragment = BURST_BAD[index // 3 % len(BURST_BAD)][2]
            assert status == 400, answer
            assert fragment in answer["error"], answer["error"]
        else:
            assert status == 200, answer
            assert answer["id"] == str(index)
            assert answer["outputs"][0]["data"] == [index * 100 + i + 1 for i in range(16)]
    _assert_still_serving(server)
