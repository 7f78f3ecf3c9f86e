"""The gRPC endpoint's HTTP/2 against RFC 9113 and RFC 7541, case by case as h2spec checks a server:
the preface, frame sizes, SETTINGS, PING, GOAWAY, WINDOW_UPDATE and flow control both ways,
RST_STREAM, stream states and identifiers, header blocks and CONTINUATION, HPACK errors, malformed
requests, the stream limit, and the floods a server facing the network must shrug off.

Each case opens its own connection to the session's ``trt serve`` with a raw client (``h2_peer``) and
then checks the connection still serves (or that the server ended it with the right code). The
server outlives every case (the ``server`` fixture checks at teardown).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest

from tests.server.grpc.h2_peer import SERVICE, H2Peer, frame_bytes, grpc_message, request_block
from tests.support import ServerProcess
from trt.http2.frames import (
    ACK,
    END_HEADERS,
    END_STREAM,
    PADDED,
    PREFACE,
    PRIORITY_FLAG,
    ErrorCode,
    FrameType,
    Setting,
    frame_head,
)
from trt.http2.hpack import encode_header, encode_integer, encode_literal, huffman_encode
from trt.protos import grpc_service_pb2 as pb

LIVE = pb.ServerLiveRequest().SerializeToString()


@pytest.fixture
def peer(server: ServerProcess) -> Iterator[H2Peer]:
    connection = H2Peer(server.grpc_url)
    yield connection
    connection.close()


def _live_call_works(peer: H2Peer, stream: int) -> None:
    peer.call(stream, "ServerLive", LIVE)
    headers, data, trailers = peer.response(stream)
    assert headers[":status"] == "200" and trailers["grpc-status"] == "0"
    assert pb.ServerLiveResponse.FromString(data[5:]).live


# -- the connection preface and SETTINGS (RFC 9113 3.4, 6.5) ---------------------------------------


def test_the_server_opens_with_its_settings_and_acknowledges_ours(server: ServerProcess) -> None:
    peer = H2Peer(server.grpc_url, settings={Setting.MAX_FRAME_SIZE: 1 << 20})
    assert peer.server_settings[Setting.ENABLE_PUSH] == 0
    assert peer.server_settings[Setting.MAX_CONCURRENT_STREAMS] == 1000
    assert peer.server_settings[Setting.MAX_HEADER_LIST_SIZE] == 16 << 10
    ack = peer.until({FrameType.SETTINGS})
    assert ack is not None and ack.flags & ACK and ack.payload == b""
    _live_call_works(peer, 1)
    peer.close()


def test_a_wrong_preface_is_a_protocol_error(server: ServerProcess) -> None:
    peer = H2Peer(server.grpc_url, handshake=False)
    peer.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


def test_a_first_frame_other_than_settings_is_a_protocol_error(server: ServerProcess) -> None:
    peer = H2Peer(server.grpc_url, handshake=False)
    peer.send_raw(PREFACE)
    peer.send(FrameType.PING, 0, 0, b"\0" * 8)
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


def test_a_preface_in_pieces_is_read_whole(server: ServerProcess) -> None:
    peer = H2Peer(server.grpc_url, handshake=False)
    for piece in (PREFACE[:5], PREFACE[5:17], PREFACE[17:]):
        peer.send_raw(piece)
    peer.settings({})
    assert peer.ping_works()


@pytest.mark.parametrize(
    ("flags", "stream", "payload", "code"),
    [
        (ACK, 0, b"\0" * 6, ErrorCode.FRAME_SIZE_ERROR),  # an acknowledgement carries nothing
        (0, 0, b"\0" * 5, ErrorCode.FRAME_SIZE_ERROR),  # not a multiple of 6
        (0, 1, b"", ErrorCode.PROTOCOL_ERROR),  # on a stream
        (0, 0, struct.pack(">HI", Setting.ENABLE_PUSH, 2), ErrorCode.PROTOCOL_ERROR),
        (0, 0, struct.pack(">HI", Setting.INITIAL_WINDOW_SIZE, 1 << 31), ErrorCode.FLOW_CONTROL_ERROR),
        (0, 0, struct.pack(">HI", Setting.MAX_FRAME_SIZE, 16383), ErrorCode.PROTOCOL_ERROR),
        (0, 0, struct.pack(">HI", Setting.MAX_FRAME_SIZE, 1 << 24), ErrorCode.PROTOCOL_ERROR),
    ],
)
def test_bad_settings_are_connection_errors(
    peer: H2Peer, flags: int, stream: int, payload: bytes, code: ErrorCode
) -> None:
    peer.send(FrameType.SETTINGS, flags, stream, payload)
    assert peer.connection_error() == code


def test_unknown_settings_are_ignored_and_acknowledged(peer: H2Peer) -> None:
    peer.send(FrameType.SETTINGS, 0, 0, struct.pack(">HI", 0xFF, 7))
    frame = peer.until({FrameType.SETTINGS})
    assert frame is not None and frame.flags & ACK
    _live_call_works(peer, 1)


# -- frames in general (RFC 9113 4, 5.5) -----------------------------------------------------------


def test_unknown_frame_types_and_flags_are_ignored(peer: H2Peer) -> None:
    peer.send(0x20, 0xFF, 0, b"whatever")
    peer.send(0x21, 0, 1, b"on an idle stream")
    assert peer.ping_works()
    peer.send(FrameType.PING, 0xF0, 0, b"abcdefgh")  # undefined flags
    frame = peer.until({FrameType.PING})
    assert frame is not None and frame.flags == ACK and frame.payload == b"abcdefgh"


def test_a_frame_over_the_advertised_size_is_a_frame_size_error(peer: H2Peer) -> None:
    limit = peer.server_settings[Setting.MAX_FRAME_SIZE]
    peer.headers(1, request_block(SERVICE + "ServerLive"))
    peer.send(FrameType.DATA, 0, 1, b"\0" * (limit + 1))
    assert peer.connection_error() == ErrorCode.FRAME_SIZE_ERROR


def test_a_data_frame_of_the_default_maximum_size_is_taken(peer: H2Peer) -> None:
    request = pb.ModelMetadataRequest(name="simple", version="x" * 16000).SerializeToString()
    peer.headers(1, request_block(SERVICE + "ModelMetadata"))
    peer.send(FrameType.DATA, END_STREAM, 1, grpc_message(request))
    headers, _, trailers = peer.response(1)
    assert headers[":status"] == "200"
    assert (trailers or headers)["grpc-status"] != "0"  # no version 'xxx...': answered, not dropped


# -- PING and GOAWAY (RFC 9113 6.7, 6.8) --------------------------------------------------------------


def test_ping_is_acknowledged_with_its_payload(peer: H2Peer) -> None:
    assert peer.ping_works(b"\x00\xffping!!")


@pytest.mark.parametrize(
    ("stream", "payload", "code"),
    [(1, b"\0" * 8, ErrorCode.PROTOCOL_ERROR), (0, b"\0" * 7, ErrorCode.FRAME_SIZE_ERROR)],
)
def test_bad_pings_are_connection_errors(peer: H2Peer, stream: int, payload: bytes, code: ErrorCode) -> None:
    peer.send(FrameType.PING, 0, stream, payload)
    assert peer.connection_error() == code


def test_too_many_pings_without_calls_end_the_connection_as_grpc_core_does(peer: H2Peer) -> None:
    for _ in range(4):  # the first is allowed; three strikes is one more than the two allowed
        peer.send(FrameType.PING, 0, 0, b"\0" * 8)
    goaway = peer.until({FrameType.GOAWAY})
    assert goaway is not None and goaway.error_code == ErrorCode.ENHANCE_YOUR_CALM
    assert goaway.payload[8:] == b"too_many_pings"


def test_a_client_goaway_is_answered_and_the_connection_closes(peer: H2Peer) -> None:
    peer.send(FrameType.GOAWAY, 0, 0, struct.pack(">II", 0, 0))
    frame = peer.until({FrameType.GOAWAY})
    assert frame is not None and frame.error_code == ErrorCode.NO_ERROR
    assert peer.until(set()) is None


def test_goaway_on_a_stream_is_a_protocol_error(peer: H2Peer) -> None:
    peer.send(FrameType.GOAWAY, 0, 1, struct.pack(">II", 0, 0))
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


# -- WINDOW_UPDATE and flow control (RFC 9113 6.9) ----------------------------------------------------


def test_window_update_of_zero_on_the_connection_is_a_protocol_error(peer: H2Peer) -> None:
    peer.send(FrameType.WINDOW_UPDATE, 0, 0, struct.pack(">I", 0))
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


def test_window_update_of_zero_on_a_stream_resets_it(peer: H2Peer) -> None:
    peer.headers(1, request_block(SERVICE + "ServerLive"))
    peer.send(FrameType.WINDOW_UPDATE, 0, 1, struct.pack(">I", 0))
    assert peer.stream_error(1) == ErrorCode.PROTOCOL_ERROR
    _live_call_works(peer, 3)


def test_window_update_of_the_wrong_size_is_a_frame_size_error(peer: H2Peer) -> None:
    peer.send(FrameType.WINDOW_UPDATE, 0, 0, struct.pack(">IB", 1, 0))
    assert peer.connection_error() == ErrorCode.FRAME_SIZE_ERROR


def test_a_connection_window_past_2_31_is_a_flow_control_error(peer: H2Peer) -> None:
    peer.send(FrameType.WINDOW_UPDATE, 0, 0, struct.pack(">I", (1 << 31) - 1))
    assert peer.connection_error() == ErrorCode.FLOW_CONTROL_ERROR


def test_a_stream_window_past_2_31_resets_the_stream(peer: H2Peer) -> None:
    peer.headers(1, request_block(SERVICE + "ServerLive"))
    peer.send(FrameType.WINDOW_UPDATE, 0, 1, struct.pack(">I", (1 << 31) - 1))
    assert peer.stream_error(1) == ErrorCode.FLOW_CONTROL_ERROR


def test_window_update_on_an_idle_stream_is_a_protocol_error(peer: H2Peer) -> None:
    peer.send(FrameType.WINDOW_UPDATE, 0, 5, struct.pack(">I", 1))
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


def _metadata_call(peer: H2Peer, stream: int) -> None:
    peer.call(stream, "ModelMetadata", pb.ModelMetadataRequest(name="identity_all").SerializeToString())


def test_the_server_sends_no_more_data_than_the_client_allows(server: ServerProcess) -> None:
    # A stream window of 100 bytes: the response (over 1 KB) comes 100 bytes at a time, as credit comes.
    peer = H2Peer(server.grpc_url, settings={Setting.INITIAL_WINDOW_SIZE: 100})
    _metadata_call(peer, 1)
    received = b""
    while True:
        frame = peer.until({FrameType.DATA, FrameType.HEADERS}, stream=1)
        assert frame is not None
        if frame.kind == FrameType.HEADERS and received:
            break
        if frame.kind == FrameType.DATA:
            assert len(frame.payload) <= 100
            received += frame.payload
            peer.send(FrameType.WINDOW_UPDATE, 0, 1, struct.pack(">I", len(frame.payload)))
    assert pb.ModelMetadataResponse.FromString(received[5:]).name == "identity_all"
    peer.close()


def test_a_window_of_zero_holds_data_until_credit_comes(server: ServerProcess) -> None:
    peer = H2Peer(server.grpc_url, settings={Setting.INITIAL_WINDOW_SIZE: 0})
    _metadata_call(peer, 1)
    peer.send(FrameType.PING, 0, 0, b"zerowind")
    while True:  # the response's headers may come, its data may not
        frame = peer.until({FrameType.DATA, FrameType.PING})
        assert frame is not None and frame.kind == FrameType.PING, "DATA sent without credit"
        if frame.flags & ACK:
            break
    peer.settings({Setting.INITIAL_WINDOW_SIZE: 1 << 20})  # raising it applies to the open stream
    # The ACK comes before the data the larger window lets out: grpc-core resets a stream whose data
    # came first (it checks DATA against the settings it has seen acknowledged).
    first = peer.until({FrameType.DATA, FrameType.SETTINGS})
    assert first is not None and first.kind == FrameType.SETTINGS and first.flags & ACK, first
    data = b""
    while True:
        frame = peer.until({FrameType.DATA, FrameType.HEADERS}, stream=1)
        assert frame is not None
        if frame.kind == FrameType.DATA:
            data += frame.payload
        elif frame.flags & END_STREAM:
            assert dict(peer.last_headers)["grpc-status"] == "0"
            break
    assert pb.ModelMetadataResponse.FromString(data[5:]).name == "identity_all"
    peer.close()


def test_data_frames_keep_to_the_clients_max_frame_size(server: ServerProcess) -> None:
    peer = H2Peer(server.grpc_url)  # the default maximum: 16384
    peer.call(1, "ModelConfig", pb.ModelConfigRequest(name="identity_all").SerializeToString())
    sizes = []
    while True:
        frame = peer.until({FrameType.DATA, FrameType.HEADERS}, stream=1)
        assert frame is not None
        if frame.kind == FrameType.DATA:
            sizes.append(len(frame.payload))
        elif frame.flags & END_STREAM:
            break
    assert max(sizes) <= 16384
    peer.close()


# -- RST_STREAM and stream states (RFC 9113 5.1, 6.4) --------------------------------------------------


def test_rst_stream_on_an_idle_stream_is_a_protocol_error(peer: H2Peer) -> None:
    peer.send(FrameType.RST_STREAM, 0, 1, struct.pack(">I", ErrorCode.CANCEL))
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


@pytest.mark.parametrize(
    ("stream", "payload", "code"),
    [(0, struct.pack(">I", 8), ErrorCode.PROTOCOL_ERROR), (1, b"\0" * 3, ErrorCode.FRAME_SIZE_ERROR)],
)
def test_bad_rst_streams_are_connection_errors(
    peer: H2Peer, stream: int, payload: bytes, code: ErrorCode
) -> None:
    peer.headers(1, request_block(SERVICE + "ServerLive"))
    peer.send(FrameType.RST_STREAM, 0, stream, payload)
    assert peer.connection_error() == code


def test_a_stream_reset_by_the_client_leaves_the_connection_serving(peer: H2Peer) -> None:
    peer.headers(1, request_block(SERVICE + "ServerLive"))
    peer.send(FrameType.RST_STREAM, 0, 1, struct.pack(">I", ErrorCode.CANCEL))
    peer.send(FrameType.DATA, END_STREAM, 1, grpc_message(LIVE))  # in flight as it was reset: dropped
    _live_call_works(peer, 3)


@pytest.mark.parametrize("timeout", ["1\xb2S", "\xb9m", "x", "99999999S", "-1S", ""])
def test_a_grpc_timeout_that_is_not_one_is_ignored(peer: H2Peer, timeout: str) -> None:
    """As grpc-core does: the call runs with no deadline (a superscript digit is no digit to int())."""
    peer.call(1, "ServerLive", LIVE, ("grpc-timeout", timeout))
    assert peer.response(1)[2]["grpc-status"] == "0"
    _live_call_works(peer, 3)


def test_data_after_end_stream_is_stream_closed(peer: H2Peer) -> None:
    peer.headers(1, request_block(SERVICE + "ServerLive", ("grpc-timeout", "5S")), end_stream=True)
    peer.send(FrameType.DATA, 0, 1, grpc_message(LIVE))
    frame = peer.until({FrameType.RST_STREAM, FrameType.GOAWAY})
    assert frame is not None and frame.error_code == ErrorCode.STREAM_CLOSED


def test_data_on_an_idle_stream_is_a_protocol_error(peer: H2Peer) -> None:
    peer.send(FrameType.DATA, 0, 1, grpc_message(LIVE))
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


def test_data_on_stream_zero_is_a_protocol_error(peer: H2Peer) -> None:
    peer.send(FrameType.DATA, 0, 0, b"x")
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


def test_headers_on_a_closed_stream_is_a_stream_closed_error(peer: H2Peer) -> None:
    _live_call_works(peer, 1)
    peer.headers(1, request_block(SERVICE + "ServerLive"))
    assert peer.connection_error() == ErrorCode.STREAM_CLOSED


@pytest.mark.parametrize("stream", [0, 2])
def test_headers_on_stream_zero_or_an_even_stream_is_a_protocol_error(peer: H2Peer, stream: int) -> None:
    peer.headers(stream, request_block(SERVICE + "ServerLive"))
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


def test_a_call_in_flight_when_the_connection_fails_is_cancelled_not_written(
    server: ServerProcess, peer: H2Peer
) -> None:
    """A call, then a frame that ends the connection, in one write: the call is still running when
    the server says GOAWAY. Its answer used to be written after write_eof(), which uvloop refuses:
    the call's task died with a RuntimeError in the log (found by tests/fuzz/test_fuzz_h2_connection.py)."""
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(bytes(64))
    message = grpc_message(request.SerializeToString())
    errors_before = server.log().count("Task exception was never retrieved")
    peer.send_raw(  # in one write
        frame_bytes(FrameType.HEADERS, END_HEADERS, 1, request_block(SERVICE + "ModelInfer"))
        + frame_bytes(FrameType.DATA, END_STREAM, 1, message)
        + frame_bytes(FrameType.HEADERS, END_HEADERS, 0, request_block(SERVICE + "ServerLive"))
    )
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR
    time.sleep(0.5)  # the call ends (cancelled) on the server meanwhile
    assert server.log().count("Task exception was never retrieved") == errors_before, server.log()[-2000:]


