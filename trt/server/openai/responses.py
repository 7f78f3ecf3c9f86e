"""The bodies OpenAI's API answers with: completions, chat completions, their streamed chunks
(server-sent events, ended by ``data: [DONE]``), token usage and the model list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def as_json(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


@dataclass(frozen=True, slots=True)
class Completion:
    """What every body and chunk of one answer shares."""

    id: str
    created: int
    model: str
    chat: bool  # chat.completion(.chunk) rather than text_completion

    def body(self, text: str, finish_reason: str, usage: Usage | None) -> bytes:
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish_reason}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return orjson.dumps(
            self._envelope("chat.completion" if self.chat else "text_completion", [choice])
            | {"usage": usage.as_json() if usage is not None else None}
        )

    def chunk(self, text: str, finish_reason: str | None, role: bool = False) -> bytes:
        """One event of a stream: new text (the first chat chunk names the role, as OpenAI's does)."""
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish_reason}
        if self.chat:
            choice["delta"] = {"role": "assistant", "content": text} if role else {"content": text}
        else:
            choice["text"] = text
        return _event(self._envelope(self._chunk_object, [choice]))

    def usage_chunk(self, usage: Usage) -> bytes:
        """The last event when the client asked for ``stream_options.include_usage``: no choices."""
        return _event(self._envelope(self._chunk_object, []) | {"usage": usage.as_json()})

    @property
    def _chunk_object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def _envelope(self, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": choices,
        }


def model_entry(name: str, created: int, owned_by: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": owned_by}


def model_list(entries: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"object": "list", "data": entries})


def error_event(body: bytes) -> bytes:
    """An error after the stream began: OpenAI's clients raise it when they read it."""
    return b"data: " + body + b"\n\n"


def _event(document: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(document) + b"\n\n"
