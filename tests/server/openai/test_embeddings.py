"""/v1/embeddings over the example repository's tiny_embedding (the vLLM backend's embedding contract),
with the official client and as raw HTTP: the four input forms, both encodings, dimensions, token
usage, and the refusals in OpenAI's error shape."""

from __future__ import annotations

import base64
import http.client
from typing import Any

import numpy as np
import openai
import orjson
import pytest

from tests.server.openai.conftest import OpenAIServer
from tests.support import ROOT, ServerProcess, free_port

MODEL = "tiny_embedding"
DIMENSIONS = 64  # tiny_embedding's config


def post(server: OpenAIServer, body: object, method: str = "POST") -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.request(method, "/v1/embeddings", orjson.dumps(body), {"content-type": "application/json"})
        reply = connection.getresponse()
        return reply.status, orjson.loads(reply.read())
    finally:
        connection.close()


def vectors(reply: dict[str, Any]) -> list[np.ndarray]:
    assert reply["object"] == "list" and reply["model"] in (MODEL, "embedding_echo")
    assert [item["index"] for item in reply["data"]] == list(range(len(reply["data"])))
    assert all(item["object"] == "embedding" for item in reply["data"])
    return [np.array(item["embedding"], dtype=np.float64) for item in reply["data"]]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_the_official_client_embeds_a_list_of_texts_in_order(client: openai.OpenAI) -> None:
    texts = ["the cat sat on the mat", "a cat sat on a mat", "stock prices fell sharply"]
    # The client asks for base64 unless told otherwise, and decodes it.
    reply = client.embeddings.create(model=MODEL, input=texts)
    got = [np.array(item.embedding) for item in reply.data]
    assert [item.index for item in reply.data] == [0, 1, 2]
    assert all(vector.shape == (DIMENSIONS,) for vector in got)
    assert np.allclose([np.linalg.norm(vector) for vector in got], 1.0, atol=1e-5)
    # Texts that share words point closer together than texts that share none.
    assert cosine(got[0], got[1]) > cosine(got[0], got[2]) + 0.1
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == 6 + 6 + 4  # the model's own counts
    as_floats = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    assert np.allclose([item.embedding for item in as_floats.data], got, atol=1e-7)