def test_a_stream_id_below_an_earlier_one_is_a_protocol_error(peer: H2Peer) -> None:
    peer.headers(5, request_block(SERVICE + "ServerLive"))
    peer.headers(3, request_block(SERVICE + "ServerLive"))
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


def test_push_promise_from_a_client_is_a_protocol_error(peer: H2Peer) -> None:
    peer.send(FrameType.PUSH_PROMISE, END_HEADERS, 1, struct.pack(">I", 2))
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


# -- PRIORITY and padding (RFC 9113 5.3, 6.1-6.3) ----------------------------------------------------


def test_a_stream_that_depends_on_itself_is_reset(peer: H2Peer) -> None:
    block = struct.pack(">IB", 1, 16) + request_block(SERVICE + "ServerLive")
    peer.send(FrameType.HEADERS, END_HEADERS | PRIORITY_FLAG, 1, block)
    assert peer.stream_error(1) == ErrorCode.PROTOCOL_ERROR
    peer.send(FrameType.PRIORITY, 0, 3, struct.pack(">IB", 3, 16))
    assert peer.stream_error(3) == ErrorCode.PROTOCOL_ERROR


def test_priority_of_the_wrong_size_resets_and_on_an_idle_stream_is_fine(peer: H2Peer) -> None:
    peer.send(FrameType.PRIORITY, 0, 9, struct.pack(">IB", 0, 16))  # idle: allowed, opens nothing
    peer.send(FrameType.PRIORITY, 0, 11, b"\0" * 4)
    assert peer.stream_error(11) == ErrorCode.FRAME_SIZE_ERROR
    _live_call_works(peer, 13)


