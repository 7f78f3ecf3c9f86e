"""How ``trt serve`` configures the OpenAI front end (its endpoint is in ``ServeOptions``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trt.server.restrictions import Restrictions

# What --openai-restricted-api can restrict, as Triton's front end names them.
OPENAI_CATEGORIES = ("inference", "model-repository", "metrics", "health")


@dataclass(frozen=True)
class OpenAIOptions:
    # A tokenizer folder (or its tokenizer.json) for every model; otherwise each model's own folder.
    tokenizer: Path | None = None
    chat_template: Path | None = None  # a Jinja file used instead of the tokenizer's template
    default_max_tokens: int = 16  # when a request sets none, as Triton's --default-max-tokens
    max_input_size: int = 64 * 1024 * 1024  # largest request body (--http-max-input-size)
    restrictions: Restrictions = field(default_factory=Restrictions)  # --openai-restricted-api
