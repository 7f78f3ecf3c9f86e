"""The hand-framed gRPC client: HPACK against RFC 7541's examples, calls against ``trt serve``, and the
HTTP/2 duties (flow control, frame size, stream limit, PING, Huffman trailers, GOAWAY) against a
scripted server that demands every one of them."""

from __future__ import annotations

import itertools
import socket
import struct
import threading
import time
from collections.abc import Iterator

from tests.support import ServerProcess
from trt.perf.encoding import grpc_request
from trt.perf.input_data import load_input_data
from trt.perf.model_info import ModelInfo, TensorSpec
from trt.perf.transport import ConnectionLost, RequestFailed
from trt.perf.transport.grpc_clients import INFER
from trt.perf.transport.grpc_h2 import PREFACE, H2GrpcClient, frame_head, grpc_message
from trt.perf.transport.hpack import HUFFMAN_CODES, HpackDecoder, encode_literal
from trt.perf.worker.grpc_callbacks import CallbackLoop
from trt.perf.worker.records import Recorder
from trt.perf.worker.sources import RequestCycle, SequenceSource

SIMPLE = ModelInfo(
    "simple",
    "",
    (TensorSpec("INPUT0", "INT32", (16,)), TensorSpec("INPUT1", "INT32", (16,))),
    (TensorSpec("OUTPUT0", "INT32", (16,)), TensorSpec("OUTPUT1", "INT32", (16,))),
    batching=True,
    max_batch_size=8,
)