def test_padded_frames_are_read_without_their_padding(peer: H2Peer) -> None:
    block = request_block(SERVICE + "ServerLive")
    peer.send(FrameType.HEADERS, END_HEADERS | PADDED | PRIORITY_FLAG, 1,
              bytes([3]) + struct.pack(">IB", 0, 16) + block + b"\0\0\0")  # fmt: skip
    peer.send(FrameType.DATA, END_STREAM | PADDED, 1, bytes([7]) + grpc_message(LIVE) + b"\0" * 7)
    _, data, trailers = peer.response(1)
    assert trailers["grpc-status"] == "0" and pb.ServerLiveResponse.FromString(data[5:]).live


@pytest.mark.parametrize("kind", [FrameType.HEADERS, FrameType.DATA])
def test_padding_as_long_as_the_frame_is_a_protocol_error(peer: H2Peer, kind: FrameType) -> None:
    if kind == FrameType.DATA:
        peer.headers(1, request_block(SERVICE + "ServerLive"))
    flags = PADDED | (END_HEADERS if kind == FrameType.HEADERS else 0)
    peer.send(kind, flags, 1, bytes([10]) + b"\0" * 4)
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


# -- header blocks and CONTINUATION (RFC 9113 6.10) ---------------------------------------------------


def test_a_header_block_in_continuation_frames_is_read_whole(peer: H2Peer) -> None:
    block = request_block(SERVICE + "ServerLive", ("x-padding", "p" * 300))
    pieces = [block[:10], block[10:200], block[200:]]
    peer.send(FrameType.HEADERS, 0, 1, pieces[0])
    peer.send(FrameType.CONTINUATION, 0, 1, pieces[1])
    peer.send(FrameType.CONTINUATION, END_HEADERS, 1, pieces[2])
    peer.send(FrameType.DATA, END_STREAM, 1, grpc_message(LIVE))
    _, _, trailers = peer.response(1)
    assert trailers["grpc-status"] == "0"


