"""Any request to the OpenAI front end's routes: it is answered, never with an exception or a 500,
every error is in OpenAI's shape, every success is a whole completion, a whole stream of events
ended by ``[DONE]`` or a whole list of embeddings, and once the answer is read (or the client stops
reading a stream) nothing the request started is left running.

The client is hypothesis: completion, chat and embedding bodies drawn from valid ones, with fields set
to values of every JSON type, at and past their limits, fields no request has, and bytes changed. The
server is trt's ``OpenAIApp`` in front of a real core serving two Python models with the vLLM
backend's contract (one takes ``sampling_parameters``, one its settings as request parameters, as the
front end sends them to a model without that input), the example ``tiny_embedding`` and the ONNX
``simple`` model, which takes no text.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import event as note_event
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.connection_harness import core_on, nothing_left_running, stream_events
from tests.support import ROOT, write_python_model, write_simple
from trt.server.http.messages import HttpRequest
from trt.server.openai.app import OpenAIApp
from trt.server.openai.options import OpenAIOptions

# Up to four pieces of the prompt's words, one response each when streamed: the settings it is
# given (max_tokens past any real model's) change how much it says, never how long it works.
ECHO = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0]
            words = prompt.decode("utf-8", "replace").split() or ["..."]
            sampling = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
            if sampling is not None:
                settings = json.loads(sampling.as_numpy().reshape(-1)[0])
            else:
                settings = json.loads(request.parameters())
            count = max(0, min(int(settings.get("max_tokens", 16)), 4))
            stream = pb_utils.get_input_tensor_by_name(request, "stream")
            stream = stream is not None and bool(stream.as_numpy().reshape(-1)[0])
            pieces = [(" " if i else "") + words[i % len(words)] for i in range(count)]
            pieces = (pieces if stream else ["".join(pieces)]) or [""]
            for index, piece in enumerate(pieces):
                final = index == len(pieces) - 1
                outputs = [pb_utils.Tensor("text_output", np.array([piece.encode()], dtype=np.object_))]
                if final:
                    reason = "length" if count == 4 else "stop"
                    reason = np.array([reason.encode()], dtype=np.object_)
                    outputs.append(pb_utils.Tensor("finish_reason", reason))
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
                sender.send(pb_utils.InferenceResponse(outputs), flags)
        return None
"""
ECHO_CONFIG = """
backend: "python"
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true },
  { name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "return_finish_reason" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "finish_reason" data_type: TYPE_STRING dims: [ -1 ] }
]
"""
# The same model without sampling_parameters: its settings come as request parameters.
ECHO_PARAMETERS_CONFIG = ECHO_CONFIG.replace(
    '  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true },\n', ""
)
MODELS = ("echo", "echo_parameters", "simple", "tiny_embedding")
STATUSES = {200, 400, 404, 405}  # what a request here can deserve; never a 5xx

# -- what the client sends ------------------------------------------------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**65), 2**65),
    st.sampled_from([0, 1, -1, 2, 4, 16, 128, 129, 2**31, 2**63 - 1, 2**63, 2**64 - 1]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 1.0, 2.0, 2.0000001, -2.0, -2.1, 1e308, -0.0, 5e-324]),
    st.text(max_size=12),
    st.sampled_from(["", "text", "none", "user", "system", "tool", "echo", "simple", "\u0000", "{{x}}"]),
)
JSON_VALUES = st.one_of(
    _SCALARS,
    st.recursive(
        _SCALARS,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=12,
    ),
)

FIELDS = (
    "model", "prompt", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
    "temperature", "top_p", "frequency_penalty", "presence_penalty", "seed", "stop", "n", "best_of",
    "logprobs", "top_logprobs", "echo", "suffix", "logit_bias", "ignore_eos", "min_tokens", "user",
    "metadata", "tools", "functions", "function_call", "tool_choice", "response_format", "planted",
)  # fmt: skip

_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"])},
    optional={
        "content": st.one_of(
            st.text(max_size=20),
            st.none(),
            st.lists(
                st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=8)}), max_size=3
            ),
            JSON_VALUES,
        ),
        "name": st.one_of(st.text(max_size=8), JSON_VALUES),
    },
)
_FIELD_VALUES = {  # values each field is likely to meet, mostly valid, beside any JSON value
    "model": st.sampled_from((*MODELS, "absent", "")),
    "prompt": st.one_of(st.text(max_size=30), st.lists(st.text(max_size=10), max_size=3)),
    "messages": st.lists(st.one_of(_MESSAGE, _MESSAGE, JSON_VALUES), max_size=4),
    "stream": st.booleans(),
    "stream_options": st.one_of(
        st.fixed_dictionaries({"include_usage": st.booleans()}),
        st.dictionaries(st.text(max_size=14), JSON_VALUES),
    ),
    "max_tokens": st.integers(-1, 2**64),
    "max_completion_tokens": st.integers(-1, 8),
    "temperature": st.floats(-0.1, 2.1),
    "top_p": st.floats(0, 1.01),
    "frequency_penalty": st.floats(-2, 2),
    "presence_penalty": st.floats(-2, 2),
    "seed": st.integers(-(2**64), 2**64),
    "stop": st.one_of(st.text(max_size=4), st.lists(st.text(max_size=3), max_size=20)),
    "n": st.integers(0, 2),
    "best_of": st.integers(0, 2),
    "logprobs": st.sampled_from([False, 0, None]),
    "echo": st.booleans(),
    "ignore_eos": st.booleans(),
    "min_tokens": st.integers(0, 3),
    "user": st.text(max_size=8),
    "metadata": st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
    "tool_choice": st.sampled_from(["none", "auto", None]),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}, {}]),
}


