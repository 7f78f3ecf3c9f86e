"""The executions a Python model's instance holds: each one ``execute(requests)`` call in its model
process, from the moment it is sent until its last response.

The scheduler may hand an instance its next executions while one runs (up to ``EXECUTION_SLOTS``),
so that the model process goes from one ``execute`` to the next without waiting for the event loop
to see the first one's result. Each execution's tensors travel in the pair of arenas of a free slot, held
until its last response; with none free they travel inline, in the messages. Answers arrive as one
``result`` message (the responses ``execute`` returned), or, for a model that uses response
senders, as ``response`` messages one by one and a ``result`` saying ``execute`` returned.
Tensors past ``OFF_LOOP_BYTES`` are copied into and out of the arenas on a thread, executions still
sent, and results still settled, in the order they came.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from trt.server.backends.python.error_codes import error_from_model
from trt.server.backends.python.process import EXECUTION_SLOTS, Message
from trt.server.backends.python.stub import _ipc
from trt.server.core.backends.base import BackendRequest, BackendResponse
from trt.server.core.errors import ServerError
from trt.server.core.extensions.tracing import Trace

logger = logging.getLogger("trt.backends.python")
# An execution whose tensors come to more than this has them copied into and out of its arenas on a
# thread (numpy's copy lets go of the GIL): on the event loop, a 64 MB input and output held every
# other request for 12-16 ms. A result's own word says whether its outputs do ("arena_bytes").
OFF_LOOP_BYTES = _ipc.LARGE_ARENA_BYTES
Copied = TypeVar("Copied")

# Called once per execution, from the event loop: (responses, None) or (None, the error), and
# when the model process started it (perf_counter ns; None if it never did).
ExecutionDone = Callable[[list[BackendResponse] | None, BaseException | None, int | None], None]
StartRequests = Callable[[list[BackendRequest], ExecutionDone], None]


@dataclass(slots=True)
class _Execution:
    done: ExecutionDone
    count: int
    responses: list[list[BackendResponse]]
    requests: list[BackendRequest]  # a request's ``on_response`` set: its responses stream
    slot: int | None  # the pair of arenas its tensors are in, held until it finishes; None: inline
    started_ns: int | None = None  # when the model process began it
    withdrawn: bool = False  # the process was asked not to start it (its requests were cancelled)
    finals: set[int] = field(default_factory=set)
    rescheduled: frozenset[int] = frozenset()  # released to run again: answered by a later execution
    returned: bool = False  # execute() has returned (with None: answers come through senders)
    settled: bool = False  # ``done`` was called: the instance is free

    @property
    def streamed(self) -> bool:
        """Every request streams its responses (a decoupled model's): as in Triton, the instance is
        free once ``execute`` returns, while its response senders go on answering."""
        return all(request.on_response is not None for request in self.requests)

    @property
    def finished(self) -> bool:
        """Nothing more can arrive for it: settled, and every stream has had its final response."""
        return self.settled and (len(self.finals) >= self.count or not self.streamed)

    def settle(self, answers: list[BackendResponse] | None, error: BaseException | None = None) -> None:
        if not self.settled:
            self.settled = True
            self.done(answers, error, self.started_ns)

    def fail(self, error: ServerError) -> None:
        """End it with ``error``: the requests not yet answered, and the streams still open."""
        self.settle(None, error)
        for index, request in enumerate(self.requests):
            if request.on_response is not None and index not in self.finals:
                self.finals.add(index)
                request.on_response(BackendResponse({}, error=error), True)

    def settle_if_complete(self) -> None:
        if self.settled or not self.returned:
            return
        if self.streamed:  # answers go by the streams
            self.settle([BackendResponse({}, rescheduled=i in self.rescheduled) for i in range(self.count)])
            return
        if len(self.finals) < self.count:
            return
        answers = []
        for index, responses in enumerate(self.responses):
            if index in self.rescheduled:
                answers.append(BackendResponse({}, rescheduled=True))
            elif self.requests[index].on_response is not None:
                answers.append(BackendResponse({}))  # already delivered, one by one
            elif not responses:
                answers.append(
                    BackendResponse({}, error=ServerError(f"the model sent no response for request {index}"))
                )
            else:
                answers.append(responses[0])
        self.settle(answers)


class Executions:
    """The executions sent to one model process and not yet finished, by number.

    ``start_requests`` is the instance's own (the request scheduler calls it once per execution):
    it starts at once while ``open``, and otherwise hands the requests to ``when_not_open``, which
    decides (the process is starting, restarting or gone) and sets ``open`` once it may start."""

    def __init__(
        self,
        model_name: str,
        model_py: Path,
        input_arenas: list[_ipc.Arena],
        output_arenas: list[_ipc.Arena],
        post: Callable[[Message], None],
        when_not_open: StartRequests,
    ) -> None:
        self.open = False  # the model process is attached and takes executions
        self._model_name = model_name
        self._model_py = model_py
        self._input_arenas = input_arenas
        self._output_arenas = output_arenas
        self._post = post
        self._when_not_open = when_not_open
        self._executions: dict[int, _Execution] = {}
        self._next_execution = 0
        # The last execution whose tensors are being copied into its arena on a thread; the ones
        # after it are sent behind it, in order (``_send_copied``).
        self._copying: asyncio.Future[None] | None = None
        self._settling: asyncio.Future[None] | None = None  # the same for results copied out

    def __len__(self) -> int:
        return len(self._executions)

    def start_requests(self, requests: list[BackendRequest], done: ExecutionDone) -> None:
        """Send ``requests`` to the model process as one execution; ``done`` is called from the
        event loop when it ends."""
        if not self.open:
            self._when_not_open(requests, done)
            return
        number = self._next_execution
        self._next_execution += 1
        slot = self._free_slot()
        arena = None if slot is None else self._input_arenas[slot]
        self._executions[number] = _Execution(done, len(requests), [[] for _ in requests], requests, slot)
        for request in requests:
            request.on_cancel = partial(self._withdraw, number)
        large = arena is not None and _input_bytes(requests) > OFF_LOOP_BYTES
        if self._copying is None and not large:
            self._post(("execute", number, slot, _described(requests, arena)))
        else:  # in order behind the executions whose tensors are still being copied
            self._copying = asyncio.ensure_future(
                self._send_copied(number, slot, requests, arena, large, self._copying)
            )

    async def _send_copied(
        self,
        number: int,
        slot: int | None,
        requests: list[BackendRequest],
        arena: _ipc.Arena | None,
        large: bool,
        before: asyncio.Future[None] | None,
    ) -> None:
        """Send execution ``number`` once those before it are sent, its tensors copied into the
        arena on a thread if ``large``."""
        try:
            metas = await _after(before, large, _described, requests, arena)
        except Exception as exc:
            execution = self._executions.pop(number, None)
            if execution is not None:
                execution.fail(ServerError(f"copying the inputs of model '{self._model_name}': {exc}"))
        else:
            execution = self._executions.get(number)
            if execution is not None and not execution.settled:  # not failed meanwhile (process exit)
                self._post(("execute", number, slot, metas))
        finally:
            if self._copying is asyncio.current_task():
                self._copying = None

    def _withdraw(self, number: int) -> None:
        """A request of execution ``number`` was cancelled. If the process has not started that
        execution yet (it waits behind another, in a slot), it skips it when every request in it
        was cancelled; a started one sees it through ``is_cancelled()``."""
        execution = self._executions.get(number)
        if execution is None or execution.withdrawn or execution.settled:
            return
        if all(request.cancelled for request in execution.requests):
            execution.withdrawn = True
            self._post(("withdraw", number))

    def _free_slot(self) -> int | None:
        """A pair of arenas no unfinished execution holds. An execution holds its pair until its
        last response: a model may read its inputs from another thread until it sends its final
        flag. With none free (streams left open) the tensors travel inline, in the messages."""
        executions = self._executions
        if not executions:
            return 0
        held = {execution.slot for execution in executions.values()}
        for slot in range(EXECUTION_SLOTS):
            if slot not in held:
                return slot
        return None

    # -- what the model process sends ----------------------------------------------------------

    def on_result(self, number: int, payload: dict[str, Any]) -> None:
        """``execute`` returned (or raised, or was skipped as withdrawn)."""
        execution = self._executions.get(number)
        if execution is None:
            return
        execution.started_ns = payload.get("started_ns")
        if payload.get("withdrawn"):  # cancelled before it started: it never ran
            execution.fail(ServerError("the request was cancelled before its execution started"))
        elif "error" in payload:
            message, code = payload["error"]
            if payload.get("traceback"):
                logger.debug("execute() of %s raised:\n%s", self._model_py, payload["traceback"])
            error = error_from_model(message, code)
            execution.finals.update(range(execution.count))  # each request ends with this error
            execution.settle([BackendResponse({}, error=error) for _ in range(execution.count)])
        elif payload["responses"] is None:
            execution.returned = True
            # A rescheduled request's stream goes on in its next execution: none here owes it a final.
            execution.rescheduled = _rescheduled(payload, execution.count) - execution.finals
            execution.finals.update(execution.rescheduled)
            execution.settle_if_complete()
        else:
            arena = None if execution.slot is None else self._output_arenas[execution.slot]
            rescheduled = _rescheduled(payload, execution.count)
            described, large = payload["responses"], arena is not None and "arena_bytes" in payload
            if self._settling is None and not large:
                answers = _answers(described, rescheduled, arena)  # before it goes: this may raise
                # Every request has its final answer: nothing more can come for it, and its arenas are
                # free for the next execution, which ``settle`` may start.
                del self._executions[number]
                execution.settle(answers)
            else:
                settle = self._settle_copied
                before = self._settling
                self._settling = asyncio.ensure_future(
                    settle(number, execution, described, rescheduled, arena, large, before)
                )
            return
        if execution.finished:
            self._executions.pop(number, None)

    async def _settle_copied(
        self,
        number: int,
        execution: _Execution,
        described: list[Any],
        rescheduled: frozenset[int],
        arena: _ipc.Arena | None,
        large: bool,
        before: asyncio.Future[None] | None,
    ) -> None:
        """Settle ``execution`` with its responses once those before it are settled, their tensors
        copied out of the arena on a thread if ``large``. It holds its arenas until then."""
        try:
            answers = await _after(before, large, _answers, described, rescheduled, arena)
        except Exception as exc:
            error = ServerError(f"reading the responses of model '{self._model_name}': {exc}")
            answers = [BackendResponse({}, error=error) for _ in range(execution.count)]
        finally:
            if self._settling is asyncio.current_task():
                self._settling = None
        if self._executions.get(number) is execution:  # not failed meanwhile (process exit, unload)
            del self._executions[number]
            execution.settle(answers)

    def on_response(self, number: int, index: int, answer: BackendResponse | None, final: bool) -> None:
        """A response sender's response for request ``index`` of execution ``number``."""
        execution = self._executions.get(number)
        if execution is None:
            return  # the request already failed (process restart) or was answered
        stream = execution.requests[index].on_response
        if stream is not None:
            stream(answer, final)
        elif answer is not None:
            execution.responses[index].append(answer)
        if final:
            execution.finals.add(index)
        execution.settle_if_complete()
        if execution.finished:
            self._executions.pop(number, None)

    def on_sender_dropped(self, number: int, index: int) -> None:
        """The model let go of a request's response sender (or returned None from execute() without
        ever making one) before sending the final flag: nothing can answer it any more. A stream ends
        with an error; a request that waits for one response gets what was sent, or an error."""
        execution = self._executions.get(number)
        if execution is None or index in execution.finals:
            return
        answered = execution.requests[index].on_response is None and execution.responses[index]
        error = ServerError(
            f"model '{self._model_name}' let go of the response sender of request {index} of an "
            "execute() call without sending the final flag (TRITONSERVER_RESPONSE_COMPLETE_FINAL)"
        )
        self.on_response(number, index, None if answered else BackendResponse({}, error=error), True)

    # -- what the model process asks about its requests --------------------------------------------

    def request_cancelled(self, number: int, index: int) -> bool:
        """Whether request ``index`` of execution ``number`` was cancelled (``is_cancelled()``)."""
        execution = self._executions.get(number)
        # An execution no longer here has been answered or failed: nobody reads more.
        if execution is None:
            return True
        if type(index) is not int or not 0 <= index < execution.count:
            raise ValueError(f"execution {number} has no request {index!r}")
        return execution.requests[index].cancelled

    def trace_of(self, number: int, index: int) -> Trace | None:
        """The trace of request ``index`` of execution ``number``, if it is being traced."""
        execution = self._executions.get(number)
        return execution.requests[index].trace if execution is not None else None

    # -- when the process goes ---------------------------------------------------------------------

    def fail_on_exit(
        self, error: ServerError, last_taken: int
    ) -> list[tuple[list[BackendRequest], ExecutionDone]]:
        """The process died: fail what it was running, and every stream still open, with ``error``.
        Those it never took off its ring (numbered after ``last_taken``, which it wrote before
        starting each) never started: they are returned, removed from here, as (requests, done)
        to be started again on the next process."""
        executions = self._executions
        waiting = sorted(
            n for n, e in executions.items() if not e.settled and not e.returned and n > last_taken
        )
        never_started = [executions.pop(number) for number in waiting]
        for execution in list(executions.values()):
            execution.fail(error)
        executions.clear()
        return [(execution.requests, execution.done) for execution in never_started]

    def fail_all(self, error: ServerError) -> None:
        """Fail every execution still here (streams still open when the model unloads)."""
        for execution in self._executions.values():
            execution.fail(error)
        self._executions.clear()


def _rescheduled(payload: dict[str, Any], count: int) -> frozenset[int]:
    """The requests of a ``result`` that ``execute`` released with RESCHEDULE (indices checked: the
    model process is not trusted)."""
    indices = payload.get("rescheduled")
    if not indices:
        return frozenset()
    if type(indices) is not list or any(type(i) is not int or not 0 <= i < count for i in indices):
        raise ValueError(f"a result names rescheduled requests that its execution does not have: {indices!r}")
    return frozenset(indices)


async def _after(
    before: asyncio.Future[None] | None, large: bool, copy: Callable[..., Copied], *args: Any
) -> Copied:
    """``copy(*args)`` once ``before`` has ended, however it did (the ones after it go on): on a
    thread when its tensors are ``large``, else here."""
    if before is not None:
        await asyncio.wait((before,))
    if large:
        return await asyncio.to_thread(copy, *args)
    return copy(*args)


def _described(requests: list[BackendRequest], arena: _ipc.Arena | None) -> list[tuple[Any, ...]]:
    """What an ``execute`` message says of each request, its tensors placed in ``arena`` (emptied
    first: what it held belongs to an execution that has finished)."""
    if arena is not None:
        arena.reset()
    pack = _ipc.pack_tensors
    return [
        (r.id, pack(r.inputs, arena), r.requested_outputs, r.parameters, r.correlation_id, r.flags)
        for r in requests
    ]


def _input_bytes(requests: list[BackendRequest]) -> int:
    total = 0  # loops, not sum() over a generator: this runs for every execution
    for request in requests:
        for array in request.inputs.values():
            total += array.nbytes
    return total


def _answers(
    described: list[Any], rescheduled: frozenset[int], arena: _ipc.Arena | None
) -> list[BackendResponse]:
    return [
        BackendResponse({}, rescheduled=True) if index in rescheduled else backend_response(d, arena)
        for index, d in enumerate(described)
    ]


def backend_response(described: dict[str, Any] | None, arena: _ipc.Arena | None) -> BackendResponse:
    """A response the model process described; its tensors copied out of ``arena``, which the
    process reuses."""
    if described is None:  # only a rescheduled request's place may be empty
        return BackendResponse({}, error=ServerError("execute() gave None for a request not rescheduled"))
    if described["error"] is not None:
        message, code = described["error"]
        return BackendResponse({}, error=error_from_model(message, code))
    outputs = _ipc.unpack_tensors(described["outputs"], arena, copy=True)
    return BackendResponse(outputs, described.get("parameters") or {})