def test_a_frame_inside_a_header_block_is_a_protocol_error(peer: H2Peer) -> None:
    block = request_block(SERVICE + "ServerLive")
    peer.send(FrameType.HEADERS, 0, 1, block[:10])
    peer.send(FrameType.PING, 0, 0, b"\0" * 8)
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


@pytest.mark.parametrize("open_block", [False, True])
def test_continuation_without_its_headers_is_a_protocol_error(peer: H2Peer, open_block: bool) -> None:
    block = request_block(SERVICE + "ServerLive")
    if open_block:
        peer.send(FrameType.HEADERS, 0, 1, block[:10])
        peer.send(FrameType.CONTINUATION, END_HEADERS, 3, block[10:])  # another stream's
    else:
        peer.send(FrameType.CONTINUATION, END_HEADERS, 1, block)
    assert peer.connection_error() == ErrorCode.PROTOCOL_ERROR


def test_a_continuation_flood_ends_the_connection(peer: H2Peer) -> None:
    peer.send(FrameType.HEADERS, 0, 1, request_block(SERVICE + "ServerLive"))
    for _ in range(100):
        peer.send(FrameType.CONTINUATION, 0, 1, encode_literal("x-a", "b"))
    assert peer.connection_error() == ErrorCode.ENHANCE_YOUR_CALM


