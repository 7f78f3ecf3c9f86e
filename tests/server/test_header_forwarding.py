"""Triton's --http-header-forward-pattern and --grpc-header-forward-pattern: the request headers whose
names the pattern finds reach the model as string request parameters, over each protocol only as its
own flag says. A Python model answers with the parameters it was given."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, write_python_model
from trt.server.core.errors import InvalidArgument
from trt.server.header_forwarding import HeaderForwarding

PARAMETERS_ECHO = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("PARAMETERS", np.array([request.parameters().encode()], dtype=object))]
            )
            for request in requests
        ]
"""

PARAMETERS_ECHO_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("forward_repo")
    write_python_model(repo, "echo", PARAMETERS_ECHO, PARAMETERS_ECHO_CONFIG)
    proc = ServerProcess(
        [repo],
        ["--http-header-forward-pattern=^x-tenant|trace", "--grpc-header-forward-pattern=(?-i)^tenant|^X-"],
    )
    proc.start(tmp_path_factory.mktemp("forward_logs"))
    yield proc
    assert proc.alive(), proc.log()
    proc.stop()


def _http_parameters(server: ServerProcess, headers: dict[str, str], **parameters: str) -> dict:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
    result = client.infer("echo", [tensor], headers=headers, parameters=parameters or None)
    return json.loads(result.as_numpy("PARAMETERS")[0])


def _grpc_parameters(server: ServerProcess, headers: dict[str, str], stream: bool = False) -> dict:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
    if not stream:
        return json.loads(client.infer("echo", [tensor], headers=headers).as_numpy("PARAMETERS")[0])
    answers: list = []
    client.start_stream(callback=lambda result, error: answers.append((result, error)), headers=headers)
    client.async_stream_infer("echo", [tensor])
    client.stop_stream()
    ((result, error),) = answers
    assert error is None, error
    return json.loads(result.as_numpy("PARAMETERS")[0])


def test_http_headers_the_pattern_finds_are_string_parameters(server: ServerProcess) -> None:
    headers = {"X-Tenant-Id": "acme", "My-Trace": "t-1", "X-Other": "no", "Tenant": "gRPC's pattern"}
    # Found without regard to case, and handed on as the client spelt them (as Triton's HTTP server
    # does), twice: the second request's head is looked up, not parsed (``heads``)
    for _ in range(2):
        assert _http_parameters(server, headers, own="kept") == {
            "own": "kept", "X-Tenant-Id": "acme", "My-Trace": "t-1"
        }  # fmt: skip
    assert _http_parameters(server, {"x-tenant-id": "lower"}) == {"x-tenant-id": "lower"}


def test_a_header_forwarded_over_a_parameter_of_its_name_wins(server: ServerProcess) -> None:
    # Triton appends the header's parameter after the request's own: the model reads the header's
    assert _http_parameters(server, {"x-tenant": "header"}, **{"x-tenant": "body"}) == {"x-tenant": "header"}


def test_a_reserved_name_cannot_be_forwarded(server: ServerProcess) -> None:
    with pytest.raises(InferenceServerException) as caught:
        _http_parameters(server, {"trace": "on", "triton_trace": "1"})
    assert "Header 'triton_trace' is reserved for Triton usage and cannot be forwarded." in str(caught.value)
    assert caught.value.status() == "400"
    # Reserved names are Triton's exact spellings: another spelling is an ordinary header there too
    assert _http_parameters(server, {"Triton_Trace": "1"}) == {"Triton_Trace": "1"}


@pytest.mark.parametrize("stream", [False, True], ids=["ModelInfer", "ModelStreamInfer"])
def test_grpc_metadata_follows_its_own_pattern(server: ServerProcess, stream: bool) -> None:
    # Its own pattern, matched as written: gRPC metadata names are lower case, so "^X-" finds none
    assert _grpc_parameters(server, {"tenant": "acme", "x-tenant-id": "HTTP's pattern"}, stream) == {
        "tenant": "acme"
    }


def test_parse_matches_without_case_unless_told_otherwise() -> None:
    assert HeaderForwarding.parse("^x-tenant").parameters([("x-tenant", "a"), ("other", "b")], {}) == {
        "x-tenant": "a"
    }
    assert HeaderForwarding.parse("TENANT").parameters([("x-tenant", "a")], {"p": 1}) == {
        "p": 1,
        "x-tenant": "a",
    }
    assert HeaderForwarding.parse("(?-i)TENANT").parameters([("x-tenant", "a")], {"p": 1}) == {"p": 1}
    with pytest.raises(ValueError, match="--http-header-forward-pattern"):
        HeaderForwarding.parse("(", "--http-header-forward-pattern")
    for name in ("sequence_id", "priority", "timeout", "headers", "binary_data_output", "triton_x"):
        with pytest.raises(InvalidArgument, match=f"Header '{name}' is reserved"):
            HeaderForwarding.parse(".").parameters([(name, "1")], {})


def test_headers_are_forwarded_through_front_end_workers(tmp_path: Path) -> None:
    """A worker sends HTTP requests whole (with their headers), not split by layout, and each gRPC
    call's metadata with it."""
    write_python_model(tmp_path / "repo", "echo", PARAMETERS_ECHO, PARAMETERS_ECHO_CONFIG)
    flags = ["--frontend-workers=1", "--http-header-forward-pattern=^x-", "--grpc-header-forward-pattern=^x-"]
    server = ServerProcess([tmp_path / "repo"], flags)
    server.start(tmp_path)
    try:
        for _ in range(2):  # the second, of a JSON header seen before, would go apart with layouts on
            assert _http_parameters(server, {"X-Tenant": "acme"}) == {"X-Tenant": "acme"}
        for stream in (False, True):
            forwarded = _grpc_parameters(server, {"x-tenant": "acme", "other": "no"}, stream)
            assert forwarded == {"x-tenant": "acme"}
    finally:
        server.stop()
