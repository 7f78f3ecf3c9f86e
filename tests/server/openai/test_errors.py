"""Errors come in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, with the status
OpenAI's client turns into its exception classes; what the model itself refuses keeps its status."""

from __future__ import annotations

import http.client
import json

import openai
import pytest

from tests.server.openai.conftest import MAX_INPUT_SIZE, MODEL, OpenAIServer


def _raw(server: OpenAIServer, method: str, path: str, body: bytes = b"") -> tuple[int, dict[str, object]]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(method, path, body)
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        connection.close()


def _error(document: dict[str, object]) -> dict[str, object]:
    error = document["error"]
    assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}, document
    return error


def test_an_unknown_model_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.completions.create(model="no_such_model", prompt="hi")
    assert raised.value.body == {
        "message": "The model `no_such_model` does not exist.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


def test_a_model_that_takes_no_text_is_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model="simple", prompt="hi")
    assert isinstance(raised.value.body, dict) and raised.value.body["code"] == "model_not_supported"
    assert "text_input" in raised.value.body["message"]


@pytest.mark.parametrize(
    ("settings", "param"),
    [
        ({"n": 2}, "n"),
        ({"temperature": 3}, "temperature"),
        ({"top_p": -0.5}, "top_p"),
        ({"logprobs": 2}, "logprobs"),
        ({"extra_body": {"not_an_openai_field": 1}}, "not_an_openai_field"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"stop": ["x"] * 17}, "stop"),
    ],
)
def test_a_field_out_of_bounds_or_unsupported_is_refused_naming_it(
    client: openai.OpenAI, settings: dict[str, object], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model=MODEL, prompt="hi", **settings)
    assert isinstance(raised.value.body, dict) and raised.value.body["param"] == param


def test_logit_bias_is_refused_in_tritons_words_for_each_route(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as completion:
        client.completions.create(model=MODEL, prompt="hi", logit_bias={"1": 5})
    with pytest.raises(openai.BadRequestError) as chat:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], logit_bias={"1": 5}
        )
    messages = [_error(raised.value.response.json())["message"] for raised in (completion, chat)]
    assert messages == ["logit bias is not supported", "logit bias is not currently supported"]


def test_what_the_model_refuses_is_a_400_streamed_or_not(client: openai.OpenAI) -> None:
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError, match="max_tokens must be at least 1"):
            client.completions.create(model=MODEL, prompt="hi", max_tokens=0, stream=stream)


def test_chat_refuses_what_it_cannot_show_the_model(client: openai.OpenAI) -> None:
    image = [{"type": "image_url", "image_url": {"url": "data:,"}}]
    with pytest.raises(openai.BadRequestError, match="only text parts"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": image}])
    with pytest.raises(openai.BadRequestError, match="tool calling is not supported"):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        )  # fmt: skip
    with pytest.raises(openai.BadRequestError, match="role"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "narrator", "content": "hi"}])


def test_malformed_bodies_wrong_methods_and_unknown_routes(openai_server: OpenAIServer) -> None:
    status, body = _raw(openai_server, "POST", "/v1/completions", b"{not json")
    assert status == 400 and "not valid JSON" in str(_error(body)["message"])
    status, body = _raw(openai_server, "POST", "/v1/chat/completions", b"[]")
    assert status == 400 and _error(body)["type"] == "invalid_request_error"
    status, body = _raw(openai_server, "GET", "/v1/completions")
    assert status == 405 and _error(body)["code"] == "method_not_allowed"
    status, body = _raw(openai_server, "POST", "/v1/images/generations", b"{}")
    assert status == 404 and _error(body)["code"] == "not_found"


def test_a_body_over_the_input_size_limit_is_413_in_openai_shape(openai_server: OpenAIServer) -> None:
    request = json.dumps({"model": MODEL, "prompt": "x" * (MAX_INPUT_SIZE + 1)}).encode()
    status, body = _raw(openai_server, "POST", "/v1/completions", request)
    assert status == 413
    error = _error(body)
    assert error["code"] == "content_too_large" and "--http-max-input-size" in str(error["message"])


def test_a_restricted_route_needs_its_header(openai_server: OpenAIServer) -> None:
    status, body = _raw(openai_server, "GET", "/metrics")
    assert status == 401
    assert _error(body) == {
        "message": "This API is restricted, expecting header 'metrics-key' with valid value",
        "type": "authentication_error",
        "param": None,
        "code": "invalid_auth",
    }


def test_a_prompt_longer_than_the_models_context_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="this model's context is 1024 tokens"):
        client.completions.create(model=MODEL, prompt="x " * 1100)
    # Far longer: refused before it is tokenized.
    with pytest.raises(openai.BadRequestError, match="longer than this model's context of 1024 tokens"):
        client.completions.create(model=MODEL, prompt="x" * 600_000)


DEEP = "[" * 1000 + "]" * 1000  # JSON allows it; repr() of it raised RecursionError


@pytest.mark.parametrize(
    "body",
    [
        f'{{"model": "{MODEL}", "prompt": "hi", "max_tokens": {DEEP}}}',
        f'{{"model": "{MODEL}", "prompt": "hi", "temperature": {DEEP}}}',
        f'{{"model": "{MODEL}", "prompt": "hi", "echo": {DEEP}}}',
    ],
    ids=["integer", "number", "boolean"],
)
def test_a_value_nested_a_thousand_deep_is_a_400_that_quotes_it_briefly(
    openai_server: OpenAIServer, body: str
) -> None:
    status, document = _raw(openai_server, "POST", "/v1/completions", body.encode())
    assert status == 400, document
    message = str(_error(document)["message"])
    assert "[[[[...]]]]" in message and len(message) < 200, message


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"n": 2}, "Received n=2, but only single choice (n=1) is currently supported"),
        ({"best_of": 3}, "Received best_of=3, but only single choice (best_of=1) is currently supported"),
        ({"suffix": "!"}, "suffix is not currently supported"),
        ({"prompt": ""}, "prompt must be non-empty"),
        ({"prompt": ["one", "two"]}, "only single string input is supported"),
        (
            {"stream_options": {"include_usage": True}},
            "`stream_options` can only be used when `stream` is True",
        ),
    ],
    ids=["n", "best_of", "suffix", "empty", "several", "stream_options"],
)
def test_unsupported_completion_settings_are_refused_in_tritons_words(
    openai_server: OpenAIServer, settings: dict[str, object], words: str
) -> None:
    """The texts of Triton's OpenAI front end (its python/openai tests match on them)."""
    body = json.dumps({"model": MODEL, "prompt": "hi", **settings}).encode()
    status, document = _raw(openai_server, "POST", "/v1/completions", body)
    assert (status, _error(document)["message"]) == (400, words)