def test_a_header_block_over_the_limit_ends_the_connection(peer: H2Peer) -> None:
    peer.send(FrameType.HEADERS, 0, 1, request_block(SERVICE + "ServerLive"))
    for _ in range(5):  # the server stops reading after the third, but takes the rest in
        peer.send(FrameType.CONTINUATION, 0, 1, encode_literal("x-big", "v" * 8000))
    assert peer.connection_error() == ErrorCode.ENHANCE_YOUR_CALM


def test_a_header_list_over_the_limit_is_refused_and_the_connection_serves_on(peer: H2Peer) -> None:
    # The block fits the frame and the block limit, but decodes to more than 16 KiB (Huffman).
    value = "0" * 17000
    big = (
        b"\x00"
        + encode_integer(5, 7, 0)
        + b"x-big"
        + encode_integer(len(huffman_encode(value.encode())), 7, 0x80)
    )
    peer.headers(1, request_block(SERVICE + "ServerLive") + big + huffman_encode(value.encode()))
    headers, _, _ = peer.response(1)
    assert headers["grpc-status"] == "8", headers  # RESOURCE_EXHAUSTED, trailers-only
    _live_call_works(peer, 3)


# -- HPACK (RFC 7541) ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "block",
    [
        b"\x80",  # index 0
        encode_integer(200, 7, 0x80),  # past both tables
        encode_integer(4097, 5, 0x20),  # a table size update above the 4096 allowed
        encode_header(":method", "POST") + b"\x20",  # a size update after a field
        b"\x00\x81\xff" + b"\x01a",  # a Huffman name that is all padding past 7 bits
        b"\x00\x05ab",  # a string past the end of the block
    ],
)
def test_hpack_errors_are_compression_errors(peer: H2Peer, block: bytes) -> None:
    peer.headers(1, block)
    assert peer.connection_error() == ErrorCode.COMPRESSION_ERROR