def test_each_input_form_is_embedded_on_its_own(openai_server: OpenAIServer) -> None:
    ids = [17, 4095, 4096 + 17, 2**31 - 1]
    status, reply = post(openai_server, {"model": MODEL, "input": "Hello, world"})
    assert status == 200, reply
    (one,) = vectors(reply)
    status, reply = post(openai_server, {"model": MODEL, "input": ["Hello, world", "hello , WORLD"]})
    assert status == 200, reply
    again, same_words = vectors(reply)
    assert np.array_equal(one, again) and np.allclose(one, same_words)  # words are lower-cased
    status, reply = post(openai_server, {"model": MODEL, "input": ids})
    assert status == 200, reply
    (by_ids,) = vectors(reply)
    assert reply["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
    status, reply = post(openai_server, {"model": MODEL, "input": [ids, ids[:1], [17, 17]]})
    assert status == 200, reply
    twice, first, first_twice = vectors(reply)
    assert np.array_equal(by_ids, twice) and np.allclose(first, first_twice)  # ids modulo the vocabulary
    assert not np.allclose(by_ids, first)


def test_dimensions_give_a_shorter_vector_of_length_one(openai_server: OpenAIServer) -> None:
    status, reply = post(
        openai_server, {"model": MODEL, "input": "short vectors", "encoding_format": "float"}
    )
    (full,) = vectors(reply)
    status, reply = post(openai_server, {"model": MODEL, "input": "short vectors", "dimensions": 8})
    assert status == 200, reply
    (short,) = vectors(reply)
    assert short.shape == (8,)
    assert np.allclose(short, full[:8] / np.linalg.norm(full[:8]), atol=1e-6)
    status, reply = post(
        openai_server, {"model": MODEL, "input": "b64", "dimensions": 5, "encoding_format": "base64"}
    )
    decoded = np.frombuffer(base64.b64decode(reply["data"][0]["embedding"]), dtype="<f4")
    assert decoded.shape == (5,) and abs(np.linalg.norm(decoded) - 1.0) < 1e-5


@pytest.mark.parametrize(
    ("body", "status", "param", "message"),
    [
        ({"input": "x"}, 400, "model", "model must be a non-empty string"),
        ({"model": MODEL}, 400, "input", "input must be a non-empty string or list of token ids"),
        ({"model": MODEL, "input": ""}, 400, "input", "input must be a non-empty string"),
        ({"model": MODEL, "input": []}, 400, "input", "input must be a non-empty string or list"),
        ({"model": MODEL, "input": [[]]}, 400, "input", "input[0] must be a non-empty string"),
        ({"model": MODEL, "input": ["a", ""]}, 400, "input", "input[1] must be a non-empty string"),
        ({"model": MODEL, "input": [1.5]}, 400, "input", "input[0] must be"),
        ({"model": MODEL, "input": [[1, -1]]}, 400, "input", "input[0] must be"),
        ({"model": MODEL, "input": [2**31]}, 400, "input", "input[0] must be"),
        ({"model": MODEL, "input": 123}, 400, "input", "input must be"),
        ({"model": MODEL, "input": ["a"] * 2049}, 400, "input", "input takes at most 2048 items, got 2049"),
        (
            {"model": MODEL, "input": "x", "encoding_format": "hex"},
            400,
            "encoding_format",
            "encoding_format must",
        ),
        ({"model": MODEL, "input": "x", "dimensions": 0}, 400, "dimensions", "dimensions must be between 1"),
        (
            {"model": MODEL, "input": "x", "dimensions": "8"},
            400,
            "dimensions",
            "dimensions must be an integer",
        ),
        ({"model": MODEL, "input": "x", "pooling": 1}, 400, "pooling", "Unrecognized request argument"),
        ({"model": "simple", "input": "x"}, 400, "model", "model 'simple' does not embed"),
        ({"model": "tiny_llm", "input": "x"}, 400, "model", "model 'tiny_llm' does not embed"),
        ({"model": "no_such_model", "input": "x"}, 404, "model", "The model `no_such_model` does not exist."),
        # The model's own refusal (INVALID_ARG), with the status it carries.
        (
            {"model": MODEL, "input": "x", "dimensions": 65},
            400,
            None,
            "dimensions must be from 1 to 64, got 65",
        ),
        ({"model": MODEL, "input": " \n "}, 400, None, "the input has no tokens"),
    ],
)
def test_refusals_name_the_field(
    openai_server: OpenAIServer, body: dict[str, Any], status: int, param: str | None, message: str
) -> None:
    got, reply = post(openai_server, body)
    assert got == status, reply
    assert reply["error"]["param"] == param
    assert message in reply["error"]["message"]


def test_only_post_is_allowed(openai_server: OpenAIServer) -> None:
    status, reply = post(openai_server, {}, method="GET")
    assert status == 405 and reply["error"]["code"] == "method_not_allowed"


def test_a_model_without_token_counts_or_shorter_vectors(openai_server: OpenAIServer) -> None:
    """embedding_echo reports no counts: token ids count themselves, a text without a tokenizer leaves
    usage out rather than guess; a model that ignores dimensions is refused, and so is what is not a
    vector."""
    status, reply = post(openai_server, {"model": "embedding_echo", "input": [[5, 6, 7], [8]]})
    assert status == 200, reply
    assert [vector.tolist() for vector in vectors(reply)] == [[3.0, 1.0, 0.0], [1.0, 1.0, 0.0]]
    assert reply["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
    status, reply = post(openai_server, {"model": "embedding_echo", "input": ["four", [1]]})
    assert status == 200 and reply["usage"] is None
    status, reply = post(openai_server, {"model": "embedding_echo", "input": "x", "dimensions": 2})
    assert status == 400 and reply["error"]["param"] == "dimensions"
    assert "answered 3 dimensions where 2 were asked" in reply["error"]["message"]
    status, reply = post(openai_server, {"model": "embedding_echo", "input": ["fine", "garbage"]})
    assert status == 500
    assert (
        reply["error"]["message"]
        == "model 'embedding_echo' answered a text_output that is not a JSON list of numbers"
    )


def test_embeddings_are_inference_for_the_restricted_api(tmp_path: Any) -> None:
    port = free_port()
    process = ServerProcess(
        [ROOT / "model_repository"],
        [
            "--model-control-mode=explicit",
            f"--load-model={MODEL}",
            "--allow-openai=true",
            "--openai-address=127.0.0.1",
            f"--openai-port={port}",
            "--openai-restricted-api=inference:infer-key=open",
        ],
    ).start(tmp_path)
    try:
        server = OpenAIServer(process, port)
        status, reply = post(server, {"model": MODEL, "input": "x"})
        assert status == 401 and "expecting header 'infer-key'" in reply["error"]["message"]
        key = {"infer-key": "open"}
        reply = server.client(default_headers=key).embeddings.create(model=MODEL, input="x")
        assert len(reply.data[0].embedding) == DIMENSIONS
    finally:
        process.stop()
