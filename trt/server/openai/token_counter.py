"""Token counts from a process of their own, so that loading a tokenizer never holds the event loop.

``tokenizers`` reads a tokenizer.json holding the GIL (0.74 s for a 3.3 MB one; Llama 3's is 9 MB):
loaded in the server, a model's first OpenAI request after each load held every other request of
every model. ``TokenCounter`` starts ``token_counter_process`` when first asked, sends it each text
and waits for the count without blocking; the process loads each tokenizer once and keeps it.

Nothing hangs on that process: if it dies, what waited on it is answered without counts (``usage``
is left out, never guessed, as for a model without a tokenizer) and the next count starts another.
Its answers are JSON read within a size bound, never unpickled.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from trt.server.openai.token_counter_process import ANSWER_HEAD, REQUEST_HEAD

logger = logging.getLogger("trt.openai")

PROCESS_MODULE = "trt.server.openai.token_counter_process"
MAX_ANSWER_BYTES = 64 * 1024
MAX_PENDING = 256  # counts sent and not yet answered; more wait their turn


class TokenizerUnreadable(Exception):
    """The process could not load the tokenizer, or it refused the text (the reason is its words)."""


@dataclass
class _Link:
    """One counting process and the counts it owes, by number."""

    process: asyncio.subprocess.Process
    waiting: dict[int, asyncio.Future[dict[str, Any] | None]] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None


class TokenCounter:
    """One counting process for one front end, started when first needed."""

    def __init__(self) -> None:
        self._link: _Link | None = None
        self._numbers = itertools.count(1)
        self._starting = asyncio.Lock()
        self._slots = asyncio.Semaphore(MAX_PENDING)

    async def start(self) -> None:
        """Start the process now rather than at the first count (nothing if it runs)."""
        await self._started()

    @property
    def pid(self) -> int | None:
        return self._link.process.pid if self._link is not None else None

    async def count(self, tokenizer_file: Path, text: str, with_special_tokens: bool) -> int | None:
        """How many tokens ``text`` is; None if the process died before it answered."""
        async with self._slots:
            link = await self._started()
            number = next(self._numbers)
            answer_future: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
            link.waiting[number] = answer_future
            header = orjson.dumps({"id": number, "path": str(tokenizer_file), "special": with_special_tokens})
            body = text.encode("utf-8", "surrogatepass")
            stdin = link.process.stdin
            assert stdin is not None
            try:
                stdin.write(REQUEST_HEAD.pack(len(header), len(body)) + header + body)
                await stdin.drain()
                answer = await answer_future
            except (BrokenPipeError, ConnectionResetError):
                answer = None  # it died: its reader answers the others
            finally:
                link.waiting.pop(number, None)
        if answer is None:
            return None
        if "error" in answer:
            raise TokenizerUnreadable(str(answer["error"]))
        counted = answer.get("count")
        return counted if type(counted) is int and counted >= 0 else None

    async def _started(self) -> _Link:
        async with self._starting:
            link = self._link
            if link is None or link.process.returncode is not None:
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", PROCESS_MODULE,
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                )  # fmt: skip
                link = self._link = _Link(process)
                link.reader = asyncio.get_running_loop().create_task(self._read_answers(link))
                logger.info("token counting process %d started", process.pid)
            return link

    @staticmethod
    async def _read_answers(link: _Link) -> None:
        process = link.process
        assert process.stdout is not None
        try:
            while True:
                (size,) = ANSWER_HEAD.unpack(await process.stdout.readexactly(ANSWER_HEAD.size))
                if size > MAX_ANSWER_BYTES:
                    raise ValueError(f"an answer of {size} bytes")
                answer = orjson.loads(await process.stdout.readexactly(size))
                number = answer.get("id") if isinstance(answer, dict) else None
                waiting = link.waiting.get(number) if type(number) is int else None
                if waiting is not None and not waiting.done():
                    waiting.set_result(answer)
        except asyncio.IncompleteReadError:
            pass  # it exited
        except ValueError as exc:  # orjson's errors are ValueErrors too
            logger.error("the token counting process sent what it must not (%s): stopping it", exc)
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        code = await process.wait()
        if link.waiting:
            logger.warning("the token counting process exited (%s); the counts it owed are left out", code)
        for waiting in link.waiting.values():
            if not waiting.done():
                waiting.set_result(None)

    async def close(self) -> None:
        """Let the process go: it ends at the end of its input (killed if it has not within 5 s)."""
        link, self._link = self._link, None
        if link is None:
            return
        if link.process.stdin is not None:
            link.process.stdin.close()
        try:
            await asyncio.wait_for(link.process.wait(), timeout=5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                link.process.kill()
        if link.reader is not None:
            await link.reader