def huffman(text: str) -> bytes:
    bits = length = 0
    for byte in text.encode():
        code, size = HUFFMAN_CODES[byte]
        bits, length = (bits << size) | code, length + size
    padding = -length % 8
    bits, length = (bits << padding) | ((1 << padding) - 1), length + padding
    return bits.to_bytes(length // 8, "big")


def huffman_string(text: str) -> bytes:
    coded = huffman(text)
    return bytes([0x80 | len(coded)]) + coded


def test_hpack_decodes_rfc_7541_examples() -> None:
    requests = HpackDecoder()  # C.4: requests with Huffman coding, one dynamic table across them
    assert requests.decode(bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff")) == [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ]
    assert requests.decode(bytes.fromhex("828684be5886a8eb10649cbf"))[-2:] == [
        (":authority", "www.example.com"),
        ("cache-control", "no-cache"),
    ]
    third = requests.decode(bytes.fromhex("828785bf400a637573746f6d2d6b65798925a849e95bb8e8b4bf"))
    assert third[2:] == [
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ]
    responses = HpackDecoder(max_table_size=256)  # C.6: responses that evict from a 256-byte table
    first = "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3"  # noqa: E501
    assert responses.decode(bytes.fromhex(first)) == [
        (":status", "302"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("location", "https://www.example.com"),
    ]
    assert responses.decode(bytes.fromhex("4883640effc1c0bf")) == [
        (":status", "307"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("location", "https://www.example.com"),
    ]
    assert huffman("www.example.com") == bytes.fromhex("f1e3c2e5f23a6ba0ab90f4ff")


def call(client: H2GrpcClient, message: bytes, timeout: float = 10) -> RequestFailed | None:
    done = threading.Event()
    outcome: list[RequestFailed | None] = []

    def on_done(error: RequestFailed | None) -> None:
        outcome.append(error)
        done.set()

    client.call(message, on_done)
    assert done.wait(timeout), "the call never completed"
    return outcome[0]


def simple_request(model: str = "simple") -> bytes:
    (stream,) = load_input_data(SIMPLE, ("zero",), {}, 1).streams
    info = SIMPLE if model == "simple" else ModelInfo(model, "", SIMPLE.inputs, SIMPLE.outputs, True, 8)
    return grpc_request(info, stream[0]).body


def test_calls_against_trt_serve(perf_server: ServerProcess) -> None:
    host, port = perf_server.grpc_url.split(":")
    client = H2GrpcClient(host, int(port), INFER, timeout=10)
    try:
        assert [call(client, simple_request()) for _ in range(3)] == [None, None, None]
        error = call(client, simple_request("no_such_model"))
        assert isinstance(error, RequestFailed) and "no_such_model" in str(error), error
        assert call(client, simple_request()) is None  # an error leaves the connection usable
    finally:
        client.close()
    refused = H2GrpcClient("127.0.0.1", 9, INFER, timeout=2)
    error = call(refused, simple_request())
    assert isinstance(error, ConnectionLost) and "cannot connect to 127.0.0.1:9" in str(error)


class ScriptedServer:
    """A strict HTTP/2 gRPC server on one connection at a time: tiny windows and frames, one stream at a
    time, a PING and a table-size change up front, Huffman trailers, GOAWAY after ``goaway_after``
    calls. Records every request message it reassembled."""

    WINDOW = 100  # smaller than a request: the client must wait for WINDOW_UPDATE credit

    def __init__(self, goaway_after: int) -> None:
        self.goaway_after = goaway_after
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.messages: list[bytes] = []
        self.connections = 0
        self.ping_acknowledged = threading.Event()
        self.most_open_streams = 0
        self.problems: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            try:
                self._connection(conn)
            except Exception as error:  # surfaced by the test
                self.problems.append(f"{type(error).__name__}: {error}")
            conn.close()

    @staticmethod
    def _frames(conn: socket.socket) -> Iterator[tuple[int, int, int, bytes]]:
        buffer = b""
        while True:
            while len(buffer) < 9 or len(buffer) < 9 + int.from_bytes(buffer[:3], "big"):
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            length = int.from_bytes(buffer[:3], "big")
            kind, flags = buffer[3], buffer[4]
            stream = int.from_bytes(buffer[5:9], "big")
            yield kind, flags, stream, buffer[9 : 9 + length]
            buffer = buffer[9 + length :]

    def _connection(self, conn: socket.socket) -> None:
        preface = b""
        while len(preface) < len(PREFACE):
            preface += conn.recv(len(PREFACE) - len(preface))
        assert preface == PREFACE, preface
        settings = struct.pack(">HIHIHI", 0x3, 1, 0x4, self.WINDOW, 0x5, 16384)
        conn.sendall(
            frame_head(len(settings), 4, 0, 0) + settings + frame_head(8, 6, 0, 0) + b"pingpong"
            # the connection window stays at 65535 - so it runs out too - until calls return it
        )
        bodies: dict[int, bytes] = {}
        served = 0
        acknowledged = False  # until the client has our SETTINGS it may use HTTP/2's defaults
        for kind, flags, stream, payload in self._frames(conn):
            if served == self.goaway_after:
                continue  # gone away: read what the client still sends until it hangs up
            if kind == 4 and flags & 1:
                acknowledged = True
            elif kind == 4:
                self._check_settings(payload)
            elif kind == 6 and flags & 1:
                assert payload == b"pingpong"
                self.ping_acknowledged.set()
            elif kind == 1:
                bodies[stream] = b""
                if acknowledged:
                    self.most_open_streams = max(self.most_open_streams, len(bodies))
                assert flags & 0x4, "headers must fit one frame"
                HpackDecoder().decode(payload)  # the client's block stands alone: literals only
            elif kind == 0:
                overran = acknowledged and len(payload) > self.WINDOW
                assert not overran, f"a DATA frame of {len(payload)} bytes overran the window"
                bodies[stream] += payload
                credit = struct.pack(">I", len(payload))
                conn.sendall(frame_head(4, 8, 0, stream) + credit + frame_head(4, 8, 0, 0) + credit)
                if flags & 1:
                    self.messages.append(bodies.pop(stream))
                    served += 1
                    self._reply(conn, stream, served)
                    if served == self.goaway_after:
                        conn.sendall(frame_head(8, 7, 0, 0) + struct.pack(">II", stream, 0))

    @staticmethod
    def _check_settings(payload: bytes) -> None:
        """RFC 9113 6.5.2: the values a server must refuse with a connection error."""
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            assert key != 0x2 or value in (0, 1), f"ENABLE_PUSH {value}"
            assert key != 0x4 or value < 1 << 31, f"INITIAL_WINDOW_SIZE {value}"
            assert key != 0x5 or 16384 <= value < 1 << 24, f"MAX_FRAME_SIZE {value}"

    def _reply(self, conn: socket.socket, stream: int, served: int) -> None:
        head = b"\x88" + encode_literal("content-type", "application/grpc")
        trailer = (  # Huffman-coded literals, the status indexed into the table the first time
            b"\x40" + huffman_string("grpc-status") + huffman_string("0" if served % 3 else "5")
            + b"\x00" + huffman_string("grpc-message") + huffman_string("not%20here")
        )  # fmt: skip
        message = grpc_message(b"reply")
        conn.sendall(
            frame_head(len(head), 1, 0x4, stream)
            + head
            + frame_head(len(message), 0, 0, stream)
            + message
            + frame_head(len(trailer), 1, 0x5, stream)
            + trailer
        )

    def close(self) -> None:
        self.listener.close()


def test_http2_duties_against_a_strict_server() -> None:
    server = ScriptedServer(goaway_after=5)
    client = H2GrpcClient("127.0.0.1", server.port, INFER, timeout=10)
    message = bytes(range(256)) * 3  # 773 bytes framed: eight DATA frames through a 100-byte window
    results: list[RequestFailed | None] = []
    lock = threading.Lock()
    finished = threading.Event()

    def on_done(error: RequestFailed | None) -> None:
        with lock:
            results.append(error)
            if len(results) == 6:
                finished.set()

    try:
        assert call(client, message) is None  # the connection is up and the server's SETTINGS applied
        for _ in range(6):  # more than the one stream the server allows: the rest wait their turn
            client.call(message, on_done)
        assert finished.wait(20), (results, server.problems)
        assert server.problems == []
        assert server.ping_acknowledged.is_set()
        assert server.most_open_streams == 1
        assert server.messages == [grpc_message(message)] * 5
        # the server's 3rd call carries grpc-status 5 and a percent-encoded message; the 6th and 7th
        # were refused by GOAWAY (ConnectionLost, which the runners retry once) ...
        assert results[:4] == [None, results[1], None, None]
        assert str(results[1]) == "gRPC NOT_FOUND: not here"
        assert all(isinstance(r, ConnectionLost) and "GOAWAY" in str(r) for r in results[4:]), results
        # ... and the next call opens a new connection
        assert call(client, message) is None and server.connections == 2, server.problems
        assert server.problems == []
    finally:
        client.close()
        server.close()


def test_callback_loop_retries_what_goaway_refused_and_stops_cleanly() -> None:
    server = ScriptedServer(goaway_after=7)
    recorder = Recorder(0, threaded=True)
    loop = CallbackLoop("127.0.0.1", server.port, 10, recorder, lambda source: source.next())
    payloads = [b"first", b"second"]
    try:
        loop.start([RequestCycle(payloads, slot) for slot in range(3)])  # 3 slots, 1 stream allowed
        deadline = time.monotonic() + 20
        while len(recorder.latencies_us) + recorder.errors < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loop.stop(10)
        part = recorder.take()
    finally:
        server.close()
    assert server.problems == []
    assert server.connections >= 4  # a GOAWAY every 7 calls
    # every 3rd call of a connection answers NOT_FOUND; the calls GOAWAY refused were sent again
    assert part.error_samples == ("gRPC NOT_FOUND: not here",)
    assert len(part.latencies_us) >= 2 * part.errors > 0
    assert set(server.messages) == {grpc_message(p) for p in payloads}


def test_callback_loop_reports_an_error_raised_in_a_callback() -> None:
    server = ScriptedServer(goaway_after=100)
    recorder = Recorder(0, threaded=True)
    drawn = itertools.count()

    def next_payload(source: RequestCycle | SequenceSource) -> bytes:
        if next(drawn) == 2:  # raised on the reader thread, in the first call's callback
            raise RuntimeError("all 1 sequence ids are in use: widen --sequence-id-range")
        return source.next()

    loop = CallbackLoop("127.0.0.1", server.port, 10, recorder, next_payload)
    try:
        loop.start([RequestCycle([b"one"], 0), RequestCycle([b"two"], 0)])
        deadline = time.monotonic() + 10
        while loop.fatal is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loop.fatal == "RuntimeError: all 1 sequence ids are in use: widen --sequence-id-range"
        assert loop.stop(10)  # the slot that failed counts as finished; the other one stops
    finally:
        server.close()
