"""The answers a decoupled model has sent for one request that its reader has not taken yet, bounded.

A reader slower than the model (a client that stops reading its stream, an ensemble whose later
steps are slow) would otherwise make the server hold every answer the model goes on producing: a
model that streams 16 KiB answers to a gRPC client that reads none had the server hold all 320 MB
of 20,000 of them (Triton 2.51 held as much, with its default unbounded response pool). Past
``limit`` bytes held (each answer counts its tensors' bytes, and at least ``ANSWER_OVERHEAD`` for
the objects around them) the request is cancelled, so that a model that asks (``is_cancelled()``)
stops, the answers after it are dropped, and the reader gets an ``OverLimit`` error once it has
taken the answers held before it.

The end of the ``execute()`` that received the request comes through the same queue
(``EXECUTION_ENDED``, after the answers sent before it), so the reader awaits one queue rather than
the queue and the execution together (that took a task and an ``asyncio.wait`` for each answer
that arrived while ``execute()`` ran).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from trt.server.core.backends.base import BackendResponse
from trt.server.core.errors import OverLimit

EXECUTION_ENDED = BackendResponse({})  # the item that says execute() has returned (or failed)
ANSWER_OVERHEAD = 1024  # bytes an answer counts for at least: its response, dict and array objects
DEFAULT_LIMIT = 64 << 20  # --max-unread-response-bytes


class AnswerQueue:
    def __init__(self, limit: int, model_name: str, on_overflow: Callable[[], None]) -> None:
        self._queue: asyncio.Queue[tuple[BackendResponse | None, bool, int]] = asyncio.Queue()
        self._limit = limit  # 0: no bound
        self._model_name = model_name
        self._on_overflow = on_overflow
        self._held = 0
        self._overflowed = False

    def put(self, answer: BackendResponse | None, final: bool) -> None:
        """An answer the model sent (``final``: its last); called on the event loop."""
        if self._overflowed:
            return
        size = _size(answer)
        if self._limit and self._held + size > self._limit:
            self._overflowed = True
            self._on_overflow()
            error = OverLimit(
                f"the responses of model '{self._model_name}' to this request were not read as fast as "
                f"they came: {self._held} bytes of them were held unread, and the request was cancelled "
                "(--max-unread-response-bytes)"
            )
            self._queue.put_nowait((BackendResponse({}, error=error), True, 0))
            return
        self._held += size
        self._queue.put_nowait((answer, final, size))

    def execution_ended(self, _: object = None) -> None:
        """``execute()`` returned: the answers it sent before are queued ahead of this (a done
        callback of the execution); never dropped, and counting no bytes."""
        self._queue.put_nowait((EXECUTION_ENDED, False, 0))

    async def get(self) -> tuple[BackendResponse | None, bool]:
        answer, final, size = await self._queue.get()
        self._held -= size
        return answer, final


def _size(answer: BackendResponse | None) -> int:
    if answer is None:
        return ANSWER_OVERHEAD
    size = ANSWER_OVERHEAD
    for array in answer.outputs.values():
        size += array.nbytes
        if array.dtype == object:  # a BYTES tensor: its arrays hold references to the bytes
            size += sum(len(item) for item in array.flat if isinstance(item, (bytes, str)))
    return size
