"""A client that goes away stops the generation: the model sees ``is_cancelled()`` and stops
producing tokens, streamed or not, and the core counts the request as cancelled. Concurrent
requests are decoded together and each gets its own whole answer."""

from __future__ import annotations

import http.client
import json
import time
from concurrent.futures import ThreadPoolExecutor

import openai

from tests.server.openai.conftest import MODEL, OpenAIServer
from tests.server.openai.test_models_and_metrics import metric_samples, sample

LONG = 900  # tokens: seconds of work for tiny_llm, unless it is stopped
LONG_REQUEST = {"model": MODEL, "prompt": "hello", "max_tokens": LONG, "ignore_eos": True}


def _generated_tokens(server: OpenAIServer) -> float:
    return sample(metric_samples(server), "vllm:generation_tokens_total")


def _settled_tokens(server: OpenAIServer, timeout: float = 30) -> float:
    """The token counter once it stops moving (checked over half a second)."""
    deadline = time.monotonic() + timeout
    previous = _generated_tokens(server)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        current = _generated_tokens(server)
        if current == previous:
            return current
        previous = current
    raise AssertionError("tiny_llm is still generating: the cancelled request was not stopped")


def _post(server: OpenAIServer, body: dict[str, object]) -> http.client.HTTPConnection:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    connection.request("POST", "/v1/completions", json.dumps(body))
    return connection


def _cancelled(server: OpenAIServer) -> float:
    return sample(metric_samples(server), "nv_inference_request_failure_total", reason="CANCELED")


def test_closing_a_stream_stops_the_model(openai_server: OpenAIServer) -> None:
    before, cancelled_before = _settled_tokens(openai_server), _cancelled(openai_server)
    connection = _post(openai_server, {**LONG_REQUEST, "stream": True})
    reply = connection.getresponse()
    assert reply.status == 200
    assert reply.fp.readline() and reply.fp.readline().startswith(b"data: ")  # a chunk's size, then the event
    connection.sock.close()
    connection.close()
    generated = _settled_tokens(openai_server) - before
    assert 1 <= generated < LONG / 2, f"{generated} tokens generated after the client left"
    assert _cancelled(openai_server) == cancelled_before + 1


def test_leaving_before_a_whole_answer_stops_the_model(openai_server: OpenAIServer) -> None:
    before = _settled_tokens(openai_server)
    connection = _post(openai_server, LONG_REQUEST)
    deadline = time.monotonic() + 30
    while _generated_tokens(openai_server) == before and time.monotonic() < deadline:
        time.sleep(0.02)  # until it has begun
    connection.sock.close()
    connection.close()
    generated = _settled_tokens(openai_server) - before
    assert 1 <= generated < LONG / 2, f"{generated} tokens generated after the client left"


def test_concurrent_requests_each_get_their_whole_answer(client: openai.OpenAI) -> None:
    def complete(tokens: int) -> tuple[int, str | None, int]:
        completion = client.completions.create(
            model=MODEL, prompt="hello", max_tokens=tokens, extra_body={"ignore_eos": True}
        )
        assert completion.usage is not None
        return tokens, completion.choices[0].finish_reason, completion.usage.completion_tokens

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(complete, [10, 40, 80, 20, 60, 30]))
    assert all(reason == "length" and got == asked for asked, reason, got in results), results
