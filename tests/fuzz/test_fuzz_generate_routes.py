"""Any request to Triton's generate extension (``/generate`` and ``/generate_stream``): it is answered,
never with an exception or a 5xx; an error is ``{"error": text}``; a response is one flat JSON object
naming the model; a stream is server-sent events of such objects (or one error event), whole or
left early by the client; and nothing the request started is left running.

The client is hypothesis: flat JSON bodies drawn from valid ones, with inputs given as every JSON
type and nesting (text where numbers go, numbers where text goes, ragged lists, objects), request
parameters of every type, ``id`` and ``parameters`` of the wrong type, keys no model has, and bytes
changed. The server is trt's HTTP app in front of a real core serving two Python models (one answer
a request; up to three a request, decoupled) and the ONNX ``simple`` model (INT32 [1, 16] inputs).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.fuzz.connection_harness import core_on, nothing_left_running, stream_events
from tests.support import write_python_model, write_simple
from trt.server.http.app import HttpApp
from trt.server.http.messages import HttpRequest

# Both take any text and never fail on it: what they send back is the prompt, so a 5xx can only be
# the server's own.
ECHO = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)
            first = text[0].decode("utf-8", "replace") if text.size else ""
            out = pb_utils.Tensor("text_output", np.array([first.encode()], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""
ECHO_CONFIG = """
backend: "python"
input [ { name: "text_input" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
PIECES = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)
            words = (text[0].decode("utf-8", "replace") if text.size else "").split()[:3] or ["..."]
            for index, word in enumerate(words):
                out = pb_utils.Tensor("text_output", np.array([word.encode()], dtype=np.object_))
                final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if index == len(words) - 1 else 0
                sender.send(pb_utils.InferenceResponse([out]), final)
        return None
"""
PIECES_CONFIG = """
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
MODELS = ("echo", "pieces", "simple")
STATUSES = {200, 400, 404, 405}

# -- what the client sends ------------------------------------------------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**65), 2**65),
    st.sampled_from([0, 1, -1, 2**31, 2**63 - 1, 2**64 - 1, 2**64]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
JSON_VALUES = st.one_of(
    _SCALARS,
    st.recursive(
        _SCALARS,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=10,
    ),
)
_INPUT_VALUES = {  # what each model's inputs are likely to meet, valid and not
    "text_input": st.one_of(
        st.text(max_size=20),
        st.lists(st.text(max_size=5), max_size=3),
        st.just([["a", "b"], ["c"]]),
        JSON_VALUES,
    ),
    "INPUT0": st.one_of(
        st.just([list(range(16))]),
        st.lists(
            st.sampled_from([0, 1, -(2**31) - 1, 2**31, 2**64, 1.5, True]), min_size=16, max_size=16
        ).map(lambda row: [row]),
        st.lists(st.integers(-(2**40), 2**40), max_size=17),
        JSON_VALUES,
    ),
    "INPUT1": st.one_of(st.just([[1] * 16]), st.lists(st.text(max_size=2), max_size=16), JSON_VALUES),
}


@st.composite
def generate_body(draw: st.DrawFn, model: str) -> bytes:
    document: dict[str, Any] = (
        {"INPUT0": [list(range(16))], "INPUT1": [[1] * 16]}
        if model == "simple"
        else {"text_input": "one two"}
    )
    for name in draw(st.lists(st.sampled_from([*_INPUT_VALUES, "id", "parameters", "other"]), max_size=3)):
        if name in _INPUT_VALUES and draw(st.booleans()):
            document[name] = draw(_INPUT_VALUES[name])
        elif name == "parameters" and draw(st.booleans()):
            document[name] = draw(st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=3))
        elif draw(st.integers(0, 3)) == 0:
            document.pop(name, None)
        else:
            document[name] = draw(JSON_VALUES)
    try:
        body = json.dumps(document).encode()
    except ValueError:
        body = b"{}"
    change = draw(st.sampled_from(["none"] * 12 + ["truncate", "flip", "replace"]))
    if change == "truncate":
        body = body[: draw(st.integers(0, len(body)))]
    elif change == "flip":
        data = bytearray(body)
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        body = bytes(data)
    elif change == "replace":
        body = draw(st.sampled_from([b"", b"[]", b"null", b"1e400", b'{"text_input": "a"}' * 2]))
    return body


@st.composite
def generate_request(draw: st.DrawFn) -> tuple[HttpRequest, int]:
    """A request, and how many events of a stream the client reads before it goes (-1: all)."""
    model = draw(st.sampled_from(MODELS))
    route = draw(st.sampled_from(["generate", "generate_stream"]))
    version = draw(st.sampled_from(["", "", "", "/versions/1", "/versions/2"]))
    method = draw(st.sampled_from(["POST"] * 6 + ["GET"]))
    body = draw(generate_body(model))
    path = f"/v2/models/{draw(st.sampled_from([model] * 5 + ['absent']))}{version}/{route}"
    headers = {"content-type": "application/json", "content-length": str(len(body))}
    return HttpRequest(method, path, "", headers, body), draw(st.sampled_from([-1, -1, 0, 1]))


# -- what the server answered ---------------------------------------------------------------------


def _object(data: bytes) -> dict[str, Any]:
    document = json.loads(data)
    assert isinstance(document, dict), document
    if "error" in document:
        assert set(document) == {"error"} and isinstance(document["error"], str) and document["error"]
    else:
        assert document["model_name"] in MODELS and isinstance(document["model_version"], str), document
    return document


# -- the property ---------------------------------------------------------------------------------

LOOP = asyncio.new_event_loop()


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpApp]:
    repo = tmp_path_factory.mktemp("repo")
    write_simple(repo)
    write_python_model(repo, "echo", ECHO, ECHO_CONFIG)
    write_python_model(repo, "pieces", PIECES, PIECES_CONFIG)
    with core_on(LOOP, repo, *MODELS) as core:
        yield HttpApp(core)


async def _answer(app: HttpApp, request: HttpRequest, reads: int) -> None:
    async with nothing_left_running():
        response = await asyncio.wait_for(app(request), 10)
        assert response.status in STATUSES, (response.status, response.body[:300])
        event(f"{request.path.rsplit('/', 1)[1]}: {response.status}{' (stream)' if response.stream else ''}")
        if response.stream is None:
            _object(response.body)
        else:
            events = await asyncio.wait_for(stream_events(response.stream, reads), 10)
            for piece in events or []:
                assert piece.startswith(b"data: ") and piece.endswith(b"\n\n"), piece
                _object(piece[len(b"data: ") : -2])


@given(generate_request())
def test_any_generate_request_is_answered_without_a_5xx_and_leaves_nothing_running(
    app: HttpApp, drawn: tuple[HttpRequest, int]
) -> None:
    request, reads = drawn
    LOOP.run_until_complete(_answer(app, request, reads))
