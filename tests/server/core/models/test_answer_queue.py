"""A decoupled model's answers that its reader does not take are held up to
``--max-unread-response-bytes``; past it the request is cancelled and the reader told why."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, write_python_model

# Sends IN answers of 16 KiB from a thread as fast as it can, stopping when the request is
# cancelled; then writes how many it sent to $MARKS/sent.
FLOOD = """
import os
import json
import socket
import threading
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            threading.Thread(target=self.flood, args=(request.get_response_sender(), count)).start()
        return None

    def flood(self, sender, count):
        block = np.zeros(16384, np.uint8)
        sent = 0
        while sent < count and not sender.is_cancelled():
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", block)]))
            sent += 1
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        Path(os.environ["MARKS"], "sent").write_text(str(sent))
"""

CONFIG = """
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_UINT8 dims: [ 16384 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# Calls `flood` through BLS with exec(decoupled=True), takes its first response, then works 2 s
# without reading the stream, then reads the rest: answers the count read and the last error.
SLOW_CALLER = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="flood", requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor("IN", np.array([20000], np.int32))],
            )
            stream = iter(call.exec(decoupled=True))
            next(stream)
            time.sleep(2)
            read, error = 1, ""
            for response in stream:
                if response.has_error():
                    error = response.error().message()
                elif response.output_tensors():
                    read += 1
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("READ", np.array([read], np.int32)),
                pb_utils.Tensor("ERROR", np.array([error.encode()], np.object_)),
            ]))
        return responses
"""

SLOW_CALLER_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "READ" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "ERROR" data_type: TYPE_STRING dims: [ 1 ] }
]
"""

LIMIT = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, marks: Path) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("flood_repo")
    write_python_model(repo, "flood", FLOOD, CONFIG)
    write_python_model(repo, "slow_caller", SLOW_CALLER, SLOW_CALLER_CONFIG)
    # gRPC holds 16 responses unsent itself before the stream stops taking answers.
    args = [f"--max-unread-response-bytes={LIMIT}", "--grpc-max-response-pool-size=16"]
    proc = ServerProcess([repo], args, env={"MARKS": str(marks)}).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def flood_stream(
    server: ServerProcess, count: int, stall: threading.Event
) -> tuple[grpcclient.InferenceServerClient, list[object], threading.Event]:
    """Ask ``flood`` for ``count`` answers; the client stops reading after the first until ``stall``
    is set. Returns the client (whose collection would wait for its reader), what arrives (results
    and errors) and an event set when the request ended."""
    arrived: list[object] = []
    ended = threading.Event()

    def callback(result: object, error: object) -> None:
        arrived.append(error if error is not None else result)
        if error is not None or result.get_response().parameters["triton_final_response"].bool_param:  # type: ignore[attr-defined]
            ended.set()
        if len(arrived) == 1:
            stall.wait(30)

    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=callback)
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([count], np.int32))
    client.async_stream_infer("flood", [tensor], enable_empty_final_response=True)
    return client, arrived, ended


def _wait_for(sent: Path) -> None:
    """Until the model has written how many answers it sent (it stopped, or sent them all)."""
    for _ in range(300):
        if sent.exists():
            return
        threading.Event().wait(0.1)
    raise AssertionError("the model was never told to stop")


def test_a_reader_that_stops_reading_has_its_request_cancelled_instead_of_held_without_bound(
    server: ServerProcess, marks: Path
) -> None:
    sent = marks / "sent"
    sent.unlink(missing_ok=True)
    stall = threading.Event()
    client, arrived, ended = flood_stream(server, 20_000, stall)
    _wait_for(sent)  # the model stops once it sees the request cancelled
    assert int(sent.read_text()) < 2_000  # about 2 MiB held (unsent and unread), not 320 MB
    stall.set()
    assert ended.wait(30)
    errors = [item for item in arrived if isinstance(item, Exception)]
    assert len(errors) == 1 and "--max-unread-response-bytes" in str(errors[0])
    assert 1 < len(arrived) < 2_000  # what was held arrives before the error
    client.stop_stream()


def test_a_reader_that_keeps_up_gets_every_answer(server: ServerProcess, marks: Path) -> None:
    stall = threading.Event()
    stall.set()  # reads as they come
    # 6.4 MB, over the limit were it all held at once
    client, arrived, ended = flood_stream(server, 400, stall)
    assert ended.wait(60)
    assert not [item for item in arrived if isinstance(item, Exception)]
    assert len(arrived) == 401  # and the empty final response
    client.stop_stream()