def test_indexed_headers_are_decoded_against_the_dynamic_table(peer: H2Peer) -> None:
    indexed = b"\x40" + b"\x0ax-trt-test" + b"\x03one"  # incremental indexing: entry 62
    peer.headers(1, request_block(SERVICE + "ServerLive") + indexed)
    peer.send(FrameType.DATA, END_STREAM, 1, grpc_message(LIVE))
    assert peer.response(1)[2]["grpc-status"] == "0"
    peer.headers(3, request_block(SERVICE + "ServerLive") + b"\xbe")  # index 62
    peer.send(FrameType.DATA, END_STREAM, 3, grpc_message(LIVE))
    assert peer.response(3)[2]["grpc-status"] == "0"


# -- malformed requests (RFC 9113 8.1-8.3) -------------------------------------------------------------


def _fields(*fields: tuple[str, str]) -> bytes:
    return b"".join(encode_literal(name, value) for name, value in fields)


_POST, _SCHEME, _PATH = (":method", "POST"), (":scheme", "http"), (":path", SERVICE + "ServerLive")
_GRPC = ("content-type", "application/grpc")


@pytest.mark.parametrize(
    "block",
    [
        _fields(_POST, _SCHEME, _PATH, ("Content-Type", "application/grpc")),  # upper case
        _fields(_POST, _SCHEME, _PATH, _GRPC, ("connection", "keep-alive")),
        _fields(_POST, _SCHEME, _PATH, _GRPC, ("te", "gzip")),
        _fields(_POST, _SCHEME, _GRPC),  # no :path
        _fields(_POST, _SCHEME, (":path", "")),
        _fields(_POST, _SCHEME, _GRPC, _PATH),  # a pseudo-header after a regular field
        _fields(_POST, _SCHEME, _PATH, (":status", "200")),  # a response's pseudo-header
        _fields(_POST, _POST, _SCHEME, _PATH),  # repeated
        _fields(_POST, _SCHEME, _PATH, ("x-bad", "a\nb")),
        # content-length that str.isdigit() takes and int() does not: a superscript two (latin-1, as
        # HPACK strings are read), and more digits than int() reads
        _fields(_POST, _SCHEME, _PATH, _GRPC, ("content-length", "\xb2")),
        _fields(_POST, _SCHEME, _PATH, _GRPC, ("content-length", "9" * 5000)),
    ],
)
def test_malformed_requests_reset_their_stream(peer: H2Peer, block: bytes) -> None:
    peer.headers(1, block)
    assert peer.stream_error(1) == ErrorCode.PROTOCOL_ERROR
    _live_call_works(peer, 3)


