"""The bodies of ``/v1/completions``, ``/v1/chat/completions`` and ``/v1/embeddings``, read and checked
into dataclasses.

Fields follow OpenAI's API reference and Triton's front end: what the model cannot do (several
choices, logprobs, logit_bias, tools) is refused with 400 naming the field, as Triton does, and a
field OpenAI does not define is refused as OpenAI refuses it. Sampling settings keep vLLM's names,
since they go to the model as its ``sampling_parameters`` input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

from trt.server.core.errors import quoted
from trt.server.openai.errors import invalid

MAX_STOP_SEQUENCES = 16  # OpenAI allows 4; vLLM any number. Bounded: each is searched after every token.
MAX_STOP_LENGTH = 1024
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# Accepted and not acted on: they change nothing a model here computes.
_IGNORED = ("user", "metadata", "store", "service_tier", "parallel_tool_calls")
MAX_EMBEDDING_INPUTS = 2048  # OpenAI's limit of inputs in one embeddings request
MAX_TOKEN_ID = 2**31 - 1


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    model: str
    prompt: str
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the token counts
    echo: bool  # the prompt leads the text
    sampling: dict[str, Any]  # the model's sampling_parameters, max_tokens always set


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: tuple[ChatMessage, ...]
    stream: bool
    include_usage: bool
    sampling: dict[str, Any]


def parse_completion(body: bytes, default_max_tokens: int) -> CompletionRequest:
    fields = _Fields(_document(body))
    model = fields.text("model", required=True)
    prompt = fields.take("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]  # one prompt in a list is still one prompt
    if not prompt:
        raise invalid("prompt must be non-empty", "prompt")
    if not isinstance(prompt, str):  # several prompts, or token ids
        raise invalid("only single string input is supported", "prompt")
    fields.refuse_if_set("suffix", "suffix is not currently supported")
    best_of = fields.integer("best_of", 0, 20)
    if best_of is not None and best_of > 1:
        wrong = f"Received best_of={best_of}, but only single choice (best_of=1) is currently supported"
        raise invalid(wrong, "best_of")
    logprobs = fields.integer("logprobs", 0, 5)
    if logprobs:
        raise invalid("logprobs are not supported", "logprobs")
    echo = fields.boolean("echo") or False
    stream, include_usage = _streaming(fields)
    max_tokens = fields.integer("max_tokens", 0)
    fields.refuse_if_set("logit_bias", "logit bias is not supported")  # Triton's words, for each route
    sampling = _sampling(fields, max_tokens if max_tokens is not None else default_max_tokens)
    fields.finish()
    return CompletionRequest(model, prompt, stream, include_usage, echo, sampling)


def parse_chat(body: bytes, default_max_tokens: int) -> ChatRequest:
    fields = _Fields(_document(body))
    model = fields.text("model", required=True)
    messages = fields.take("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages must be a non-empty list of messages", "messages")
    parsed = tuple(_message(index, message) for index, message in enumerate(messages))
    if fields.boolean("logprobs"):
        raise invalid("logprobs are not supported", "logprobs")
    fields.refuse_if_set("top_logprobs", "top_logprobs are not supported")
    for name in ("tools", "functions", "function_call"):
        fields.refuse_if_set(name, f"{name}: tool calling is not supported")
    tool_choice = fields.take("tool_choice")
    if tool_choice not in (None, "none"):
        raise invalid("tool_choice: tool calling is not supported", "tool_choice")
    response_format = fields.take("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise invalid("response_format: only {'type': 'text'} is supported", "response_format")
    stream, include_usage = _streaming(fields)
    max_tokens = fields.integer("max_completion_tokens", 0)
    deprecated_max_tokens = fields.integer("max_tokens", 0)  # OpenAI's older name, still sent
    limit = max_tokens if max_tokens is not None else deprecated_max_tokens
    fields.refuse_if_set("logit_bias", "logit bias is not currently supported")
    sampling = _sampling(fields, limit if limit is not None else default_max_tokens)
    fields.finish()
    return ChatRequest(model, parsed, stream, include_usage, sampling)


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    model: str
    inputs: tuple[str | tuple[int, ...], ...]  # texts or token ids, each embedded on its own
    dimensions: int | None
    base64: bool  # encoding_format "base64": each vector's float32 bytes, base64-encoded


def parse_embedding(body: bytes) -> EmbeddingRequest:
    fields = _Fields(_document(body))
    model = fields.text("model", required=True)
    inputs = _embedding_inputs(fields.take("input"))
    dimensions = fields.integer("dimensions", 1, 1 << 16)
    encoding = fields.take("encoding_format")
    if encoding not in (None, "float", "base64"):
        wrong = f"encoding_format must be 'float' or 'base64', got {quoted(encoding)}"
        raise invalid(wrong, "encoding_format")
    fields.take("user")
    fields.finish()
    return EmbeddingRequest(model, inputs, dimensions, encoding == "base64")


def _embedding_inputs(value: object) -> tuple[str | tuple[int, ...], ...]:
    """OpenAI's four forms: a text, token ids, or a list of either."""
    if isinstance(value, str) or (isinstance(value, list) and value and all(map(_is_token, value))):
        items: list[object] = [value]
    elif isinstance(value, list) and value:
        items = value
    else:
        raise invalid(
            "input must be a non-empty string or list of token ids, or a non-empty list of either", "input"
        )
    if len(items) > MAX_EMBEDDING_INPUTS:
        raise invalid(f"input takes at most {MAX_EMBEDDING_INPUTS} items, got {len(items)}", "input")
    inputs: list[str | tuple[int, ...]] = []
    for item in items:
        if isinstance(item, str) and item:
            inputs.append(item)
        elif isinstance(item, list) and item and all(map(_is_token, item)):
            inputs.append(tuple(item))
        else:
            where = f"input[{len(inputs)}]" if len(items) > 1 or value is not item else "input"
            raise invalid(
                f"{where} must be a non-empty string or a non-empty list of token ids (0 to {MAX_TOKEN_ID})",
                "input",
            )
    return tuple(inputs)


