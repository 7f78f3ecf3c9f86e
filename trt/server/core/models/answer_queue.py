"""The answers a decoupled model has sent for one request that its reader has not taken yet, bounded.

A reader slower than the model (a client that stops reading its stream, an ensemble whose later
steps are slow) would otherwise make the server hold every answer the model goes on producing: a
model that streams 16 KiB answers to a gRPC client that reads none had the server hold all 320 MB
of 20,000 of them (Triton 2.51 held as much, with its default unbounded response pool). Past
``limit`` bytes held (each answer counts its tensors' bytes, and at least ``ANSWER_OVERHEAD`` for
the objects around them) the request is cancelled, so that a model that asks (``is_cancelled()``)
stops, the answers after it are dropped, and the reader gets an ``OverLimit`` error once it has
taken the answers held before it.

Every request's unread answers count against the server's one bound as well
(``--max-queued-bytes``, shared with the requests themselves): many streams whose readers lag
would otherwise hold ``limit`` bytes each. Past it the request is cancelled the same way. The
reader ``close()``s the queue when it stops, giving back what it still held.

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
from trt.server.core.scheduling.queued_bytes import QueuedBytes

EXECUTION_ENDED = BackendResponse({})  # the item that says execute() has returned (or failed)
ANSWER_OVERHEAD = 1024  # bytes an answer counts for at least: its response, dict and array objects
DEFAULT_LIMIT = 64 << 20  # --max-unread-response-bytes


class AnswerQueue:
    def __init__(
        self,
        limit: int,
        model_name: str,
        on_overflow: Callable[[], None],
        budget: QueuedBytes | None = None,
    ) -> None:
        self._queue: asyncio.Queue[tuple[BackendResponse | None, bool, int]] = asyncio.Queue()
        self._limit = limit  # 0: no bound
        self._budget = budget  # the server's bound on everything requests hold (None: none)
        self._model_name = model_name
        self._on_overflow = on_overflow
        self._held = 0
        self._stopped = False  # over a bound, or closed: later answers are dropped

    def put(self, answer: BackendResponse | None, final: bool) -> None:
        """An answer the model sent (``final``: its last); called on the event loop."""
        if self._stopped:
            return
        size = _size(answer)
        if self._limit and self._held + size > self._limit:
            self._overflow(
                f"the responses of model '{self._model_name}' to this request were not read as fast as "
                f"they came: {self._held} bytes of them were held unread, and the request was cancelled "
                "(--max-unread-response-bytes)"
            )
            return
        budget = self._budget
        if budget is not None and not budget.reserve(size):
            self._overflow(
                f"the responses of model '{self._model_name}' to this request were not read as fast as "
                f"they came, and the server holds {budget.held} bytes of requests and unread responses, "
                f"past the limit of {budget.limit} (--max-queued-bytes): the request was cancelled"
            )
            return
        self._held += size
        self._queue.put_nowait((answer, final, size))

    def _overflow(self, message: str) -> None:
        self._stopped = True
        self._on_overflow()
        self._queue.put_nowait((BackendResponse({}, error=OverLimit(message)), True, 0))

    def execution_ended(self, _: object = None) -> None:
        """``execute()`` returned: the answers it sent before are queued ahead of this (a done
        callback of the execution); never dropped, and counting no bytes."""
        self._queue.put_nowait((EXECUTION_ENDED, False, 0))

    async def get(self) -> tuple[BackendResponse | None, bool]:
        answer, final, size = await self._queue.get()
        self._held -= size
        if self._budget is not None:
            self._budget.release(size)
        return answer, final

    def close(self) -> None:
        """The reader is done: what it left unread is given back, and later answers are dropped."""
        self._stopped = True
        if self._budget is not None:
            self._budget.release(self._held)
        self._held = 0
        while not self._queue.empty():
            self._queue.get_nowait()


def _size(answer: BackendResponse | None) -> int:
    if answer is None:
        return ANSWER_OVERHEAD
    size = ANSWER_OVERHEAD
    for array in answer.outputs.values():
        size += array.nbytes
        if array.dtype == object:  # a BYTES tensor: its arrays hold references to the bytes
            size += sum(len(item) for item in array.flat if isinstance(item, (bytes, str)))
    return size
