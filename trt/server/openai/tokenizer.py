"""A model's tokenizer files, as Hugging Face lays them out: the chat template and token counts.

The folder is ``--tokenizer`` when given, else the model's version folder, else its model folder:
the first holding ``tokenizer.json``, ``tokenizer_config.json`` or ``chat_template.jinja``. The chat
template is ``--chat-template``, else ``tokenizer_config.json``'s ``chat_template``, else
``chat_template.jinja``. It is rendered in Jinja's sandbox, as ``transformers`` renders it, with the
same helpers (``raise_exception``, ``strftime_now``, a ``tojson`` that keeps non-ASCII text).

Tokens are counted with ``tokenizers`` only for models that do not report their own counts
(``num_input_tokens`` / ``num_output_tokens``), in a process of its own (``token_counter``): it holds
the GIL while it loads a tokenizer. Both libraries come with the ``genai`` extra; jinja2 is imported
on first use.
"""

from __future__ import annotations

import datetime
import functools
import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trt import DISTRIBUTION
from trt.server.openai.errors import OpenAIError, invalid
from trt.server.openai.schemas import ChatMessage
from trt.server.openai.token_counter import TokenCounter, TokenizerUnreadable

if TYPE_CHECKING:
    from jinja2 import Template

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
MAX_TEXT_BYTES = 4 * 1024 * 1024


def tokenizer_folder(candidates: list[Path]) -> Path | None:
    """The first folder that holds tokenizer files."""
    for folder in candidates:
        if any((folder / name).is_file() for name in (TOKENIZER_FILE, CONFIG_FILE, TEMPLATE_FILE)):
            return folder
    return None


class ModelTokenizer:
    """The chat template and the tokenizer of one model, each loaded when first needed."""

    def __init__(
        self,
        model: str,
        folder: Path | None,
        chat_template: Path | None,
        confined: bool = True,
        counter: TokenCounter | None = None,
    ) -> None:
        self.model = model
        self.folder = folder
        # A model's own folder: its files must not lead out of it. Not so --tokenizer, which may well
        # be a Hugging Face cache snapshot, whose files are links into the cache's blobs.
        self.confined = confined
        self._template_path = chat_template
        self._config: dict[str, Any] | None = None
        self._template: Template | None = None
        self._counter = counter  # None: nothing is counted

    def render_chat(self, messages: tuple[ChatMessage, ...]) -> str:
        """The prompt for a conversation, ending where the assistant's answer begins."""
        template = self._template or self._load_template()
        config = self._tokenizer_config()
        turns = []
        for message in messages:
            turn = {"role": message.role, "content": message.content}
            if message.name is not None:
                turn["name"] = message.name
            turns.append(turn)
        try:
            return template.render(
                messages=turns,
                add_generation_prompt=True,
                tools=None,
                bos_token=_token(config.get("bos_token")),
                eos_token=_token(config.get("eos_token")),
            )
        except Exception as exc:  # the template refused the conversation (raise_exception) or failed on it
            refusal = f"the chat template of model '{self.model}' refused the messages: {exc}"
            raise invalid(refusal, "messages") from None

    async def count(self, text: str, with_special_tokens: bool) -> int | None:
        """How many tokens ``text`` is; None when the model has no tokenizer.json (or the library is
        missing, or the counting process died meanwhile): token counts are then left out, not guessed."""
        path = self._tokenizer_file
        if path is None or self._counter is None:
            return None
        try:
            return await self._counter.count(path, text, with_special_tokens)
        except TokenizerUnreadable as exc:
            unreadable = f"{TOKENIZER_FILE} of model '{self.model}' cannot be read: {exc}"
            raise OpenAIError(500, unreadable) from None

    def _load_template(self) -> Template:
        try:
            from jinja2 import TemplateError
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ModuleNotFoundError:
            raise OpenAIError(
                501,
                f"chat templates need jinja2: pip install '{DISTRIBUTION}[genai]'",
                None,
                "missing_dependency",
            ) from None
        source = self._template_source()
        environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        environment.filters["tojson"] = _tojson
        environment.globals["raise_exception"] = _raise_exception
        environment.globals["strftime_now"] = _strftime_now
        try:
            self._template = environment.from_string(source)
        except TemplateError as exc:
            raise OpenAIError(
                500, f"the chat template of model '{self.model}' is not valid Jinja: {exc}"
            ) from None
        return self._template

    def _template_source(self) -> str:
        if self._template_path is not None:
            return _read_text(self._template_path, MAX_TEXT_BYTES)
        template = self._tokenizer_config().get("chat_template")
        if isinstance(template, list):  # named templates, as transformers saves several
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if isinstance(template, str):
            return template
        if self.folder is not None and (self.folder / TEMPLATE_FILE).is_file():
            return _read_text(self._file(TEMPLATE_FILE), MAX_TEXT_BYTES)
        raise invalid(
            f"model '{self.model}' has no chat template: give trt serve --chat-template, or a tokenizer "
            "with one (--tokenizer, or tokenizer_config.json beside the model); or use /v1/completions",
            "model",
            "no_chat_template",
        )

    def _tokenizer_config(self) -> dict[str, Any]:
        if self._config is None:
            self._config = {}
            if self.folder is not None and (self.folder / CONFIG_FILE).is_file():
                try:
                    loaded = json.loads(_read_text(self._file(CONFIG_FILE), MAX_TEXT_BYTES))
                except ValueError as exc:
                    raise OpenAIError(
                        500, f"{CONFIG_FILE} of model '{self.model}' is not JSON: {exc}"
                    ) from None
                self._config = loaded if isinstance(loaded, dict) else {}
        return self._config

    def _file(self, name: str) -> Path:
        assert self.folder is not None
        return _inside(self.folder, name) if self.confined else self.folder / name

    @functools.cached_property
    def _tokenizer_file(self) -> Path | None:
        """The model's tokenizer.json, inside its folder; None without one, or without ``tokenizers``
        (looked for once: a model's files are read again only when it loads again, and this with it)."""
        if self.folder is None or not (self.folder / TOKENIZER_FILE).is_file():
            return None
        if importlib.util.find_spec("tokenizers") is None:
            return None
        return self._file(TOKENIZER_FILE)


def _inside(folder: Path, name: str) -> Path:
    """``folder/name``, which must not lead out of ``folder`` (a link in a model folder may)."""
    path = (folder / name).resolve()
    if not path.is_relative_to(folder.resolve()):
        raise OpenAIError(500, f"{name} of the model's tokenizer points outside its folder")
    return path


def _read_text(path: Path, limit: int) -> str:
    """A file of the tokenizer's, refused when larger than ``limit`` bytes (checked before reading)."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise OpenAIError(500, f"{path.name} is {size} bytes, over the {limit}-byte limit")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OpenAIError(500, f"cannot read {path.name}: {exc}") from None


def _token(value: object) -> str:
    """A special token as tokenizer_config.json gives it: a string, or an object with its content."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _tojson(value: object, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _raise_exception(message: str) -> None:
    from jinja2 import TemplateError

    raise TemplateError(message)


def _strftime_now(format: str) -> str:
    return datetime.datetime.now().strftime(format)
