"""Status codes and texts that Triton's clients and NVIDIA's example clients match on, as Triton 2.51
answers them (measured against it here: the peer in ../shared/PEERS.md), over HTTP and gRPC."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from tests.server.test_bad_input import _request
from tests.support import ServerProcess
from trt.protos import grpc_service_pb2 as pb
from trt.protos import grpc_service_pb2_grpc

# (path, status, error text) for GET requests; broken_config failed to load, so no version serves.
HTTP_CASES = [
    ("/v2/models/no_such_model", 404, "Request for unknown model: 'no_such_model' is not found"),
    ("/v2/models/no_such_model/config", 404, "Request for unknown model: 'no_such_model' is not found"),
    ("/v2/models/simple/versions/7", 404, "Request for unknown model: 'simple' version 7 is not found"),
    (
        "/v2/models/simple/versions/7/config",
        404,
        "Request for unknown model: 'simple' version 7 is not found",
    ),
    ("/v2/models/broken_config", 404, "Request for unknown model: 'broken_config' has no available versions"),
    ("/v2/models/no_such_model/ready", 400, "Model version not ready"),
    ("/v2/models/simple/versions/7/ready", 400, "Model version not ready"),
    ("/v2/models/broken_config/ready", 400, "Model version not ready"),
    ("/v2/models/no_such_model/stats", 400, "requested model 'no_such_model' is not available"),
    (
        "/v2/models/simple/versions/7/stats",
        400,
        "requested model version is not available for model 'simple'",
    ),
    # a version of more digits than int() reads: a 500 until 2026-11-28
    (
        f"/v2/models/simple/versions/{'9' * 5000}",
        400,
        f"failed to get model version from specified version string '{'9' * 5000}' (details: stol), "
        "version should be an integral value > 0",
    ),
]


@pytest.mark.parametrize(("path", "status", "text"), HTTP_CASES, ids=[case[0][:40] for case in HTTP_CASES])
def test_http_answers_as_triton(server: ServerProcess, path: str, status: int, text: str) -> None:
    got, _, body = _request(server, path, method="GET")
    assert (got, body) == (status, {"error": text})


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[grpc_service_pb2_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)


NOT_A_NUMBER = (
    "failed to get model version from specified version string '{}' (details: stol), "
    "version should be an integral value > 0"
)
GRPC_CASES = [
    ("ModelMetadata", "no_such_model", "", grpc.StatusCode.NOT_FOUND, "'no_such_model' is not found"),
    ("ModelConfig", "no_such_model", "", grpc.StatusCode.NOT_FOUND, "'no_such_model' is not found"),
    ("ModelConfig", "broken_config", "", grpc.StatusCode.NOT_FOUND, "has no available versions"),
    ("ModelMetadata", "simple", "0", grpc.StatusCode.NOT_FOUND, "'simple' version 0 is not found"),
    ("ModelMetadata", "simple", "abc", grpc.StatusCode.INVALID_ARGUMENT, NOT_A_NUMBER.format("abc")),
    ("ModelConfig", "simple", "abc", grpc.StatusCode.INVALID_ARGUMENT, NOT_A_NUMBER.format("abc")),
    ("ModelReady", "simple", "abc", grpc.StatusCode.INVALID_ARGUMENT, NOT_A_NUMBER.format("abc")),
    ("ModelMetadata", "simple", "9" * 20, grpc.StatusCode.INVALID_ARGUMENT, NOT_A_NUMBER.format("9" * 20)),
    # more digits than int() reads (it raised ValueError, an INTERNAL error, until 2026-11-28)
    (
        "ModelMetadata", "simple", "9" * 5000, grpc.StatusCode.INVALID_ARGUMENT,
        NOT_A_NUMBER.format("9" * 5000),
    ),
    # digits std::stol does not read: Arabic-Indic one, superscript two
    ("ModelMetadata", "simple", "\u0661", grpc.StatusCode.INVALID_ARGUMENT, NOT_A_NUMBER.format("\u0661")),
    ("ModelReady", "simple", "\xb2", grpc.StatusCode.INVALID_ARGUMENT, NOT_A_NUMBER.format("\xb2")),
    (
        "ModelMetadata", "simple", "-3", grpc.StatusCode.INVALID_ARGUMENT,
        "invalid model version specified '-3' , version should be an integral value > 0",
    ),
    ("ModelStatistics", "no_such_model", "", grpc.StatusCode.INVALID_ARGUMENT, "is not available"),
]  # fmt: skip
REQUESTS = {
    "ModelMetadata": pb.ModelMetadataRequest,
    "ModelConfig": pb.ModelConfigRequest,
    "ModelReady": pb.ModelReadyRequest,
    "ModelStatistics": pb.ModelStatisticsRequest,
}


@pytest.mark.parametrize(
    ("rpc", "name", "version", "code", "text"),
    GRPC_CASES,
    ids=[f"{c[0]}-{c[1]}-{c[2][:5]}" for c in GRPC_CASES],
)
def test_grpc_answers_as_triton(
    stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub,
    rpc: str,
    name: str,
    version: str,
    code: grpc.StatusCode,
    text: str,
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        getattr(stub, rpc)(REQUESTS[rpc](name=name, version=version), timeout=30)
    assert caught.value.code() == code
    assert text in (caught.value.details() or "")


def test_grpc_versions_read_as_std_stol_reads_them(
    stub: grpc_service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    """Leading blanks and trailing text are ignored, as C++ std::stol does in Triton."""
    for version in ("1", " 1", "+1", "1abc", "0" * 5000 + "1"):
        reply = stub.ModelMetadata(pb.ModelMetadataRequest(name="simple", version=version), timeout=30)
        assert reply.name == "simple", version
    # An unknown model or version is not ready, and that is an answer, not an error (Triton 2.51).
    assert not stub.ModelReady(pb.ModelReadyRequest(name="no_such_model"), timeout=30).ready
    assert not stub.ModelReady(pb.ModelReadyRequest(name="simple", version="7"), timeout=30).ready
    assert stub.ModelReady(pb.ModelReadyRequest(name="simple", version="1"), timeout=30).ready