def test_an_http_stream_whose_client_stops_reading_is_bounded_too(server: ServerProcess, marks: Path) -> None:
    sent = marks / "sent"
    sent.unlink(missing_ok=True)
    body = json.dumps({"IN": 20_000}).encode()
    with socket.create_connection(("127.0.0.1", server.http_port)) as connection:
        connection.sendall(
            b"POST /v2/models/flood/generate_stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )  # and never reads
        _wait_for(sent)
    assert int(sent.read_text()) < 2_000


def test_a_model_that_reads_its_bls_stream_slowly_is_a_slow_reader_too(
    server: ServerProcess, marks: Path
) -> None:
    """The server hands a BLS stream's responses to the calling model's process no faster than it
    takes them, so they wait in the bounded stream rather than in a queue of the server's."""
    sent = marks / "sent"
    sent.unlink(missing_ok=True)
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))
    result = client.infer("slow_caller", [tensor])
    assert int(sent.read_text()) < 2_000  # not all 20,000 (320 MB) taken while the caller slept
    assert 1 < int(result.as_numpy("READ")[0]) < 2_000
    assert "--max-unread-response-bytes" in result.as_numpy("ERROR")[0].decode()


# Takes any number of bytes and says how many.
SINK = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "SIZE", np.array([pb_utils.get_input_tensor_by_name(r, "DATA").as_numpy().size], np.int64)
            )])
            for r in requests
        ]
"""

SINK_CONFIG = """
backend: "python"
input [ { name: "DATA" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "SIZE" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""

SERVER_LIMIT = 32 << 20
BIG_REQUEST = 24 << 20  # three quarters of the bound


@pytest.fixture(scope="module")
def bounded_server(tmp_path_factory: pytest.TempPathFactory, marks: Path) -> Iterator[ServerProcess]:
    """No bound per request: only the server's one bound, --max-queued-bytes, holds the answers."""
    repo = tmp_path_factory.mktemp("bounded_repo")
    write_python_model(repo, "flood", FLOOD, CONFIG)
    write_python_model(repo, "sink", SINK, SINK_CONFIG)
    args = [
        "--max-unread-response-bytes=0",
        f"--max-queued-bytes={SERVER_LIMIT}",
        "--grpc-max-response-pool-size=16",
    ]
    proc = ServerProcess([repo], args, env={"MARKS": str(marks)}).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def test_unread_answers_count_against_the_server_s_bound_and_are_given_back(
    bounded_server: ServerProcess, marks: Path
) -> None:
    sent = marks / "sent"
    sent.unlink(missing_ok=True)
    stall = threading.Event()
    client, arrived, ended = flood_stream(bounded_server, 20_000, stall)
    _wait_for(sent)
    assert int(sent.read_text()) < 4_000  # about 32 MiB held, not 320 MB
    stall.set()
    assert ended.wait(30)
    errors = [item for item in arrived if isinstance(item, Exception)]
    assert len(errors) == 1 and "--max-queued-bytes" in str(errors[0])
    client.stop_stream()
    # What the stream held was given back: a request needing three quarters of the bound is taken.
    assert _sink(bounded_server) == BIG_REQUEST


def test_a_stream_left_unread_gives_back_its_share_when_the_client_goes(
    bounded_server: ServerProcess, marks: Path
) -> None:
    sent = marks / "sent"
    sent.unlink(missing_ok=True)
    stall = threading.Event()
    # 24 MB, under the bound: the client's and the kernel's buffers take a few MB, the server holds
    # the rest unread.
    client, _, _ = flood_stream(bounded_server, 1_500, stall)
    _wait_for(sent)
    assert int(sent.read_text()) == 1_500
    with pytest.raises(InferenceServerException, match="--max-queued-bytes"):
        _sink(bounded_server)  # no room while the stream holds its answers
    held, limit = _queued_bytes(bounded_server)  # the metrics say what holds the bound
    assert limit == SERVER_LIMIT and SERVER_LIMIT - BIG_REQUEST < held <= SERVER_LIMIT
    client.stop_stream(cancel_requests=True)
    stall.set()
    for _ in range(50):  # the server sees the stream end a moment after the client ends it
        try:
            assert _sink(bounded_server) == BIG_REQUEST
            assert _queued_bytes(bounded_server)[0] == 0
            return
        except InferenceServerException as exc:
            assert "--max-queued-bytes" in str(exc)
            threading.Event().wait(0.1)
    raise AssertionError("the unread answers' bytes were never given back")


def _queued_bytes(server: ServerProcess) -> tuple[float, float]:
    """The trt_queued_bytes and trt_queued_bytes_limit gauges."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    values = {
        line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line.startswith("trt_queued")
    }
    return values["trt_queued_bytes"], values["trt_queued_bytes_limit"]


def _sink(server: ServerProcess) -> int:
    """Send ``sink`` a request of BIG_REQUEST bytes; the size it saw."""
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    data = httpclient.InferInput("DATA", [BIG_REQUEST], "UINT8")
    data.set_data_from_numpy(np.zeros(BIG_REQUEST, np.uint8), binary_data=True)
    return int(http.infer("sink", [data]).as_numpy("SIZE")[0])
