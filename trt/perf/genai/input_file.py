"""Prompts from a file (genai-perf's ``--input-file``): JSON lines, one ``{"text": "..."}`` object a
prompt (``text_input``, genai-perf's earlier name, is taken too); blank lines are skipped.

The file is the user's, but it is read as any input is: its size, its number of prompts and each
prompt's length are bounded before anything is kept, and a line that is not such an object is
refused by its number."""

from __future__ import annotations

from pathlib import Path

import orjson

from trt.perf.errors import OptionError
from trt.perf.genai.options import MAX_PROMPT_TEXTS as MAX_PROMPTS

MAX_FILE_BYTES = 256 * 1024 * 1024
MAX_TEXT_CHARS = 1024 * 1024
_KEYS = ("text", "text_input")


def read_prompt_texts(path: Path) -> list[str]:
    """The prompts of ``path``, in its order; OptionError saying what is wrong and where."""
    flag = f"--input-file {path}"
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise OptionError(f"{flag}: {size:,} bytes, more than the {MAX_FILE_BYTES:,} taken")
        data = path.read_bytes()
    except IsADirectoryError:
        raise OptionError(f'{flag}: a folder; give a JSON-lines file of {{"text": ...}} objects') from None
    except OSError as error:
        raise OptionError(f"{flag}: {error.strerror or error}") from None
    texts: list[str] = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        if len(texts) == MAX_PROMPTS:
            raise OptionError(f"{flag}: more than {MAX_PROMPTS:,} prompts")
        try:
            document = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise OptionError(f"{flag}, line {number}: not JSON") from None
        text = _text_of(document)
        if text is None:
            raise OptionError(f'{flag}, line {number}: expected an object with a "text" string')
        if len(text) > MAX_TEXT_CHARS:
            raise OptionError(f"{flag}, line {number}: a prompt of more than {MAX_TEXT_CHARS:,} characters")
        texts.append(text)
    if not texts:
        raise OptionError(f"{flag}: no prompts in it")
    return texts


def _text_of(document: object) -> str | None:
    if not isinstance(document, dict):
        return None
    for key in _KEYS:
        value = document.get(key)
        if isinstance(value, str):
            return value
    return None
