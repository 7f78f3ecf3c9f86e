"""One instance of a Python model: its process, the executions it holds and the services it calls.

``PythonModelInstance`` is what the backend creates and the scheduler drives. It puts together
three parts, each in its own module, and decides what none of them can alone:

- ``process.ModelProcess``: the child process, its shared-memory arenas and rings;
- ``executions.Executions``: the executions sent to it, their results and streamed responses;
- ``services.ModelServices``: what the process asks of the server (BLS, model control, metrics).

It routes each message from the process to the part it is for, and runs the life of the
instance: a child that dies fails the requests it held and is started again; requests that arrive
meanwhile wait for the new one; unloading runs ``finalize()`` and frees everything.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from pathlib import Path
from typing import Any, cast

from trt.server.backends.python.executions import (
    ExecutionDone,
    Executions,
    StartRequests,
    backend_response,
)
from trt.server.backends.python.process import (
    ARENA_BYTES,
    EXECUTION_SLOTS,
    RING_BYTES,
    Message,
    ModelProcess,
)
from trt.server.backends.python.services import ModelServices
from trt.server.core.backends.base import BackendRequest, BackendResponse, ServerServices
from trt.server.core.errors import ModelLoadError, ServerError, Unavailable

logger = logging.getLogger("trt.backends.python")

_LOG_LEVELS = {"WARNING": logging.WARNING, "ERROR": logging.ERROR, "VERBOSE": logging.DEBUG}


class ModelProcessDied(ServerError):
    """The model's process exited while it held the request."""