@st.composite
def completion_body(draw: st.DrawFn, chat: bool) -> bytes:
    """A request body: a valid one, its fields changed, set or removed; sometimes its bytes changed."""
    document: dict[str, Any] = {"model": draw(st.sampled_from(["echo", "echo_parameters"] * 3 + ["simple"]))}
    if chat:
        document["messages"] = draw(
            st.one_of(
                st.just([{"role": "user", "content": "say something back"}]), st.lists(_MESSAGE, max_size=3)
            )
        )
    else:
        document["prompt"] = "say something back"
    document["max_tokens"] = draw(st.integers(0, 6))
    if draw(st.booleans()):
        document["stream"] = True
        if draw(st.booleans()):
            document["stream_options"] = {"include_usage": draw(st.booleans())}
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=draw(st.sampled_from([0, 1, 2, 5])))):
        values = _FIELD_VALUES.get(name)
        how = draw(st.integers(0, 5))
        if how == 0:
            document.pop(name, None)
        elif values is not None and how > 1:
            document[name] = draw(values)
        else:
            document[name] = draw(JSON_VALUES)
    try:
        body = orjson.dumps(document)
    except TypeError:  # integers past 64 bits: orjson writes none, a client may
        body = repr(document).encode()
    change = draw(st.sampled_from(["none"] * 17 + ["truncate", "flip", "replace"]))
    if change == "truncate":
        body = body[: draw(st.integers(0, len(body)))]
    elif change == "flip":
        data = bytearray(body)
        for _ in range(draw(st.integers(1, 3))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        body = bytes(data)
    elif change == "replace":
        body = draw(st.sampled_from([b"", b"  ", b"[]", b"null", b"1e400", b'{"model": "echo"}' * 2]))
    return body


_EMBEDDING_VALUES = {
    "model": st.sampled_from(["tiny_embedding"] * 6 + ["simple", "echo", "absent", ""]),
    "input": st.one_of(
        st.text(max_size=30),
        st.lists(st.integers(-2, 2**31 + 1), max_size=6),
        st.lists(st.text(max_size=10), max_size=4),
        st.lists(st.lists(st.integers(-1, 2**31), max_size=4), max_size=3),
    ),
    "dimensions": st.integers(-1, 70),
    "encoding_format": st.sampled_from(["float", "base64", "hex", "", None]),
    "user": st.text(max_size=8),
}


@st.composite
def embedding_body(draw: st.DrawFn) -> bytes:
    """An embeddings body: a valid one with fields changed, set or removed."""
    document: dict[str, Any] = {"model": "tiny_embedding", "input": draw(_EMBEDDING_VALUES["input"])}
    for name in draw(st.lists(st.sampled_from([*_EMBEDDING_VALUES, "planted"]), max_size=3)):
        how = draw(st.integers(0, 5))
        if how == 0:
            document.pop(name, None)
        elif name in _EMBEDDING_VALUES and how > 1:
            document[name] = draw(_EMBEDDING_VALUES[name])
        else:
            document[name] = draw(JSON_VALUES)
    try:
        return orjson.dumps(document)
    except TypeError:  # integers past 64 bits
        return repr(document).encode()


def _embeddings_shape(body: bytes) -> None:
    document = orjson.loads(body)
    assert document["object"] == "list" and document["model"] == "tiny_embedding"
    assert [item["index"] for item in document["data"]] == list(range(len(document["data"])))
    for item in document["data"]:
        assert item["object"] == "embedding" and isinstance(item["embedding"], list | str)
    assert document["usage"]["prompt_tokens"] == document["usage"]["total_tokens"] > 0


@st.composite
def openai_request(draw: st.DrawFn) -> tuple[HttpRequest, int]:
    """A request, and how many stream events the client reads before it goes (-1: all)."""
    route = draw(st.sampled_from(["completions", "chat", "chat", "embeddings", "models", "model", "other"]))
    method = "POST" if route in ("completions", "chat", "embeddings") else "GET"
    if draw(st.integers(0, 9)) == 0:
        method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD"]))
    path, body = {
        "completions": ("/v1/completions", None),
        "chat": ("/v1/chat/completions", None),
        "embeddings": ("/v1/embeddings", draw(embedding_body())),
        "models": ("/v1/models", b""),
        "model": ("/v1/models/" + draw(st.sampled_from([*MODELS, "absent", "..", "%2e%2e", "a/b"])), b""),
        "other": (draw(st.sampled_from(["/v1", "/v1/", "/health/ready", "/metrics", "/v1/embeddings"])), b""),
    }[route]
    if body is None:
        body = draw(completion_body(route == "chat"))
    headers = {"content-type": "application/json", "content-length": str(len(body))}
    reads = draw(st.sampled_from([-1, -1, 0, 1, 2]))
    return HttpRequest(method, path, "", headers, body), reads


# -- what the server answered ---------------------------------------------------------------------


def _error_shape(body: bytes) -> None:
    error = orjson.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] in ("invalid_request_error", "authentication_error", "permission_error")
    assert error["param"] is None or isinstance(error["param"], str)
    assert error["code"] is None or isinstance(error["code"], str)


