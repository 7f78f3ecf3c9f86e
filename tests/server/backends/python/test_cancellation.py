"""A gRPC client that cancels: the Python model can see it (``is_cancelled()``) and stop, and a
request cancelled while it waits in the queue never reaches the model."""

from __future__ import annotations

import json
import queue
import socket
import time
import urllib.request
from collections.abc import Iterator
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.server.backends.python.python_models import WAITER, WAITER_CONFIG
from tests.support import ServerProcess, collect_stream, write_python_model

# Streams a response every 20 ms for up to 10 s, until the client cancels.
TICKER = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            threading.Thread(target=self.tick, args=(sender,), daemon=True).start()
        return None

    def tick(self, sender):
        for count in range(500):
            if sender.is_cancelled():
                pb_utils.Logger.log_info(f"ticker: cancelled after {count} responses")
                return
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("COUNT", np.array([count], np.int32))]))
            time.sleep(0.02)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        pb_utils.Logger.log_info("ticker: never cancelled")
"""

TICKER_CONFIG = """
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "START" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# Calls `ticker` through BLS, takes three responses, cancels, and reports what the iterator gave.
BLS_CANCELLER = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="ticker", requested_output_names=["COUNT"],
                inputs=[pb_utils.Tensor("START", np.array([0], np.int32))],
            )
            stream = call.exec(decoupled=True)
            taken = [next(stream) for _ in range(3)]
            stream.cancel()
            rest = list(stream)
            last = rest[-1] if rest else taken[-1]
            code = last.error().code() if last.has_error() else -1
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("RECEIVED", np.array([len(taken) + len(rest)], np.int32)),
                pb_utils.Tensor("LAST_CODE", np.array([code], np.int32)),
            ]))
        return responses
"""

BLS_CANCELLER_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "RECEIVED" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "LAST_CODE" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("cancel_repo")
    for name, source, config in (
        ("ticker", TICKER, TICKER_CONFIG),
        ("waiter", WAITER, WAITER_CONFIG),
        ("bls_canceller", BLS_CANCELLER, BLS_CANCELLER_CONFIG),
    ):
        write_python_model(repo, name, source, config)
    proc = ServerProcess([repo]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _metrics(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def _wait_for_log(server: ServerProcess, text: str, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = server.log()
        if text in log:
            return log
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in the log:\n{server.log()}")


def _tensor(name: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, [1], "INT32")
    tensor.set_data_from_numpy(np.array([0], dtype=np.int32))
    return tensor


def test_a_cancelled_stream_stops_a_decoupled_model_that_checks(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    client.async_stream_infer("ticker", [_tensor("START")])
    for _ in range(3):
        _, error = received.get(timeout=10)
        assert error is None
    client.stop_stream(cancel_requests=True)
    log = _wait_for_log(server, "ticker: cancelled after")
    count = int(log.split("ticker: cancelled after ")[1].split()[0])
    assert 3 <= count < 100, count  # 500 would have taken 10 s
    assert "ticker: never cancelled" not in log
    assert 'nv_inference_request_failure{model="ticker",version="1",reason="CANCELED"} 1' in _metrics(server)


def test_a_cancelled_call_is_seen_in_execute_and_a_queued_one_never_runs(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    callback = partial(lambda q, result, error: q.put((result, error)), answers)
    running = client.async_infer("waiter", [_tensor("IN")], callback, request_id="wait-running")
    _wait_for_log(server, "waiter: executing wait-running")
    queued = client.async_infer("waiter", [_tensor("IN")], callback, request_id="wait-queued")
    time.sleep(0.2)  # "wait-queued" waits behind "wait-running" on the only instance
    queued.cancel()
    running.cancel()
    _wait_for_log(server, "waiter: wait-running cancelled")
    # The next request runs at once: the cancelled one left the queue without executing.
    result = client.infer("waiter", [_tensor("IN")], request_id="after")
    assert result.as_numpy("OUT")[0] == 1
    log = _wait_for_log(server, "waiter: executing after")
    assert "waiter: executing wait-queued" not in log
    # Both count as cancelled requests, as Triton counts them.
    assert 'nv_inference_request_failure{model="waiter",version="1",reason="CANCELED"} 2' in _metrics(server)


def test_a_bls_call_cancelled_by_the_calling_model_stops_the_called_one(server: ServerProcess) -> None:
    before = server.log().count("ticker: cancelled after")
    client = grpcclient.InferenceServerClient(server.grpc_url)
    result = client.infer("bls_canceller", [_tensor("IN")])
    assert int(result.as_numpy("LAST_CODE")[0]) == 7  # pb_utils.TritonError.CANCELLED ends the stream
    assert 3 <= int(result.as_numpy("RECEIVED")[0]) < 100
    deadline = time.monotonic() + 10
    while server.log().count("ticker: cancelled after") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.log().count("ticker: cancelled after") == before + 1


def test_an_http_client_that_disconnects_cancels_its_inference(server: ServerProcess) -> None:
    # The model waits on requests whose id starts with "wait", until they are cancelled.
    tensor = {"name": "IN", "shape": [1], "datatype": "INT32", "data": [0]}
    body = json.dumps({"id": "wait-http", "inputs": [tensor]}).encode()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as connection:
        connection.sendall(_http_request(body))
        _wait_for_log(server, "waiter: executing wait-http")
    log = _wait_for_log(server, "waiter: wait-http cancelled")
    assert "waiter: wait-http not cancelled" not in log
    # The server goes on answering on other connections.
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.infer("waiter", [_tensor("IN")], request_id="after-http").as_numpy("OUT")[0] == 1


def _http_request(body: bytes) -> bytes:
    head = (
        "POST /v2/models/waiter/infer HTTP/1.1\r\nHost: trt\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body
