"""The body of a repository ``load`` request: its ``config`` and its ``file:<path>`` contents, which HTTP
carries base64-encoded inside JSON, as tritonclient sends them.

A push of model files is tens of megabytes: decoding a 40 MB file's base64 took 0.18 s, during which
the event loop answered nobody, on any model. The files of a body past ``OFF_LOOP_BYTES`` are therefore
decoded on a thread, and a slice at a time, since ``b64decode`` holds the GIL for the whole string: the
loop takes its turn between slices. Smaller bodies (every unload, most loads) are decoded in place,
where a thread would cost more than it saves. The body's JSON parse stays on the loop: orjson holds
the GIL for the one call (about 0.1 s for 50 MB), so a thread would not free it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass
from typing import Any

from trt.server.core.errors import InvalidArgument

OFF_LOOP_BYTES = 1 << 20
_SLICE_CHARS = 1 << 20  # of base64: about 3 ms of decoding; a multiple of 4, so slices hold whole quartets


@dataclass(frozen=True, slots=True)
class LoadParameters:
    config: str | None
    files: dict[str, bytes]


async def load_parameters(parameters: dict[str, Any], body_bytes: int) -> LoadParameters:
    """``config`` and the decoded ``file:`` parameters of a load request of ``body_bytes``."""
    if body_bytes > OFF_LOOP_BYTES:
        return await asyncio.to_thread(_decode, parameters)
    return _decode(parameters)


def _decode(parameters: dict[str, Any]) -> LoadParameters:
    config: str | None = None
    files: dict[str, bytes] = {}
    for key, value in parameters.items():
        if not isinstance(value, str):
            raise InvalidArgument(f"parameter '{key}' must be a string")
        if key == "config":
            config = value
        elif key.startswith("file:"):
            try:
                files[key] = _b64decode(value)
            except (binascii.Error, ValueError):
                raise InvalidArgument(f"load parameter '{key}' is not valid base64") from None
    return LoadParameters(config, files)


def _b64decode(text: str) -> bytes:
    """Strict base64 (``validate=True``), a slice at a time. Padding may close only the last slice,
    as it may close only the whole text."""
    if len(text) <= _SLICE_CHARS:
        return base64.b64decode(text, validate=True)
    pieces = []
    for start in range(0, len(text), _SLICE_CHARS):
        piece = text[start : start + _SLICE_CHARS]
        if start + _SLICE_CHARS < len(text) and "=" in piece:
            raise binascii.Error("padding before the end")
        pieces.append(base64.b64decode(piece, validate=True))
    return b"".join(pieces)
