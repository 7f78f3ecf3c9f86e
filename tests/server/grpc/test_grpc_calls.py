"""gRPC call semantics on trt's HTTP/2 server: deadlines (the request is cancelled in the core), status
codes and percent-encoded messages, what is not a gRPC call, message limits, compression errors, and
memory: a large message is not copied on its way through, and a refused request's tensors are freed
at once (not at a garbage-collection pass)."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from tests.server.backends.python.python_models import WAITER, WAITER_CONFIG
from tests.server.grpc.h2_peer import SERVICE, H2Peer, grpc_message, request_block
from tests.support import ServerProcess, save_onnx, write_identity, write_python_model, write_simple
from trt.http2.frames import END_STREAM, FrameType, Setting
from trt.http2.hpack import encode_header
from trt.protos import grpc_service_pb2 as pb


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("calls_repo")
    write_simple(repo)
    write_identity(repo)
    write_python_model(repo, "waiter", WAITER, WAITER_CONFIG)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])],
        "identity_fp32",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", "n"])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", "n"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    save_onnx(model, repo / "identity_fp32" / "1" / "model.onnx")
    proc = ServerProcess([repo]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    assert proc.alive(), proc.log()
    proc.stop()


def _waiter_request(request_id: str) -> bytes:
    request = pb.ModelInferRequest(model_name="waiter", id=request_id)
    request.inputs.add(name="IN", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([0], np.int32).tobytes())
    return request.SerializeToString()


def _wait_for_log(server: ServerProcess, text: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while text not in server.log():
        assert time.monotonic() < deadline, f"{text!r} not in the log:\n{server.log()}"
        time.sleep(0.05)


def _status(headers: dict[str, str], trailers: dict[str, str]) -> tuple[str, str]:
    fields = trailers or headers
    return fields["grpc-status"], fields.get("grpc-message", "")


def test_a_passed_deadline_answers_deadline_exceeded_and_cancels_the_request(server: ServerProcess) -> None:
    peer = H2Peer(server.grpc_url)
    began = time.monotonic()
    peer.call(1, "ModelInfer", _waiter_request("wait-deadline"), ("grpc-timeout", "300m"))
    assert _status(*_without_data(peer.response(1))) == ("4", "Deadline Exceeded")
    assert 0.25 < time.monotonic() - began < 3
    _wait_for_log(server, "waiter: wait-deadline cancelled")
    peer.close()


def _without_data(
    response: tuple[dict[str, str], bytes, dict[str, str]],
) -> tuple[dict[str, str], dict[str, str]]:
    return response[0], response[2]


def test_tritonclient_timeouts_are_deadlines(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([0], np.int32))
    with pytest.raises(InferenceServerException, match="Deadline Exceeded"):
        client.infer("waiter", [tensor], request_id="wait-client-timeout", client_timeout=0.3)
    _wait_for_log(server, "waiter: wait-client-timeout cancelled")
    assert client.infer("waiter", [tensor]).as_numpy("OUT")[0] == 1
    client.close()


def test_an_unknown_method_is_unimplemented(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(SERVICE + "NoSuchRpc")
        with pytest.raises(grpc.RpcError) as info:
            call(b"")
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "NoSuchRpc" in str(info.value.details())


@pytest.mark.parametrize(
    ("method", "content_type", "status"), [("GET", "application/grpc", "405"), ("POST", "text/plain", "415")]
)
def test_what_is_not_a_grpc_call_gets_an_http_status(
    server: ServerProcess, method: str, content_type: str, status: str
) -> None:
    peer = H2Peer(server.grpc_url)
    fields = [(":method", method), (":scheme", "http"), (":path", SERVICE + "ServerLive")]
    block = b"".join(encode_header(*field) for field in [*fields, ("content-type", content_type)])
    peer.headers(1, block, end_stream=True)
    headers, _, _ = peer.response(1)
    assert headers[":status"] == status
    peer.close()


def test_error_messages_travel_percent_encoded_and_arrive_whole(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    name = "mödel 100%\tunknown"
    with pytest.raises(InferenceServerException) as info:
        client.get_model_metadata(name)
    assert name in str(info.value.message())
    client.close()


def test_a_message_over_the_size_limit_is_resource_exhausted_before_it_is_sent(server: ServerProcess) -> None:
    peer = H2Peer(server.grpc_url)
    peer.headers(1, request_block(SERVICE + "ModelInfer"))
    peer.send(FrameType.DATA, 0, 1, b"\x00\x80\x00\x00\x00")  # 2^31 bytes announced, none sent
    code, message = _status(*_without_data(peer.response(1)))
    assert code == "8" and "larger than max (2147483648 vs. 2147483647)" in message
    peer.call(3, "ServerLive", pb.ServerLiveRequest().SerializeToString())
    assert peer.response(3)[2]["grpc-status"] == "0"
    peer.close()


@pytest.mark.parametrize(
    ("encoding", "compressed", "code", "words"),
    [
        ("gzip", True, "13", "cannot decompress the gzip message"),
        ("snappy", True, "12", "Compression algorithm 'snappy' is not supported"),
        (None, True, "13", "a compressed message, but the call has no grpc-encoding"),
    ],
)
def test_compressed_requests_that_cannot_be_read_are_refused(
    server: ServerProcess, encoding: str | None, compressed: bool, code: str, words: str
) -> None:
    peer = H2Peer(server.grpc_url)
    extra = [("grpc-encoding", encoding)] if encoding else []
    peer.headers(1, request_block(SERVICE + "ServerLive", *extra))
    peer.send(FrameType.DATA, END_STREAM, 1, grpc_message(b"not compressed at all", compressed))
    status, message = _status(*_without_data(peer.response(1)))
    assert status == code and message.startswith(words)
    peer.close()


@pytest.mark.parametrize("count", [0, 2])
def test_a_unary_call_needs_exactly_one_message(server: ServerProcess, count: int) -> None:
    peer = H2Peer(server.grpc_url)
    peer.headers(1, request_block(SERVICE + "ServerLive"))
    peer.send(FrameType.DATA, END_STREAM, 1, grpc_message(pb.ServerLiveRequest().SerializeToString()) * count)
    assert _status(*_without_data(peer.response(1)))[0] == "12"
    peer.close()


def _rss(server: ServerProcess, field: str = "VmRSS") -> int:
    assert server.process is not None
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")


def test_a_large_message_goes_through_without_copies(server: ServerProcess) -> None:
    size = 64 << 20
    client = grpcclient.InferenceServerClient(server.grpc_url)
    data = np.arange(size // 4, dtype=np.float32).reshape(1, -1)
    tensor = grpcclient.InferInput("INPUT", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    assert server.process is not None
    Path(f"/proc/{server.process.pid}/clear_refs").write_text("5")  # the peak starts again from now
    before = _rss(server)
    result = client.infer("identity_fp32", [tensor])
    peak = _rss(server, "VmHWM") - before
    np.testing.assert_array_equal(result.as_numpy("OUTPUT"), data)
    # The message held once, and the model's output once: views of both go out. (grpc.aio peaked at
    # 4.4 to 9 times the message: its bytes, protobuf's copies, the tensors' bytes and the reply's.)
    assert peak < 2.6 * size, f"peak {peak / size:.2f} times the message"
    client.close()


def test_a_refused_bytes_tensor_does_not_hold_memory_until_a_gc_pass(server: ServerProcess) -> None:
    count = 20_000_000  # an object array of 160 MB, if allocated before the size is checked
    request = pb.ModelInferRequest(model_name="identity_all")
    request.inputs.add(name="IN_BYTES", datatype="BYTES", shape=[1, count])
    request.raw_input_contents.append(b"\x01\x00\x00\x00x")
    with grpc.insecure_channel(server.grpc_url) as channel:
        infer = channel.unary_unary(SERVICE + "ModelInfer")
        before = _rss(server)
        for _ in range(3):
            with pytest.raises(grpc.RpcError) as info:
                infer(request.SerializeToString())
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _rss(server) - before < 100 << 20


def test_a_large_response_to_a_slow_reader_waits_in_the_outbox_not_the_write_buffer(
    server: ServerProcess,
) -> None:
    # The client grants all the credit there is, then reads nothing for a while and sends a PING. A
    # response handed to the transport whole would sit in its write buffer, over the limit that
    # guards against PING floods, and the PING would end the connection (ENHANCE_YOUR_CALM).
    size = 96 << 20
    request = pb.ModelInferRequest(model_name="identity_fp32")
    request.inputs.add(name="INPUT", datatype="FP32", shape=[1, size // 4])
    request.raw_input_contents.append(bytes(size))
    peer = H2Peer(
        server.grpc_url,
        settings={Setting.INITIAL_WINDOW_SIZE: (1 << 31) - 1, Setting.MAX_FRAME_SIZE: (1 << 24) - 1},
    )
    peer.send(FrameType.WINDOW_UPDATE, 0, 0, struct.pack(">I", (1 << 31) - 1 - 65535))
    peer.headers(1, request_block(SERVICE + "ModelInfer"))
    message = memoryview(grpc_message(request.SerializeToString()))
    frame = peer.server_settings[Setting.MAX_FRAME_SIZE]
    for at in range(0, len(message), frame):
        piece = message[at : at + frame]
        peer.send(FrameType.DATA, END_STREAM if at + frame >= len(message) else 0, 1, bytes(piece))
    time.sleep(2)  # the response is ready by now, and unread
    peer.send(FrameType.PING, 0, 0, b"stillok!")
    _, data, trailers = peer.response(1, timeout=60)
    assert trailers["grpc-status"] == "0" and len(data) > size
    assert peer.ping_works(b"after!!!")
    peer.close()
