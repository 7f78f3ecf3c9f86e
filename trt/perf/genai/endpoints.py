"""What each endpoint type sends and how its answers carry text.

- ``chat`` / ``completions``: OpenAI's request bodies; a streamed answer is server-sent events of
  ``chat.completion.chunk`` (``choices[0].delta.content``) or ``text_completion`` (``choices[0].text``)
  objects ending with ``data: [DONE]``; an unstreamed one a ``chat.completion`` / ``text_completion``.
- ``generate``: Triton's generate extension with the vLLM backend's inputs (``text_input``, ``stream``,
  ``sampling_parameters`` as a JSON string, ``exclude_input_in_output``); each event's ``text_output``.
- ``kserve``: the same tensors over gRPC ``ModelStreamInfer`` (``perf.genai.grpc_stream``).
- ``embeddings``: OpenAI's ``/v1/embeddings`` with one text a request, or a list of ``--batch-size-text``
  texts; the answer must hold one vector per text.

genai-perf asks for an output length with ``max_tokens`` (and ``min_tokens`` when it must be exact);
so does trt perf, with vLLM's ``ignore_eos`` beside ``min_tokens`` for the OpenAI routes."""

from __future__ import annotations

import json
from typing import Any

import orjson

from trt.perf.genai.options import EndpointType, GenAIOptions
from trt.perf.genai.prompts import Prompt
from trt.perf.transport import RequestFailed

DONE = "[DONE]"


def sampling_parameters(options: GenAIOptions, prompt: Prompt) -> dict[str, Any]:
    parameters: dict[str, Any] = {}
    if prompt.max_tokens:
        parameters["max_tokens"] = prompt.max_tokens
        if options.output_tokens_deterministic:
            parameters["min_tokens"] = prompt.max_tokens
    return parameters


def http_body(options: GenAIOptions, prompt: Prompt) -> bytes:
    extra = dict(options.extra_inputs)
    if options.endpoint_type is EndpointType.GENERATE:
        parameters = {**sampling_parameters(options, prompt), **extra}
        document: dict[str, Any] = {"text_input": prompt.text, "stream": options.streaming}
        document["exclude_input_in_output"] = True
        if parameters:
            document["sampling_parameters"] = json.dumps(parameters)
        return orjson.dumps(document)
    if options.endpoint_type is EndpointType.EMBEDDINGS:
        texts: str | list[str] = list(prompt.batch) if prompt.batch else prompt.text
        return orjson.dumps({"model": options.model, "input": texts, **extra})
    body: dict[str, Any] = {"model": options.model, "stream": options.streaming}
    if options.endpoint_type is EndpointType.CHAT:
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text
    if prompt.max_tokens:
        body["max_tokens"] = prompt.max_tokens
        if options.output_tokens_deterministic:
            body["min_tokens"] = prompt.max_tokens
            body["ignore_eos"] = True
    body.update(extra)
    return orjson.dumps(body)


def _error_text(document: Any) -> str | None:
    if isinstance(document, dict) and "error" in document:
        error = document["error"]
        if isinstance(error, dict):
            return str(error.get("message") or error)
        return str(error)
    return None


def text_of(endpoint_type: EndpointType, document: Any) -> str:
    """The generated text one answer (an event's JSON, or a whole unstreamed body) carries."""
    problem = _error_text(document)
    if problem is not None:
        raise RequestFailed(problem)
    if not isinstance(document, dict):
        raise RequestFailed(f"expected a JSON object, got {type(document).__name__}")
    if endpoint_type is EndpointType.GENERATE:
        value = document.get("text_output", "")
        return "".join(value) if isinstance(value, list) else str(value or "")
    choices = document.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""  # e.g. the usage-only chunk OpenAI sends last when asked for it
    choice = choices[0]
    if endpoint_type is EndpointType.CHAT:
        message = choice.get("delta") if "delta" in choice else choice.get("message")
        return str((message or {}).get("content") or "")
    return str(choice.get("text") or "")


def event_text(endpoint_type: EndpointType, data: str) -> str | None:
    """The text of one server-sent event's data; None for OpenAI's closing ``[DONE]``."""
    if data.strip() == DONE:
        return None
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise RequestFailed(f"an event that is not JSON: {data[:120]!r}") from None
    return text_of(endpoint_type, document)


def check_embeddings(body: bytes, texts: int = 1) -> None:
    """An embeddings answer holds one vector (a list of numbers, or base64 text) per text sent; else
    RequestFailed."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise RequestFailed(f"an answer that is not JSON: {body[:120]!r}") from None
    problem = _error_text(document)
    if problem is not None:
        raise RequestFailed(problem)
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list) or len(data) != texts:
        count = len(data) if isinstance(data, list) else "no list of"
        raise RequestFailed(f"an embeddings answer with {count} items in 'data' for {texts} texts")
    for item in data:
        vector = item.get("embedding") if isinstance(item, dict) else None
        if not (isinstance(vector, str) and vector) and not (isinstance(vector, list) and vector):
            raise RequestFailed("an embeddings answer whose item has no 'embedding'")


def body_text(endpoint_type: EndpointType, body: bytes) -> str:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise RequestFailed(f"an answer that is not JSON: {body[:120]!r}") from None
    return text_of(endpoint_type, document)


def error_message(status: int, body: bytes) -> str:
    """A non-2xx answer, in the server's words where it gave them (OpenAI's or Triton's error shape)."""
    try:
        problem = _error_text(orjson.loads(body))
    except orjson.JSONDecodeError:
        problem = None
    return f"HTTP {status}: {problem or body[:200].decode('utf-8', 'replace')}"