def test_trailers_with_a_pseudo_header_or_without_end_stream_reset_the_stream(peer: H2Peer) -> None:
    peer.headers(1, request_block(SERVICE + "ServerLive"))
    peer.send(FrameType.DATA, 0, 1, grpc_message(LIVE))
    peer.headers(1, _fields((":method", "POST")), end_stream=True)
    assert peer.stream_error(1) == ErrorCode.PROTOCOL_ERROR
    peer.headers(3, request_block(SERVICE + "ServerLive"))
    peer.headers(3, _fields(("x-trailer", "1")), end_stream=False)
    assert peer.stream_error(3) == ErrorCode.PROTOCOL_ERROR


def test_trailers_end_a_request(peer: H2Peer) -> None:
    peer.headers(1, request_block(SERVICE + "ServerLive"))
    peer.send(FrameType.DATA, 0, 1, grpc_message(LIVE))
    peer.headers(1, _fields(("x-trailer", "1")), end_stream=True)
    assert peer.response(1)[2]["grpc-status"] == "0"


def test_data_that_disagrees_with_content_length_resets_the_stream(peer: H2Peer) -> None:
    peer.headers(1, request_block(SERVICE + "ServerLive", ("content-length", "100")))
    peer.send(FrameType.DATA, END_STREAM, 1, grpc_message(LIVE))
    assert peer.stream_error(1) == ErrorCode.PROTOCOL_ERROR


