"""``/v1/embeddings``: texts or token ids in, vectors out, through the I/O contract of Triton's vLLM
backend for embeddings, as Triton's front end drives it.

The model takes ``embedding_request``, a JSON object ``{"input": ..., "pooling_params": {...}}``
(``"dimensions": [d]`` when the client asks for ``d``), and the ``return_num_input_tokens`` /
``return_num_output_tokens`` flags where it declares them; it answers ``text_output``, the vector as a
JSON list of numbers, and ``num_input_tokens``. Triton's front end takes one input per request; OpenAI's
API, and so this one, also takes a list, each item one inference (at most ``MAX_IN_FLIGHT`` at once),
answered in the client's order.
"""

from __future__ import annotations

import asyncio
import base64
import math
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from trt.protos import model_config_pb2
from trt.server.core.server import InferenceServer
from trt.server.core.types import InferenceRequest
from trt.server.http.messages import HttpResponse
from trt.server.openai.errors import OpenAIError, invalid
from trt.server.openai.generation import TEXT_OUTPUT, contract_tensor, generate
from trt.server.openai.schemas import EmbeddingRequest
from trt.server.openai.tokenizer import ModelTokenizer

EMBEDDING_INPUT = "embedding_request"
_FLAGS = ("return_num_input_tokens", "return_num_output_tokens")
MAX_IN_FLIGHT = 64  # one request's items in the model's queue at once: a long list must not crowd out others
_JSON_HEADERS = [(b"content-type", b"application/json")]


@dataclass(frozen=True, slots=True)
class EmbeddingContract:
    """What a model declares of the vLLM backend's embedding inputs."""

    model: str
    inputs: frozenset[str]
    batched: bool

    @classmethod
    def of(cls, model: str, config: model_config_pb2.ModelConfig) -> EmbeddingContract:
        inputs = frozenset(tensor.name for tensor in config.input)
        if EMBEDDING_INPUT not in inputs or TEXT_OUTPUT not in {tensor.name for tensor in config.output}:
            raise invalid(
                f"model '{model}' does not embed: /v1/embeddings needs a model with the vLLM backend's "
                f"'{EMBEDDING_INPUT}' input and '{TEXT_OUTPUT}' output",
                "model",
                "model_not_supported",
            )
        return cls(model, inputs, config.max_batch_size > 0)

    def request(self, item: str | tuple[int, ...], dimensions: int | None) -> InferenceRequest:
        pooling = {"dimensions": [dimensions]} if dimensions is not None else {}
        document = {"input": item if isinstance(item, str) else list(item), "pooling_params": pooling}
        data = np.array([orjson.dumps(document)], dtype=np.object_)
        tensors = [contract_tensor(EMBEDDING_INPUT, data, self.batched)]
        for flag in _FLAGS:
            if flag in self.inputs:
                tensors.append(contract_tensor(flag, np.array([True], dtype=np.bool_), self.batched))
        return InferenceRequest(self.model, "", f"embd-{uuid.uuid4().hex}", tensors, None, {})


@dataclass(frozen=True, slots=True)
class _Embedded:
    vector: list[float]
    prompt_tokens: int | None


async def answer(
    core: InferenceServer, contract: EmbeddingContract, request: EmbeddingRequest, tokenizer: ModelTokenizer
) -> HttpResponse:
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def embed(item: str | tuple[int, ...]) -> _Embedded:
        async with gate:
            return await _embed(core, contract, item, request.dimensions)

    # Every item runs to its end before an error is answered, so none is left running unobserved.
    results = await asyncio.gather(*(embed(item) for item in request.inputs), return_exceptions=True)
    data, counts = [], []
    for index, (item, result) in enumerate(zip(request.inputs, results, strict=True)):
        if isinstance(result, BaseException):
            raise result
        data.append(
            {"object": "embedding", "index": index, "embedding": _encoded(result.vector, request.base64)}
        )
        counts.append(await _prompt_tokens(item, result, tokenizer))
    usage = None
    if all(count is not None for count in counts):
        total = sum(count for count in counts if count is not None)
        usage = {"prompt_tokens": total, "total_tokens": total}
    body = {"object": "list", "data": data, "model": request.model, "usage": usage}
    return HttpResponse(200, orjson.dumps(body), _JSON_HEADERS)


async def _embed(
    core: InferenceServer, contract: EmbeddingContract, item: str | tuple[int, ...], dimensions: int | None
) -> _Embedded:
    texts, prompt_tokens = [], None
    async for generated in generate(core, contract.request(item, dimensions)):
        texts.append(generated.text)
        if prompt_tokens is None:
            prompt_tokens = generated.prompt_tokens
    vector = _vector(contract.model, "".join(texts))
    if dimensions is not None and len(vector) != dimensions:
        raise invalid(
            f"model '{contract.model}' answered {len(vector)} dimensions where {dimensions} were asked: "
            "it does not shorten its embeddings",
            "dimensions",
        )
    return _Embedded(vector, prompt_tokens)


def _vector(model: str, text: str) -> list[float]:
    """The model's text_output read as a vector: a non-empty JSON list of finite numbers."""
    try:
        vector: Any = orjson.loads(text)
    except orjson.JSONDecodeError:
        vector = None
    if (
        not isinstance(vector, list)
        or not vector
        or not all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in vector
        )
    ):
        raise OpenAIError(500, f"model '{model}' answered a {TEXT_OUTPUT} that is not a JSON list of numbers")
    return [float(x) for x in vector]


def _encoded(vector: list[float], as_base64: bool) -> list[float] | str:
    if not as_base64:
        return vector
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


async def _prompt_tokens(
    item: str | tuple[int, ...], result: _Embedded, tokenizer: ModelTokenizer
) -> int | None:
    """The model's count; else the count of the token ids given; else the tokenizer's; else none."""
    if result.prompt_tokens is not None:
        return result.prompt_tokens
    if not isinstance(item, str):
        return len(item)
    return await tokenizer.count(item, with_special_tokens=True)
