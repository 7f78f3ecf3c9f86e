"""Triton's gRPC flags at work: keepalive PINGs and their timeout, the ping-strike rule's switch, the
maximum connection age and its grace, and inference responses compressed at the level asked."""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from typer.testing import CliRunner

from tests.server.grpc.h2_peer import SERVICE, H2Peer, grpc_message, request_block
from tests.support import ServerProcess, simple_inputs, write_simple
from trt.cli.main import app
from trt.http2.frames import ACK, END_STREAM, ErrorCode, FrameType
from trt.protos import grpc_service_pb2 as pb


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("options_repo")
    write_simple(repo)
    flags = [
        "--grpc-keepalive-time=300",
        "--grpc-keepalive-timeout=300",
        "--grpc-keepalive-permit-without-calls=true",
        "--grpc-http2-max-ping-strikes=0",
        "--grpc-max-connection-age=2500",
        "--grpc-max-connection-age-grace=500",
        "--grpc-infer-response-compression-level=high",
    ]
    proc = ServerProcess([repo], flags).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def test_keepalive_pings_come_and_an_unanswered_one_ends_the_connection(server: ServerProcess) -> None:
    peer = H2Peer(server.grpc_url)
    began = time.monotonic()
    ping = peer.until({FrameType.PING}, timeout=5)
    assert ping is not None and not ping.flags & ACK
    assert 0.2 < time.monotonic() - began < 2
    assert peer.until(set(), timeout=5) is None  # not acknowledged: closed after the timeout
    assert time.monotonic() - began < 3
    peer.close()


def test_a_connection_that_answers_keepalive_lives_until_its_maximum_age(server: ServerProcess) -> None:
    peer = H2Peer(server.grpc_url)
    peer.answer_pings = True
    began = time.monotonic()
    goaway = peer.until({FrameType.GOAWAY})
    assert goaway is not None, "closed before its maximum age"
    assert goaway.error_code == ErrorCode.NO_ERROR
    assert 2.0 < time.monotonic() - began < 6  # the age: 2.5 s
    assert peer.until(set(), timeout=5) is None  # then closed (no call was open)
    peer.close()


def test_a_call_open_at_the_maximum_age_gets_its_grace(server: ServerProcess) -> None:
    peer = H2Peer(server.grpc_url)
    peer.answer_pings = True
    peer.headers(1, request_block(SERVICE + "ServerLive"))  # opened, never finished
    goaway = peer.until({FrameType.GOAWAY}, timeout=10)
    assert goaway is not None and goaway.error_code == ErrorCode.NO_ERROR
    after = time.monotonic()
    assert peer.until(set(), timeout=5) is None  # cut after the grace period
    assert 0.3 < time.monotonic() - after < 3
    peer.close()


def test_with_ping_strikes_off_pings_are_never_too_many(server: ServerProcess) -> None:
    peer = H2Peer(server.grpc_url)
    for _ in range(6):
        peer.send(FrameType.PING, 0, 0, b"strikes!")
    for _ in range(6):
        frame = peer.until({FrameType.PING, FrameType.GOAWAY})
        if frame is not None and frame.kind == FrameType.PING and not frame.flags & ACK:
            frame = peer.until({FrameType.PING, FrameType.GOAWAY})  # a keepalive PING of the server's
        assert frame is not None and frame.kind == FrameType.PING and frame.payload == b"strikes!"
    peer.close()


def _infer_message() -> bytes:
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(np.arange(16, dtype=np.int32).tobytes())
    return request.SerializeToString()


@pytest.mark.parametrize(("accepted", "expected"), [("identity,deflate,gzip", "deflate"), ("gzip", "gzip")])
def test_infer_responses_are_compressed_at_the_level_asked(
    server: ServerProcess, accepted: str, expected: str
) -> None:
    peer = H2Peer(server.grpc_url)
    peer.headers(1, request_block(SERVICE + "ModelInfer", ("grpc-accept-encoding", accepted)))
    peer.send(FrameType.DATA, END_STREAM, 1, grpc_message(_infer_message()))
    headers, data, trailers = peer.response(1)
    assert headers["grpc-encoding"] == expected and trailers["grpc-status"] == "0"
    flag, length = struct.unpack(">BI", data[:5])
    assert flag == 1 and length == len(data) - 5
    reply = pb.ModelInferResponse.FromString(zlib.decompress(data[5:], 31 if expected == "gzip" else 15))
    assert np.frombuffer(reply.raw_output_contents[0], np.int32).tolist() == list(range(0, 32, 2))
    # Other calls are not compressed, as in Triton; nor are answers to clients that accept none.
    peer.call(3, "ServerLive", pb.ServerLiveRequest().SerializeToString(), ("grpc-accept-encoding", accepted))
    headers, data, _ = peer.response(3)
    assert "grpc-encoding" not in headers and data[0] == 0
    peer.call(5, "ModelInfer", _infer_message())
    headers, data, _ = peer.response(5)
    assert "grpc-encoding" not in headers and data[0] == 0
    peer.close()


def test_tritonclient_reads_compressed_responses(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    data = np.arange(32, dtype=np.int32).reshape(2, 16)
    for algorithm in (None, "gzip", "deflate"):
        result = client.infer("simple", simple_inputs(grpcclient, data), compression_algorithm=algorithm)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + data)
    client.close()


@pytest.mark.parametrize(
    ("flag", "words"),
    [
        ("--grpc-infer-response-compression-level=fast", "takes none, low, medium or high"),
        ("--grpc-use-ssl=true", "needs --grpc-server-cert and --grpc-server-key"),
        ("--grpc-keepalive-time=-1", "--grpc-keepalive-time must not be negative"),
        ("--grpc-max-response-pool-size=0", "--grpc-max-response-pool-size must be greater than 0"),
    ],
)
def test_bad_grpc_flags_are_refused_with_their_name(flag: str, words: str) -> None:
    result = CliRunner().invoke(app, ["serve", flag])
    assert result.exit_code == 2
    assert words in " ".join(result.output.replace("│", " ").split())
