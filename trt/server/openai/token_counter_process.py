"""The process that loads tokenizers and counts tokens for the OpenAI front end (``token_counter``).

``tokenizers`` holds the GIL while it reads a tokenizer.json (0.74 s for a 3.3 MB one, on a thread or
not), so loading one in the server held every request of every model on its event loop. Here it holds
only this process. Run as ``python -m trt.server.openai.token_counter_process``: requests come on
standard input, answers go out on standard output, in frames the server and this process alone write::

    request: <u32 header length> <u32 text length> <header: JSON> <text: UTF-8>
             header: {"id": n, "path": tokenizer.json, "special": true|false}
    answer:  <u32 length> <JSON: {"id": n, "count": tokens} or {"id": n, "error": why}>

Counts run on a few threads (``encode_batch`` lets go of the GIL), so a long prompt does not hold
the short ones behind it. The process ends when its input closes or the server dies.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from trt.parent_death import end_with_parent

REQUEST_HEAD = struct.Struct("<II")
ANSWER_HEAD = struct.Struct("<I")
MAX_HEADER_BYTES = 64 * 1024
MAX_TEXT_BYTES = 1 << 30  # the server bounds texts by its own request limits; this bounds a bad frame
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024  # Llama 3's tokenizer.json is 9 MB
CACHED_TOKENIZERS = 8
THREADS = 4
# A shorter text, for a tokenizer already loaded, is counted by the thread that read it: handing it to
# the pool cost more than its count (a short text's round trip, one at a time: 414 us through the pool,
# 343 us counted inline).
INLINE_TEXT_BYTES = 16 * 1024


class Tokenizers:
    """The tokenizers loaded so far, by file (and its size and change time: a model reloaded with a
    new tokenizer.json gets it), the least recently used dropped past ``CACHED_TOKENIZERS``."""

    def __init__(self) -> None:
        self._loaded: OrderedDict[tuple[str, int, int], Any] = OrderedDict()
        self._paths: frozenset[str] = frozenset()  # of those loaded: read without the lock
        self._lock = threading.Lock()  # one load at a time: concurrent first requests load it once

    def loaded(self, path: str) -> bool:
        """Whether a tokenizer of ``path`` is loaded (not whether it is the file's latest)."""
        return path in self._paths

    def get(self, path: str) -> Any:
        stat = os.stat(path)
        if stat.st_size > MAX_TOKENIZER_BYTES:
            raise ValueError(f"it is {stat.st_size} bytes, over the {MAX_TOKENIZER_BYTES}-byte limit")
        key = (path, stat.st_size, stat.st_mtime_ns)
        with self._lock:
            tokenizer = self._loaded.get(key)
            if tokenizer is None:
                from tokenizers import Tokenizer

                with open(path, encoding="utf-8") as file:
                    tokenizer = Tokenizer.from_str(file.read(MAX_TOKENIZER_BYTES + 1))
                self._loaded[key] = tokenizer
                while len(self._loaded) > CACHED_TOKENIZERS:
                    self._loaded.popitem(last=False)
                self._paths = frozenset(key[0] for key in self._loaded)
            else:
                self._loaded.move_to_end(key)
        return tokenizer


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    """``size`` bytes, or None at the end of the input (the server closed it, or died)."""
    data = stream.read(size)
    return data if len(data) == size else None


class Answers:
    """Standard output, written whole frame by whole frame from any thread."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, answer: dict[str, Any]) -> None:
        body = json.dumps(answer).encode()
        with self._lock:
            self._stream.write(ANSWER_HEAD.pack(len(body)) + body)
            self._stream.flush()


def count(tokenizers: Tokenizers, answers: Answers, header: dict[str, Any], text: str) -> None:
    number = header.get("id")
    try:
        tokenizer = tokenizers.get(str(header["path"]))
    except Exception as exc:  # unreadable, malformed or too large: the server answers 500 with this
        answers.send({"id": number, "error": f"{type(exc).__name__}: {exc}"})
        return
    try:
        (encoding,) = tokenizer.encode_batch([text], add_special_tokens=bool(header.get("special")))
    except Exception as exc:
        answers.send({"id": number, "error": f"{type(exc).__name__}: {exc}"})
        return
    answers.send({"id": number, "count": len(encoding.ids)})


def serve(requests: IO[bytes], answers: Answers) -> None:
    """Answer requests until the input ends; a frame out of bounds ends the process (the server
    fails what it waited for and starts another)."""
    tokenizers = Tokenizers()
    with ThreadPoolExecutor(THREADS, thread_name_prefix="count") as pool:
        while (head := _read_exactly(requests, REQUEST_HEAD.size)) is not None:
            header_size, text_size = REQUEST_HEAD.unpack(head)
            if header_size > MAX_HEADER_BYTES or text_size > MAX_TEXT_BYTES:
                raise SystemExit(f"token counter: frame of {header_size} + {text_size} bytes, out of bounds")
            header_bytes = _read_exactly(requests, header_size)
            text_bytes = _read_exactly(requests, text_size)
            if header_bytes is None or text_bytes is None:
                break
            header = json.loads(header_bytes)
            text = text_bytes.decode("utf-8", "replace")
            if text_size <= INLINE_TEXT_BYTES and tokenizers.loaded(str(header.get("path"))):
                count(tokenizers, answers, header, text)
            else:
                pool.submit(count, tokenizers, answers, header, text)


def main() -> None:
    end_with_parent(signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the server's terminal is the server's
    serve(sys.stdin.buffer, Answers(sys.stdout.buffer))


if __name__ == "__main__":
    main()
