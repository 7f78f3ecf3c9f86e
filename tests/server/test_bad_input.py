"""Bad input gets a clear error and never takes the server down; the next good request succeeds."""

from __future__ import annotations

import gzip
import http.client
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support import ServerProcess

GOOD_INPUTS = [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
]


def _post(
    server: ServerProcess, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
    try:
        connection.request("POST", path, body, headers or {})
        response = connection.getresponse()
        payload = response.read()
    finally:
        connection.close()
    return response.status, (json.loads(payload) if payload else {})


def _infer(server: ServerProcess, document: object, model: str = "simple") -> tuple[int, dict]:
    return _post(server, f"/v2/models/{model}/infer", json.dumps(document).encode())


def _assert_still_serving(server: ServerProcess) -> None:
    status, body = _infer(server, {"inputs": GOOD_INPUTS})
    assert status == 200, body
    assert body["outputs"][0]["data"][:2] == [1, 2]


def _with(name: str, **changes: object) -> list[dict]:
    return [dict(tensor, **changes) if tensor["name"] == name else tensor for tensor in GOOD_INPUTS]


BAD_JSON_REQUESTS = {
    "malformed JSON": (b'{"inputs": [', "failed to parse"),
    "empty body": (b"", "empty"),
    "JSON array": (b"[1, 2]", "must be an object"),
    "no inputs": (b"{}", "'inputs'"),
}


@pytest.mark.parametrize("case", list(BAD_JSON_REQUESTS))
def test_unparsable_bodies_are_400(server: ServerProcess, case: str) -> None:
    body, fragment = BAD_JSON_REQUESTS[case]
    status, answer = _post(server, "/v2/models/simple/infer", body)
    assert status == 400  # Triton answers 500 for unparsable JSON: a client mistake is a 400
    assert fragment in answer["error"]
    _assert_still_serving(server)


BAD_TENSORS = {
    "unknown input": (
        [*GOOD_INPUTS, {"name": "EXTRA", "shape": [1], "datatype": "INT32", "data": [1]}],
        "EXTRA",
    ),
    "missing input": (GOOD_INPUTS[:1], "missing required input(s): INPUT1"),
    "wrong shape": (
        _with("INPUT0", shape=[1, 15], data=list(range(15))),
        "expected shape [-1, 16], got [1, 15]",
    ),
    "wrong dtype": (_with("INPUT0", datatype="FP32"), "expects 'INT32'"),
    "data shorter than shape": (_with("INPUT0", data=list(range(10))), "needs 16 elements"),
    "non-numeric data": (_with("INPUT0", data=["a"] * 16), "Unable to parse 'data'"),
    "batch over max_batch_size": (
        [dict(t, shape=[9, 16], data=t["data"] * 9) for t in GOOD_INPUTS],
        "batch size 9 is outside 1..8",
    ),
    "negative dimension": (_with("INPUT0", shape=[1, -16]), "non-negative"),
}


@pytest.mark.parametrize("case", list(BAD_TENSORS))
def test_bad_tensors_are_400_with_the_reason(server: ServerProcess, case: str) -> None:
    inputs, fragment = BAD_TENSORS[case]
    status, answer = _infer(server, {"inputs": inputs})
    assert status == 400
    assert fragment in answer["error"], answer["error"]
    _assert_still_serving(server)


def test_unknown_model_version_and_output(server: ServerProcess) -> None:
    status, answer = _infer(server, {"inputs": GOOD_INPUTS}, model="no_such_model")
    assert status == 400 and "Request for unknown model" in answer["error"]
    status, answer = _post(
        server, "/v2/models/simple/versions/7/infer", json.dumps({"inputs": GOOD_INPUTS}).encode()
    )
    assert status == 400 and "version 7" in answer["error"]
    status, answer = _infer(server, {"inputs": GOOD_INPUTS, "outputs": [{"name": "NOPE"}]})
    assert status == 400 and "NOPE" in answer["error"]
    _assert_still_serving(server)


def _binary_request(
    declared: int, actual: int, header_length: str | None = None
) -> tuple[bytes, dict[str, str]]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": n,
                    "shape": [1, 16],
                    "datatype": "INT32",
                    "parameters": {"binary_data_size": declared},
                }
                for n in ("INPUT0", "INPUT1")
            ]
        }
    ).encode()
    body = header + b"\x01" * actual
    return body, {"Inference-Header-Content-Length": header_length or str(len(header))}


@pytest.mark.parametrize(
    ("declared", "actual", "header_length", "fragment"),
    [
        (64, 100, None, "only 36 bytes"),  # truncated: the second tensor is short
        (64, 200, None, "no input claims"),  # extra bytes nobody claims
        (60, 120, None, "expected 64 bytes"),  # a size that does not fit the shape
        (64, 128, "99999", "Inference-Header-Content-Length is 99999"),
        (64, 128, "abc", "Unable to parse Inference-Header-Content-Length"),
    ],
)
def test_binary_payload_errors(
    server: ServerProcess, declared: int, actual: int, header_length: str | None, fragment: str
) -> None:
    body, headers = _binary_request(declared, actual, header_length)
    status, answer = _post(server, "/v2/models/simple/infer", body, headers)
    assert status == 400
    assert fragment in answer["error"], answer["error"]
    _assert_still_serving(server)


def test_a_body_that_claims_gzip_but_is_not(server: ServerProcess) -> None:
    status, answer = _post(server, "/v2/models/simple/infer", b"plain text", {"Content-Encoding": "gzip"})
    assert status == 400 and "decompress" in answer["error"]
    body = gzip.compress(json.dumps({"inputs": GOOD_INPUTS}).encode())
    assert _post(server, "/v2/models/simple/infer", body, {"Content-Encoding": "gzip"})[0] == 200


def test_a_burst_of_good_and_bad_requests_each_gets_its_answer(server: ServerProcess) -> None:
    def one(index: int) -> tuple[int, int, dict]:
        if index % 3 == 0:
            return index, *_infer(server, {"inputs": _with("INPUT0", datatype="FP32")})
        inputs = _with("INPUT0", data=[index] * 16)
        return index, *_infer(server, {"inputs": inputs})

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(60)))
    assert len(results) == 60
    for index, status, body in results:
        if index % 3 == 0:
            assert status == 400
        else:
            assert status == 200 and body["outputs"][0]["data"][0] == index + 1
    assert server.alive()