# -- many streams, and floods ----------------------------------------------------------------------------


def test_many_streams_at_once_are_all_answered(peer: H2Peer) -> None:
    streams = range(1, 401, 2)
    out = b""
    block = request_block(SERVICE + "ServerLive")
    message = grpc_message(LIVE)
    for stream in streams:
        out += (
            struct.pack(">I", len(block))[1:]
            + bytes([FrameType.HEADERS, END_HEADERS])
            + struct.pack(">I", stream)
        )
        out += block
        message = grpc_message(LIVE)
        out += (
            struct.pack(">I", len(message))[1:]
            + bytes([FrameType.DATA, END_STREAM])
            + struct.pack(">I", stream)
        )
        out += message
    peer.send_raw(out)
    for stream in streams:
        assert peer.response(stream)[2]["grpc-status"] == "0"


def test_streams_beyond_max_concurrent_streams_are_refused(peer: H2Peer) -> None:
    limit = peer.server_settings[Setting.MAX_CONCURRENT_STREAMS]
    block = request_block(SERVICE + "ServerLive")
    frames = b"".join(
        struct.pack(">I", len(block))[1:]
        + bytes([FrameType.HEADERS, END_HEADERS])
        + struct.pack(">I", s)
        + block
        for s in range(1, 2 * limit + 3, 2)
    )
    peer.send_raw(frames)  # limit + 1 streams opened, none ended
    assert peer.stream_error(2 * limit + 1) == ErrorCode.REFUSED_STREAM


def test_a_rapid_reset_flood_ends_the_connection(peer: H2Peer) -> None:
    block = request_block(SERVICE + "ServerLive")
    rst = struct.pack(">I", ErrorCode.CANCEL)
    frames = b"".join(
        frame_head(len(block), FrameType.HEADERS, END_HEADERS, s) + block
        + frame_head(4, FrameType.RST_STREAM, 0, s) + rst
        for s in range(1, 2 * 1500, 2)
    )  # fmt: skip
    peer.send_raw(frames)
    assert peer.connection_error() == ErrorCode.ENHANCE_YOUR_CALM


def test_an_empty_data_frame_flood_ends_the_connection(peer: H2Peer) -> None:
    peer.headers(1, request_block(SERVICE + "ServerLive"))
    peer.send_raw(frame_head(0, FrameType.DATA, 0, 1) * 1100)
    assert peer.connection_error() == ErrorCode.ENHANCE_YOUR_CALM