class PythonModelInstance:
    """A ``RequestLevelInstance`` with ``start_requests``: see ``trt.server.core.backends.base``."""

    # Executions it can hold at once: one running, the next already in its process' ring.
    execution_slots = EXECUTION_SLOTS
    # ``execute_requests`` without a coroutine: the execution is on its way to the model when this
    # returns, and ``done`` is called from the event loop when it ends (a scheduler saves a task
    # and two trips through the loop per execution). Bound to ``Executions.start_requests``, which
    # the scheduler then calls directly.
    start_requests: StartRequests

    def __init__(self, python: str, model_py: Path, args: dict[str, str], services: ServerServices | None,
                 arena_bytes: int = ARENA_BYTES, ring_bytes: int = RING_BYTES) -> None:  # fmt: skip
        self.python = python
        self.model_py = model_py
        self.args = args
        self._restarting: asyncio.Future[None] | None = None
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._process = process = ModelProcess(
            python,
            model_py,
            args,
            on_message=self._dispatch,
            on_start_up_call=self._answer_during_start,
            on_exit=self._on_process_exit,
            colocation=getattr(services, "colocation", None),
            arena_bytes=arena_bytes,
            ring_bytes=ring_bytes,
        )
        self._tag = process.tag
        self._executions = executions = Executions(
            args["model_name"],
            model_py,
            process.input_arenas,
            process.output_arenas,
            process.post,
            self._start_once_open,
        )
        self._services = model_services = ModelServices(
            services, args["model_name"], model_py, process.post, executions
        )
        # What the hot path calls, bound once: the scheduler's call, and the message handlers.
        self.start_requests = executions.start_requests
        self._on_result = executions.on_result
        self._on_response = executions.on_response
        self._on_sender_dropped = executions.on_sender_dropped
        self._start_bls = model_services.start_bls
        self._cancel_bls = model_services.cancel_bls
        self._update_metric = model_services.update_metric
        self._answer = model_services.answer
        try:
            self._start_process()
        except BaseException:
            process.release()
            raise

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def services(self) -> ServerServices | None:
        """The server this instance's model calls into (BLS, model control), None outside one."""
        return self._services.server

    @services.setter
    def services(self, services: ServerServices | None) -> None:
        self._services.server = services

    # -- messages from the model process -----------------------------------------------------------

    def _dispatch(self, message: Message) -> None:
        kind = message[0]
        if kind == "result":
            self._on_result(message[1], message[2])
        elif kind == "response":
            _, number, index, described, final = message
            # Sent from any thread at any time, so never through an arena: inline in the message.
            answer = backend_response(described, None) if described is not None else None
            self._on_response(number, index, answer, bool(final))
        elif kind == "sender_dropped":
            self._on_sender_dropped(message[1], message[2])
        elif kind == "bls":
            self._start_bls(message[1], message[2])
        elif kind == "bls_cancel":
            self._cancel_bls(message[1])
        elif kind == "metric":
            self._update_metric(message[1], message[2], message[3])
        elif kind == "call":
            self._answer(message[1], message[2], message[3])
        elif kind == "log":
            level = _LOG_LEVELS.get(message[1], logging.INFO)
            logger.log(level, "%s: %s", self.args["model_name"], message[2])
        elif kind == "finalized":
            pass

    def _answer_during_start(self, operation: str, arguments: tuple[Any, ...]) -> dict[str, Any]:
        return self._services.answer_during_start(operation, arguments)

    # -- the life of the process -------------------------------------------------------------------

    def _start_process(self) -> None:
        """Start the child and run ``initialize`` (blocking: called from a loader thread)."""
        try:
            self._process.start()
        except ModelLoadError:
            self._services.release_metrics()  # what initialize() made goes with it
            raise

    def _start_once_open(self, requests: list[BackendRequest], done: ExecutionDone) -> None:
        """``start_requests`` while the executions are not open: the instance is closed, its
        process restarting, or not yet watched from the event loop."""
        if self._closed:  # answered from the loop: a scheduler may call again from ``done``
            asyncio.get_running_loop().call_soon(done, None, Unavailable("the model is unloading"), None)
            return
        if self._restarting is not None:
            self._restarting.add_done_callback(partial(self._after_restart, requests, done))
            return
        self._process.attach()
        self._executions.open = True
        self._executions.start_requests(requests, done)

    def _on_process_exit(self, code: int | None) -> None:
        self._executions.open = False
        if self._closed:
            return
        pid = self._process.pid
        logger.error(
            "Python model process %d (%s) exited with code %s; restarting it", pid, self.model_py, code
        )
        error = ModelProcessDied(
            f"the Python model process (pid {pid}) exited with code {code} before answering; "
            "it is being restarted"
        )
        never_started = self._executions.fail_on_exit(error)
        self._services.release_metrics()  # its metrics go with it; the new process makes its own
        self._process.discard_unsent()
        self._restarting = asyncio.get_running_loop().create_future()
        for requests, done in never_started:  # ahead of requests that arrive while it restarts
            self._restarting.add_done_callback(partial(self._after_restart, requests, done))
        task = asyncio.get_running_loop().create_task(self._restart(self._restarting))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _restart(self, done: asyncio.Future[None]) -> None:
        try:
            await asyncio.to_thread(self._start_process)
            self._process.attach()
            done.set_result(None)
        except Exception as exc:
            logger.error("restarting the Python model process failed: %s", exc)
            done.set_exception(Unavailable(f"the Python model process could not be restarted: {exc}"))
        finally:
            self._restarting = None

    def _after_restart(
        self, requests: list[BackendRequest], done: ExecutionDone, restart: asyncio.Future[None]
    ) -> None:
        if restart.cancelled():
            done(None, Unavailable("the Python model process was not restarted"), None)
        elif restart.exception() is not None:
            done(None, restart.exception(), None)
        elif all(request.cancelled for request in requests):  # nobody waits for it any more
            done(None, ServerError("the request was cancelled while the model process restarted"), None)
        else:
            self.start_requests(requests, done)

    # -- the RequestLevelInstance interface -----------------------------------------------------

    async def execute_requests(self, requests: list[BackendRequest]) -> list[BackendResponse]:
        future: asyncio.Future[list[BackendResponse]] = asyncio.get_running_loop().create_future()

        def done(answers: list[BackendResponse] | None, error: BaseException | None, _: int | None) -> None:
            if not future.done():
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(cast(list[BackendResponse], answers))

        self.start_requests(requests, done)
        return await future

    async def aclose(self) -> None:
        """Run the model's finalize(), stop the process and free the arenas."""
        if self._closed:
            return
        self._close_gates()
        if self._restarting is not None:
            try:
                await asyncio.shield(self._restarting)
            except Exception:
                pass
        await self._process.stop()
        self._services.release_metrics()
        # Streams still open after the drain.
        self._executions.fail_all(Unavailable("the model was unloaded before it sent its final response"))

    def close(self) -> None:
        """Synchronous fallback (a half-loaded model): stop the process without finalize()."""
        self._close_gates()
        self._process.kill()
        self._services.release_metrics()

    def _close_gates(self) -> None:
        """From now on no execution starts and nothing more is sent for the model's own calls."""
        self._closed = True
        self._executions.open = False
        self._services.stop()