def _is_token(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_TOKEN_ID


def _document(body: bytes) -> dict[str, Any]:
    if not body.strip():
        raise invalid("the request body is empty; expected a JSON object", code=None)
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid(f"the request body is not valid JSON: {exc}", code=None) from None
    if not isinstance(document, dict):
        raise invalid("the request body must be a JSON object", code=None)
    return document


def _streaming(fields: _Fields) -> tuple[bool, bool]:
    stream = fields.boolean("stream") or False
    options = fields.take("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise invalid("`stream_options` can only be used when `stream` is True", "stream_options")
    if not isinstance(options, dict) or set(options) - {"include_usage"}:
        raise invalid("stream_options takes one field, include_usage", "stream_options")
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise invalid("stream_options.include_usage must be true or false", "stream_options")
    return stream, include_usage


def _sampling(fields: _Fields, max_tokens: int) -> dict[str, Any]:
    """The sampling fields the client set, by vLLM's names, and ``max_tokens``."""
    sampling: dict[str, Any] = {"max_tokens": max_tokens}
    n = fields.integer("n", 1, 128)
    if n is not None and n > 1:
        raise invalid(f"Received n={n}, but only single choice (n=1) is currently supported", "n")
    for name, low, high in (
        ("temperature", 0.0, 2.0),
        ("top_p", 0.0, 1.0),
        ("frequency_penalty", -2.0, 2.0),
        ("presence_penalty", -2.0, 2.0),
    ):
        value = fields.number(name, low, high)
        if value is not None:
            sampling[name] = value
    seed = fields.integer("seed", -(2**63), 2**63 - 1)
    if seed is not None:
        sampling["seed"] = seed
    stop = _stop(fields.take("stop"))
    if stop:
        sampling["stop"] = stop
    ignore_eos = fields.boolean("ignore_eos")  # this and min_tokens: Triton's extensions
    if ignore_eos is not None:
        sampling["ignore_eos"] = ignore_eos
    min_tokens = fields.integer("min_tokens", 0)
    if min_tokens is not None:
        sampling["min_tokens"] = min_tokens
    for name in _IGNORED:
        fields.take(name)
    return sampling


def _stop(value: object) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(stop, str) for stop in stops):
        raise invalid("stop must be a string or a list of strings", "stop")
    stops = [stop for stop in stops if stop]
    if len(stops) > MAX_STOP_SEQUENCES or any(len(stop) > MAX_STOP_LENGTH for stop in stops):
        raise invalid(
            f"stop takes at most {MAX_STOP_SEQUENCES} sequences of at most {MAX_STOP_LENGTH} characters",
            "stop",
        )
    return stops


def _message(index: int, message: object) -> ChatMessage:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise invalid(f"{where} must be an object with a role and content", where)
    role = message.get("role")
    if role not in CHAT_ROLES:
        wrong = f"{where}.role must be one of {', '.join(CHAT_ROLES)}, got {quoted(role)}"
        raise invalid(wrong, f"{where}.role")
    name = message.get("name")
    if name is not None and not isinstance(name, str):
        raise invalid(f"{where}.name must be a string", f"{where}.name")
    return ChatMessage(role, _content(where, message.get("content")), name)


def _content(where: str, content: object) -> str:
    """A message's text: a string, or text parts joined by newlines (as vLLM joins them)."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise invalid(f"{where}.content must be a string or a list of content parts", f"{where}.content")
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            wrong = f"{where}.content: only text parts are supported, got {quoted(kind)}"
            raise invalid(wrong, f"{where}.content")
        texts.append(part["text"])
    return "\n".join(texts)


class _Fields:
    """The fields of a request body, each taken once and checked; what is left is refused."""

    def __init__(self, document: dict[str, Any]) -> None:
        self._document = document

    def take(self, name: str) -> Any:
        return self._document.pop(name, None)

    def text(self, name: str, required: bool = False) -> str:
        value = self.take(name)
        if not isinstance(value, str) or (required and not value):
            raise invalid(f"{name} must be a non-empty string", name, "missing" if value is None else None)
        return value

    def boolean(self, name: str) -> bool | None:
        value = self.take(name)
        if value is not None and not isinstance(value, bool):
            raise invalid(f"{name} must be true or false, got {quoted(value)}", name)
        return value

    def integer(self, name: str, low: int | None = None, high: int | None = None) -> int | None:
        value = self.take(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(f"{name} must be an integer, got {quoted(value)}", name)
        _check_range(name, value, low, high)
        return value

    def number(self, name: str, low: float, high: float) -> float | None:
        value = self.take(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise invalid(f"{name} must be a number, got {quoted(value)}", name)
        _check_range(name, value, low, high)
        return float(value)

    def refuse_if_set(self, name: str, message: str) -> None:
        if self.take(name) is not None:
            raise invalid(message, name)

    def finish(self) -> None:
        for name in self._document:
            raise invalid(f"Unrecognized request argument supplied: {name}", name, "unknown_parameter")


def _check_range(name: str, value: float, low: float | None, high: float | None) -> None:
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"between {low} and {high}"
        raise invalid(f"{name} must be {bounds}, got {quoted(value)}", name)
