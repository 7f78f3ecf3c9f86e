"""Any bytes a client sends to the gRPC port's HTTP/2 server, in any pieces: the connection never
raises, everything it writes is well-formed HTTP/2 (frames within the client's size limit, on the
streams their types belong to, header blocks that decode), it never blames itself (no GOAWAY or
RST_STREAM with INTERNAL_ERROR, its answer to a fault of its own), it stops writing once it has said
GOAWAY and closed, and once the client is gone no call it opened is left running.

The client is hypothesis: a preface and SETTINGS (usually), then frames drawn from real gRPC calls
on the ``simple`` model (whole, cut short, or with bytes changed), control frames with values at
and past their limits, and frames of random type, flags, stream and payload. The server is trt's own
HTTP/2 connection in front of a real core, fed in process through a transport that records what it
writes.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from dataclasses import replace

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from tests.fuzz.connection_harness import core_on, serve
from tests.server.grpc.h2_peer import SERVICE, frame_bytes, request_block
from tests.support import write_simple
from trt.http2.frames import (
    ACK,
    END_HEADERS,
    END_STREAM,
    PREFACE,
    ErrorCode,
    FrameType,
    Setting,
)
from trt.http2.hpack import HpackDecoder
from trt.protos import grpc_service_pb2 as pb
from trt.server.grpc.app import GrpcApp
from trt.server.grpc.h2.connection import H2ServerConnection
from trt.server.grpc.h2.settings import KeepaliveOptions
from trt.server.grpc.options import GrpcOptions
from trt.server.grpc.server import service_methods

STREAMS = [0, 1, 3, 5, 7, 9, 2, 4, (1 << 31) - 1]


# -- what the client sends ------------------------------------------------------------------------


def _request_block(method: str, *extra: tuple[str, str]) -> bytes:
    return request_block(SERVICE + method, *extra)


def _infer_message() -> bytes:
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(struct.pack("<16i", *range(16)))
    return request.SerializeToString()


CALLS = {
    "ModelInfer": _infer_message(),
    "ServerLive": pb.ServerLiveRequest().SerializeToString(),
    "ModelMetadata": pb.ModelMetadataRequest(name="simple").SerializeToString(),
    "ModelStreamInfer": _infer_message(),
    "NoSuchMethod": b"",
}


@st.composite
def grpc_call(draw: st.DrawFn) -> bytes:
    """A gRPC call's frames, whole or not: HEADERS (maybe split into CONTINUATIONs), then its message
    in DATA frames, maybe cut short, maybe without END_STREAM."""
    stream = draw(st.sampled_from(STREAMS))
    method = draw(st.sampled_from(sorted(CALLS)))
    extra = draw(
        st.sampled_from([
            (), (("grpc-timeout", "1m"),), (("grpc-encoding", "gzip"),), (("x", "y"),),
            # numbers str.isdigit() takes and int() does not read: a superscript, thousands of digits
            (("grpc-timeout", "1\xb2S"),), (("content-length", "\xb2"),), (("content-length", "9" * 5000),),
            (("content-length", "0" * 5000),),
        ])
    )  # fmt: skip
    block = _request_block(method, *extra)
    frames = []
    if draw(st.booleans()):
        frames.append(frame_bytes(FrameType.HEADERS, END_HEADERS, stream, block))
    else:
        cut = draw(st.integers(0, len(block)))
        frames.append(frame_bytes(FrameType.HEADERS, 0, stream, block[:cut]))
        frames.append(frame_bytes(FrameType.CONTINUATION, END_HEADERS, stream, block[cut:]))
    message = CALLS[method]
    body = (
        struct.pack(">BI", 0, draw(st.sampled_from([len(message), 0, 1 << 30, len(message) + 1]))) + message
    )
    body = body[: draw(st.integers(0, len(body)))] if draw(st.integers(0, 3)) == 0 else body
    split = draw(st.integers(0, len(body)))
    for index, part in enumerate((body[:split], body[split:])):
        last = index == 1
        frames.append(
            frame_bytes(FrameType.DATA, END_STREAM if last and draw(st.integers(0, 4)) else 0, stream, part)
        )
    return b"".join(frames)


@st.composite
def control_frame(draw: st.DrawFn) -> bytes:
    """SETTINGS, WINDOW_UPDATE, PING, RST_STREAM, PRIORITY or GOAWAY with values at and past their limits."""
    stream = draw(st.sampled_from(STREAMS))
    kind = draw(st.sampled_from(["settings", "window", "ping", "rst", "priority", "goaway"]))
    u32 = st.sampled_from(
        [0, 1, 100, 16383, 16384, 65535, 65536, (1 << 24) - 1, 1 << 24, (1 << 31) - 1, 1 << 31]
    )
    if kind == "settings":
        keys = st.sampled_from([*Setting, 0, 7, 0xFFFF])
        values = draw(st.dictionaries(keys, u32, max_size=4))
        flags = draw(st.sampled_from([0, 0, ACK]))
        # Built here: settings_payload takes only the settings it knows (compiled, it checks).
        payload = b"".join(struct.pack(">HI", key, value) for key, value in values.items())
        if flags & ACK:
            payload = b""
        return frame_bytes(FrameType.SETTINGS, flags, draw(st.sampled_from([0, 0, 1])), payload)
    if kind == "window":
        return frame_bytes(FrameType.WINDOW_UPDATE, 0, stream, struct.pack(">I", draw(u32)))
    if kind == "ping":
        return frame_bytes(
            FrameType.PING, draw(st.sampled_from([0, ACK])), draw(st.sampled_from([0, 1])), bytes(8)
        )
    if kind == "rst":
        return frame_bytes(
            FrameType.RST_STREAM, 0, stream, struct.pack(">I", draw(st.sampled_from([*ErrorCode, 99])))
        )
    if kind == "priority":
        return frame_bytes(
            FrameType.PRIORITY, 0, stream, struct.pack(">IB", draw(st.sampled_from(STREAMS)), 15)
        )
    return frame_bytes(FrameType.GOAWAY, 0, 0, struct.pack(">II", draw(st.sampled_from(STREAMS)), 0))


@st.composite
def random_frame(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 12))
    flags = draw(st.integers(0, 255))
    payload = draw(st.binary(max_size=48))
    return frame_bytes(kind, flags, draw(st.sampled_from(STREAMS)), payload)


@st.composite
def mutated(draw: st.DrawFn, frames: st.SearchStrategy[bytes]) -> bytes:
    data = bytearray(draw(frames))
    for _ in range(draw(st.integers(1, 3))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


FRAMES = st.one_of(
    grpc_call(), control_frame(), random_frame(), mutated(st.one_of(grpc_call(), control_frame()))
)


@st.composite
def connection_bytes(draw: st.DrawFn) -> tuple[list[bytes], int]:
    """What one client sends, in the pieces it arrives in; and the largest frame it allows."""
    start = draw(st.sampled_from(["preface and settings", "preface and settings", "preface", "nothing"]))
    head = b""
    if start != "nothing":
        head = PREFACE
    if start == "preface and settings":
        head += frame_bytes(FrameType.SETTINGS, 0, 0, b"")
    frames = draw(st.lists(FRAMES, max_size=8))
    data = head + b"".join(frames)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=4)))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True) if b > a]
    # The largest MAX_FRAME_SIZE the client announced anywhere: the server may use it once acknowledged.
    allowed = 16384
    for setting, value in _announced_settings(data):
        if setting == Setting.MAX_FRAME_SIZE and 16384 <= value < (1 << 24):
            allowed = max(allowed, value)
    return pieces, allowed


def _announced_settings(data: bytes) -> Iterator[tuple[int, int]]:
    at = len(PREFACE) if data.startswith(PREFACE) else 0
    while len(data) - at >= 9:
        length = int.from_bytes(data[at : at + 3], "big")
        kind, flags = data[at + 3], data[at + 4]
        payload = data[at + 9 : at + 9 + length]
        if kind == FrameType.SETTINGS and not flags & ACK:
            for offset in range(0, len(payload) - 5, 6):
                yield struct.unpack_from(">HI", payload, offset)
        at += 9 + length


# -- what the server wrote ------------------------------------------------------------------------


def check_written(written: bytes, max_frame: int) -> bool:
    """Every frame well-formed; header blocks decode in order. Returns whether it sent GOAWAY."""
    decoder = HpackDecoder()
    at, goaway, block = 0, False, b""
    while at < len(written):
        assert len(written) - at >= 9, f"a partial frame header at {at}"
        length = int.from_bytes(written[at : at + 3], "big")
        kind, flags = written[at + 3], written[at + 4]
        stream = int.from_bytes(written[at + 5 : at + 9], "big") & 0x7FFFFFFF
        payload = written[at + 9 : at + 9 + length]
        assert len(payload) == length, "a frame cut short"
        assert length <= max_frame, f"a {FrameType(kind).name} frame of {length} bytes past {max_frame}"
        assert kind <= FrameType.CONTINUATION and kind != FrameType.PUSH_PROMISE, f"frame type {kind}"
        if kind in (FrameType.SETTINGS, FrameType.PING, FrameType.GOAWAY):
            assert stream == 0, f"{FrameType(kind).name} on stream {stream}"
        elif kind in (FrameType.HEADERS, FrameType.DATA, FrameType.CONTINUATION):
            assert stream % 2 == 1, f"{FrameType(kind).name} on stream {stream}, not one a client opened"
        elif kind == FrameType.RST_STREAM:  # answers a client's frame on that stream, whatever its number
            assert stream != 0
        if kind == FrameType.SETTINGS:
            assert length % 6 == 0 and not (flags & ACK and length)
        elif kind == FrameType.PING:
            assert length == 8
        elif kind == FrameType.GOAWAY:
            assert length >= 8
            # INTERNAL_ERROR is the connection's answer to a fault of its own: never the client's bytes
            code = int.from_bytes(payload[4:8], "big")
            assert code != ErrorCode.INTERNAL_ERROR, f"a fault of ours: {payload[8:]!r} (see the log)"
            goaway = True
        elif kind == FrameType.RST_STREAM:
            assert length == 4
            code = int.from_bytes(payload, "big")
            assert code != ErrorCode.INTERNAL_ERROR, f"stream {stream} reset for a fault of ours"
        elif kind == FrameType.WINDOW_UPDATE:
            assert length == 4
        if kind in (FrameType.HEADERS, FrameType.CONTINUATION):
            assert (kind == FrameType.HEADERS) == (block == b""), "a CONTINUATION out of place"
            block += payload
            if flags & END_HEADERS:
                decoder.decode(block)
                block = b""
        else:
            assert block == b"", "a header block left unfinished"
        at += 9 + length
    return goaway


# -- the property ---------------------------------------------------------------------------------

LOOP = asyncio.new_event_loop()


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GrpcApp, GrpcOptions]]:
    repo = tmp_path_factory.mktemp("repo")
    write_simple(repo)
    with core_on(LOOP, repo, "simple") as core:
        options = GrpcOptions()

        async def made() -> GrpcApp:  # it belongs to the loop that runs it
            return GrpcApp(options, service_methods(core), core.tracer)

        yield LOOP.run_until_complete(made()), options


async def _connection(app: GrpcApp, options: GrpcOptions) -> H2ServerConnection:
    return H2ServerConnection(app, options.http2, options.keepalive, set())


def _call_then(frame: bytes) -> tuple[list[bytes], int]:
    """A whole ModelInfer call on stream 1, then ``frame``, in one piece."""
    message = CALLS["ModelInfer"]
    call = frame_bytes(FrameType.HEADERS, END_HEADERS, 1, _request_block("ModelInfer")) + frame_bytes(
        FrameType.DATA, END_STREAM, 1, struct.pack(">BI", 0, len(message)) + message
    )
    return [PREFACE + frame_bytes(FrameType.SETTINGS, 0, 0, b"") + call + frame], 16384


# Found by this test: a call still running when the connection failed wrote its answer after the
# GOAWAY, to a transport that had been told write_eof() (uvloop raises there).
@example(_call_then(frame_bytes(FrameType.HEADERS, END_HEADERS, 0, _request_block("ModelInfer"))))
@example(_call_then(frame_bytes(FrameType.DATA, 0, 0, b"x")))
@given(connection_bytes())
def test_any_client_bytes_leave_the_connection_well_formed_and_nothing_running(
    app: tuple[GrpcApp, GrpcOptions], sent: tuple[list[bytes], int]
) -> None:
    pieces, max_frame = sent
    grpc_app, options = app
    connection = LOOP.run_until_complete(_connection(grpc_app, options))
    transport = LOOP.run_until_complete(serve(connection, pieces))
    goaway = check_written(bytes(transport.written), max_frame)
    if transport.ended:
        assert goaway, "closed without a GOAWAY saying why"


# -- with its timers running ----------------------------------------------------------------------

KEEPALIVE = st.builds(
    KeepaliveOptions,
    time_ms=st.sampled_from([10, 30, 7_200_000]),
    timeout_ms=st.sampled_from([10, 40]),
    permit_without_calls=st.booleans(),
    max_pings_without_data=st.sampled_from([0, 1, 2]),
    min_recv_ping_interval_without_data_ms=st.sampled_from([0, 20, 300_000]),
    max_ping_strikes=st.sampled_from([0, 1, 2]),
    max_connection_age_ms=st.sampled_from([0, 0, 25, 60]),
    max_connection_age_grace_ms=st.sampled_from([0, 15]),
)


@st.composite
def timed_connection(draw: st.DrawFn) -> tuple[list[bytes], int, list[float], KeepaliveOptions, float]:
    """A client's bytes, the waits before each piece and before it goes, and the timers it meets."""
    if draw(st.booleans()):
        pieces, max_frame = draw(connection_bytes())
    else:  # a client that keeps to the rules, so that the connection lives long enough to ping
        calm = st.one_of(grpc_call(), st.just(frame_bytes(FrameType.PING, 0, 0, bytes(8))))
        frames = draw(st.lists(calm, max_size=4))
        pieces, max_frame = [PREFACE + frame_bytes(FrameType.SETTINGS, 0, 0, b""), *frames], 16384
    delays = draw(st.lists(st.sampled_from([0.0, 0.0, 0.005, 0.03, 0.06]), min_size=len(pieces) + 1,
                           max_size=len(pieces) + 1))  # fmt: skip
    return pieces, max_frame, delays, draw(KEEPALIVE), draw(st.sampled_from([0.02, 10.0]))