def _completion_shape(body: bytes, chat: bool) -> None:
    document = orjson.loads(body)
    assert document["object"] == ("chat.completion" if chat else "text_completion")
    (choice,) = document["choices"]
    text = choice["message"]["content"] if chat else choice["text"]
    assert isinstance(text, str)
    assert choice["finish_reason"] in ("stop", "length")


def _stream_shape(events: list[bytes], chat: bool) -> None:
    assert events[-1] == b"data: [DONE]\n\n", events[-1:]
    assert b"data: [DONE]\n\n" not in events[:-1]
    for event in events[:-1]:
        assert event.startswith(b"data: ") and event.endswith(b"\n\n"), event
        document = orjson.loads(event[len(b"data: ") : -2])
        if "error" in document:
            _error_shape(event[len(b"data: ") : -2])
            continue
        assert document["object"] == ("chat.completion.chunk" if chat else "text_completion")
        assert len(document["choices"]) <= 1


# -- the property ---------------------------------------------------------------------------------

LOOP = asyncio.new_event_loop()


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAIApp]:
    repo = tmp_path_factory.mktemp("repo")
    write_simple(repo)
    write_python_model(repo, "echo", ECHO, ECHO_CONFIG)
    write_python_model(repo, "echo_parameters", ECHO, ECHO_PARAMETERS_CONFIG)
    shutil.copytree(ROOT / "model_repository" / "tiny_embedding", repo / "tiny_embedding")
    # Both render chats with tiny_llm's template; echo also counts tokens with its tokenizer.
    tiny_llm = ROOT / "model_repository" / "tiny_llm" / "1"
    for model, names in (
        ("echo", ("tokenizer.json", "tokenizer_config.json")),
        ("echo_parameters", ("tokenizer_config.json",)),
    ):
        for name in names:
            shutil.copyfile(tiny_llm / name, repo / model / "1" / name)
    with core_on(LOOP, repo, *MODELS) as core:
        app = OpenAIApp(core, OpenAIOptions(default_max_tokens=3))
        # The token counting process and the task reading its answers serve every request: started
        # here, so that what each request leaves running is its own work alone.
        LOOP.run_until_complete(app.token_counter.start())
        yield app
        LOOP.run_until_complete(app.aclose())


async def _answer(app: OpenAIApp, request: HttpRequest, reads: int) -> None:
    async with nothing_left_running():
        response = await asyncio.wait_for(app(request), 10)
        assert response.status in STATUSES, (response.status, response.body[:300])
        note_event(f"{request.path}: {response.status}{' streamed' if response.stream is not None else ''}")
        chat = request.path == "/v1/chat/completions"
        if response.status != 200:
            _error_shape(response.body)
        elif response.stream is not None:
            events = await asyncio.wait_for(stream_events(response.stream, reads), 10)
            if events is not None:
                _stream_shape(events, chat)
        elif request.path in ("/v1/completions", "/v1/chat/completions"):
            _completion_shape(response.body, chat)
        elif request.path == "/v1/embeddings":
            _embeddings_shape(response.body)


@given(openai_request())
def test_any_openai_request_is_answered_in_openai_shape_and_leaves_nothing_running(
    app: OpenAIApp, drawn: tuple[HttpRequest, int]
) -> None:
    request, reads = drawn
    LOOP.run_until_complete(_answer(app, request, reads))


def test_the_models_answer_after_any_requests(app: OpenAIApp) -> None:
    """After the drawn requests (in this module's order), both echo models still serve."""
    for model in ("echo", "echo_parameters"):
        body = orjson.dumps({"model": model, "prompt": "one two", "max_tokens": 2})
        request = HttpRequest("POST", "/v1/completions", "", {}, body)
        response = LOOP.run_until_complete(app(request))
        assert response.status == 200, response.body
        assert orjson.loads(response.body)["choices"][0]["text"] == "one two"
