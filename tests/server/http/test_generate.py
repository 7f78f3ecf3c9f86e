"""Triton's generate extension: ``/generate`` (one JSON object) and ``/generate_stream`` (server-sent
events), for Python and ONNX models."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator

import pytest

from tests.support import ServerProcess, write_python_model, write_simple

SHOUT = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0].decode()
            if text == "refuse":
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("shout refuses")))
                continue
            suffix = json.loads(request.parameters()).get("suffix", "")
            out = np.array([(text.upper() + suffix).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", out)]))
        return responses
"""

SHOUT_CONFIG = """
backend: "python"
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# One response per character of text_input, 20 ms apart, until the client goes away.
SPELL = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0].decode()
            sender = request.get_response_sender()
            threading.Thread(target=self.spell, args=(text, sender), daemon=True).start()
        return None

    def spell(self, text, sender):
        for index, letter in enumerate(text):
            if sender.is_cancelled():
                pb_utils.Logger.log_info(f"spell: cancelled at {index}")
                return
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("text_output", np.array([letter.encode()], dtype=np.object_)),
                pb_utils.Tensor("index", np.array([index], dtype=np.int32)),
            ]))
            time.sleep(0.02)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

SPELL_CONFIG = """
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "index" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("generate_repo")
    for name, source, config in (("shout", SHOUT, SHOUT_CONFIG), ("spell", SPELL, SPELL_CONFIG)):
        write_python_model(repo, name, source, config)
    write_simple(repo)
    proc = ServerProcess([repo]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _post(server: ServerProcess, path: str, body: object) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return connection.getresponse()


def _events(reply: http.client.HTTPResponse) -> list[dict[str, object]]:
    text = reply.read().decode()
    return [json.loads(block.removeprefix("data: ")) for block in text.split("\n\n") if block]


def test_generate_answers_one_json_object_with_the_outputs_by_name(server: ServerProcess) -> None:
    reply = _post(server, "/v2/models/shout/generate", {"text_input": "hello", "id": "7", "suffix": "!"})
    assert reply.status == 200
    assert reply.getheader("content-type") == "application/json"
    # "suffix" names no input, so it reaches the model as a request parameter, as in Triton.
    assert json.loads(reply.read()) == {
        "model_name": "shout",
        "model_version": "1",
        "id": "7",
        "text_output": "HELLO!",
    }


def test_generate_feeds_numeric_inputs_to_a_batching_onnx_model(server: ServerProcess) -> None:
    numbers = list(range(16))
    reply = _post(server, "/v2/models/simple/versions/1/generate", {"INPUT0": numbers, "INPUT1": numbers})
    assert reply.status == 200
    document = json.loads(reply.read())
    assert document["OUTPUT0"] == [2 * n for n in numbers]
    assert document["OUTPUT1"] == [0] * 16


def test_generate_stream_sends_an_event_per_response(server: ServerProcess) -> None:
    reply = _post(server, "/v2/models/spell/generate_stream", {"text_input": "abc", "parameters": {"x": 1}})
    assert reply.status == 200
    assert reply.getheader("content-type") == "text/event-stream; charset=utf-8"
    assert reply.getheader("transfer-encoding") == "chunked"
    events = _events(reply)
    assert [(e["text_output"], e["index"]) for e in events] == [("a", 0), ("b", 1), ("c", 2)]
    assert all(e["model_name"] == "spell" and e["model_version"] == "1" for e in events)


def test_errors_before_any_response_are_plain_json_with_their_status(server: ServerProcess) -> None:
    for path, body, status, message in (
        ("/v2/models/nope/generate_stream", {"text_input": "a"}, 404, "nope"),
        ("/v2/models/spell/generate", {"text_input": "abc"}, 400, "use generate stream for model that"),
        ("/v2/models/shout/generate", {"text_input": 5}, 400, "text_input"),
        ("/v2/models/shout/generate", {"other": "a"}, 400, "text_input"),
        ("/v2/models/shout/generate", {"text_input": "a", "parameters": {"p": [1]}}, 400, "'p'"),
    ):
        reply = _post(server, path, body)
        assert reply.status == status, (path, body)
        assert reply.getheader("content-type") == "application/json"
        assert message in json.loads(reply.read())["error"], (path, body)
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
    connection.request("GET", "/v2/models/shout/generate")
    assert connection.getresponse().status == 405


def test_an_error_the_model_answers_with_is_a_400_and_an_event_on_the_stream(server: ServerProcess) -> None:
    """As Triton 2.51 answers it, seen side by side: the status is the first response's, and the
    stream's body is an event a client reading events sees (it was a 500 and plain JSON)."""
    reply = _post(server, "/v2/models/shout/generate", {"text_input": "refuse"})
    assert (reply.status, reply.getheader("content-type")) == (400, "application/json")
    assert json.loads(reply.read()) == {"error": "shout refuses"}
    reply = _post(server, "/v2/models/shout/generate_stream", {"text_input": "refuse"})
    assert (reply.status, reply.getheader("content-type")) == (400, "text/event-stream; charset=utf-8")
    assert reply.read() == b'data: {"error":"shout refuses"}\n\n'


def test_a_client_that_leaves_a_stream_cancels_the_request(server: ServerProcess) -> None:
    reply = _post(server, "/v2/models/spell/generate_stream", {"text_input": "x" * 500})
    assert reply.status == 200
    assert reply.readline().startswith(b"data: ")  # the stream has begun
    reply.close()  # the client goes away mid-stream
    deadline = time.monotonic() + 10
    while "spell: cancelled at" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    log = server.log()
    assert "spell: cancelled at" in log, log
    assert int(log.split("spell: cancelled at ")[1].split()[0]) < 400  # 500 letters take 10 s
    # The server keeps serving on other connections.
    assert _post(server, "/v2/models/shout/generate", {"text_input": "ok"}).status == 200


def test_the_stream_closes_cleanly_and_the_connection_is_reused(server: ServerProcess) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
    for text in ("ab", "cd"):
        connection.request("POST", "/v2/models/spell/generate_stream", json.dumps({"text_input": text}))
        events = _events(connection.getresponse())
        assert "".join(str(e["text_output"]) for e in events) == text