def _pinged(written: bytes) -> bool:
    """Whether the server sent a PING of its own (a keepalive ping may go unanswered: then it closes)."""
    at = 0
    while len(written) - at >= 9:
        length = int.from_bytes(written[at : at + 3], "big")
        if written[at + 3] == FrameType.PING and not written[at + 4] & ACK:
            return True
        at += 9 + length
    return False


@settings(max_examples=max(settings.default.max_examples // 4, 1))  # each waits for its timers
@given(timed_connection())
def test_with_keepalive_age_and_preface_timers_the_connection_stays_well_formed(
    app: tuple[GrpcApp, GrpcOptions], sent: tuple[list[bytes], int, list[float], KeepaliveOptions, float]
) -> None:
    """Keepalive PINGs and their deadlines, ping strikes, the connection's age and grace, the preface
    timeout: whatever fires while the client sends, waits or has gone, the invariants above hold, and
    no timer writes or fails after the client left (the loop is watched 80 ms longer)."""
    pieces, max_frame, delays, keepalive, preface_timeout_s = sent
    grpc_app, options = app

    async def made() -> H2ServerConnection:
        http2 = replace(options.http2, preface_timeout_s=preface_timeout_s)
        return H2ServerConnection(grpc_app, http2, keepalive, set())

    connection = LOOP.run_until_complete(made())
    transport = LOOP.run_until_complete(serve(connection, pieces, delays=delays, linger_s=0.08))
    written = bytes(transport.written)
    goaway = check_written(written, max_frame)
    event(f"server PING: {_pinged(written)}, GOAWAY: {goaway}, closed: {transport.ended}")
    if transport.ended and not goaway:
        assert _pinged(written), "closed without a GOAWAY saying why, and no keepalive PING unanswered"
