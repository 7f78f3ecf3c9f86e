"""One instance of a Python model: its process, the executions it holds and the services it calls.

``PythonModelInstance`` is what the backend creates and the scheduler drives. It puts together
three parts, each in its own module, and decides what none of them can alone:

- ``process.ModelProcess``: the child process, its shared-memory arenas and rings;
- ``executions.Executions``: the executions sent to it, their results and streamed responses;
- ``services.ModelServices``: what the process asks of the server (BLS, model control, metrics).

It routes each message from the process to the part it is for, and runs the life of the instance,
a state machine (``State``)::

    SERVING ──process exits──▶ RESTARTING ──start works──▶ SERVING
                                  │   ▲
                    start fails   │   │ backoff elapsed (attempts left)
                                  ▼   │
                               BACKING_OFF ──no attempts left──▶ FAILED
    FAILED ──a request arrives, no attempt for ON_DEMAND_INTERVAL_S──▶ RESTARTING (one attempt)
    any state ──aclose()/close()──▶ CLOSED

- SERVING: a process runs; executions go to it (the event loop starts watching it on first use).
- The process exits (killed, crashed, ``os._exit``): the state becomes RESTARTING *before*
  anything else happens, so that an execution the scheduler starts from a ``done`` callback (a
  result read from the ring, a failure) waits for the new process instead of going to the dead
  one. What the process sent before it died is then handled; the execution it was running fails
  with Triton's text ("Failed to process the request(s) for model instance '<m>_0', message: Stub
  process is not healthy.", HTTP 500); the executions held behind it never started and are run
  again on the new process, ahead of those that arrived meanwhile.
- RESTARTING: the old process is reaped (its exit code logged), a new one is started on a thread
  (``initialize()`` runs again); executions that arrive wait for it.
- A start that fails fails every waiting execution at once (nothing waits through a backoff) and
  the instance goes to BACKING_OFF: executions are answered at once with the same 500, and a new
  attempt follows after ``RESTART_BACKOFF_S[n]`` (0.5 s, 1 s, 2 s, 4 s, 8 s).
- FAILED, after ``len(RESTART_BACKOFF_S) + 1`` failed attempts in a row: no more attempts on a
  timer; each request is answered at once, and one that arrives at least ``ON_DEMAND_INTERVAL_S``
  after the last attempt ended starts a new one and waits for it (Triton retries on the next request,
  every request). So a cause that goes away is recovered from, and a cause that stays costs at most
  one start every ``ON_DEMAND_INTERVAL_S``.
- ``ready`` is true only in SERVING: the model is not READY while an instance of it has no
  process that can serve (the core's model readiness and strict server readiness ask it).
- CLOSED: unloading runs ``finalize()`` (after any start in progress ends) and frees everything;
  executions are answered 503 "the model is unloading".
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from pathlib import Path
from typing import Any, cast

from trt.server.backends.python.executions import (
    ExecutionDone,
    Executions,
    StartRequests,
    backend_response,
)
from trt.server.backends.python.extras import missing_extra
from trt.server.backends.python.process import (
    ARENA_BYTES,
    EXECUTION_SLOTS,
    RING_BYTES,
    Message,
    ModelInitializeError,
    ModelProcess,
)
from trt.server.backends.python.readiness import UserReadiness
from trt.server.backends.python.services import ModelServices
from trt.server.backends.python.stub import _ipc
from trt.server.core.backends.base import BackendRequest, BackendResponse, ServerServices
from trt.server.core.errors import ModelLoadError, ServerError, Unavailable

logger = logging.getLogger("trt.backends.python")

# What an idle model's finalize() still gets when the server stops with its exit timeout spent (on a
# request stuck in another model, say); Triton's ServerStop unloads idle models while it waits.
MIN_FINALIZE_GRACE_S = 1.0

_LOG_LEVELS = {"WARNING": logging.WARNING, "ERROR": logging.ERROR, "VERBOSE": logging.DEBUG}

# Waits before the 2nd, 3rd, ... start attempt after a failed one; then FAILED.
RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)
ON_DEMAND_INTERVAL_S = 10.0  # in FAILED, at most one start attempt (set off by a request) this often


class State(enum.Enum):
    SERVING = "serving"
    RESTARTING = "restarting"
    BACKING_OFF = "backing off"
    FAILED = "failed"
    CLOSED = "closed"


class ModelProcessDied(ServerError):
    """The model's process exited while it held the request, or no process can take it (HTTP 500,
    as Triton answers)."""


_Waiting = tuple[list[BackendRequest], ExecutionDone]


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
        self.state = State.SERVING
        self._waiting: list[_Waiting] = []  # executions waiting for a start in progress, in order
        self._failures = 0  # start attempts that failed in a row
        self._last_attempt = 0.0  # time.monotonic() when the last failed start attempt ended
        self._last_error = ""  # why the last start attempt failed
        self._restart_task: asyncio.Task[None] | None = None
        self._wake_restart: asyncio.Event | None = None  # cuts a backoff short (aclose)
        self._readiness: UserReadiness | None = None  # the model's own is_ready(), if it has one
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
            services, args["model_name"], model_py, process.post, executions, process.room
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
    def ready(self) -> bool:
        """A process runs and takes executions (not restarting, failed or closed), and the model's
        own ``is_ready()``, if it has one, last said so (see ``readiness``)."""
        if self.state is not State.SERVING:
            return False
        readiness = self._readiness
        if readiness is None:
            return True
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return readiness.value  # asked from a thread: nothing to start from here
        self._process.attach()  # its answers come through the rings, which the loop must watch
        readiness.watch()
        return readiness.value

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
        elif kind == "user_ready":
            if self._readiness is not None:
                self._readiness.answered(message[1])
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
        except ModelLoadError as exc:
            self._services.release_metrics()  # what initialize() made goes with it
            if isinstance(exc, ModelInitializeError):
                # Wanting a module that one of trt's extras installs is said in one line that names
                # the extra (the model is skipped as a backend without its library would be); the
                # traceback would only bury it on a base install's start-up.
                level = logging.DEBUG if missing_extra(exc.message) else logging.ERROR
                logger.log(level, "initialize() of %s failed:\n%s", self.model_py, exc.traceback)
            raise
        first = self._process.first_readiness
        if first is not None:  # the model has its own is_ready()
            if self._readiness is None:
                self._readiness = UserReadiness(self._process.ask_readiness)
            self._readiness.started(first)

    def _start_once_open(self, requests: list[BackendRequest], done: ExecutionDone) -> None:
        """``start_requests`` while the executions are not open: the process is not yet watched
        from the event loop, restarting, down, or the instance is closed. Never calls ``done``
        at once: a scheduler may start another execution from it."""
        state = self.state
        if state is State.SERVING:
            self._process.attach()
            self._executions.open = True
            self._executions.start_requests(requests, done)
        elif state is State.RESTARTING:
            self._waiting.append((requests, done))
        elif state is State.CLOSED:
            asyncio.get_running_loop().call_soon(done, None, Unavailable("the model is unloading"), None)
        else:
            if state is State.FAILED and time.monotonic() - self._last_attempt >= ON_DEMAND_INTERVAL_S:
                self._waiting.append((requests, done))  # waits for the attempt it sets off
                self._begin_restart(attempts=1)
                return
            error = self._unhealthy(f"could not be restarted: {self._last_error}")
            asyncio.get_running_loop().call_soon(done, None, error, None)

    def _unhealthy(self, why: str) -> ModelProcessDied:
        name = self.args.get("model_instance_name", self.args["model_name"])
        return ModelProcessDied(
            f"Failed to process the request(s) for model instance '{name}', message: Stub process is "
            f"not healthy. The Python model process {why}."
        )

    def _on_process_exit(self) -> None:
        """The process is gone (its socket closed)."""
        if self.state is State.CLOSED:
            return
        # First, so that whatever a ``done`` below sets off waits for the new process.
        self.state = State.RESTARTING
        self._executions.open = False
        try:
            self._process.read_all_messages()  # what it sent before it died still counts
        except Exception:
            logger.exception("reading the last messages of %s's process failed", self.args["model_name"])
        self._process.disconnect()
        self._process.discard_unsent()
        self._services.release_metrics()  # its metrics go with it; the new process makes its own
        arrived = self._waiting
        self._waiting = []
        error = self._unhealthy("exited; it is being restarted")
        never_started = self._executions.fail_on_exit(error, self._process.last_taken())
        # Those it held but never started go first, then those sent since (by ``done`` calls above).
        self._waiting = [*never_started, *arrived, *self._waiting]
        self._begin_restart(attempts=len(RESTART_BACKOFF_S) + 1, reap=True)

    def _begin_restart(self, attempts: int, reap: bool = False) -> None:
        self.state = State.RESTARTING
        self._wake_restart = asyncio.Event()
        self._restart_task = asyncio.get_running_loop().create_task(self._restart(attempts, reap))

    async def _restart(self, attempts: int, reap: bool) -> None:
        try:
            await self._restart_attempts(attempts, reap)
        except Exception as exc:  # a bug here must not leave executions waiting for good
            logger.exception("restarting the Python model process of %s failed", self.args["model_name"])
            if self.state is not State.CLOSED:
                self._last_error = str(exc)
                self.state = State.FAILED
                self._fail_waiting(self._unhealthy(f"could not be restarted: {exc}"))

    async def _restart_attempts(self, attempts: int, reap: bool) -> None:
        if reap:
            code = await asyncio.to_thread(self._process.reap)
            logger.error(
                "Python model process %d of %s (%s) exited with %s; restarting it",
                self._process.pid, self.args["model_name"], self.model_py, _exit_text(code),
            )  # fmt: skip
        for attempt in range(attempts):
            if self.state is State.CLOSED:
                return
            self.state = State.RESTARTING
            try:
                await asyncio.to_thread(self._start_process)
            except Exception as exc:
                self._last_attempt = time.monotonic()  # when it ended
                self._failures += 1
                self._last_error = str(exc)
                logger.error(
                    "restarting the Python model process of %s failed (attempt %d in a row): %s",
                    self.args["model_name"], self._failures, exc,
                )  # fmt: skip
                if self.state is State.CLOSED:
                    return
                # The state first: a scheduler starts its next execution from these ``done``
                # calls, and that one must be answered too, not left waiting.
                self.state = State.FAILED if attempt + 1 == attempts else State.BACKING_OFF
                self._fail_waiting(self._unhealthy(f"could not be restarted: {exc}"))
                if self.state is not State.BACKING_OFF:
                    return
                assert self._wake_restart is not None
                delay = RESTART_BACKOFF_S[min(attempt, len(RESTART_BACKOFF_S) - 1)]
                try:
                    await asyncio.wait_for(self._wake_restart.wait(), timeout=delay)
                except TimeoutError:
                    pass
                continue
            if self.state is State.CLOSED:  # unloaded meanwhile: aclose() stops the new process
                return
            self._failures = 0
            self._process.attach()
            self.state = State.SERVING
            self._executions.open = True
            waiting, self._waiting = self._waiting, []
            cancelled = ServerError("the request was cancelled while the model process restarted")
            for requests, done in waiting:
                if all(request.cancelled for request in requests):  # nobody waits for it any more
                    done(None, cancelled, None)
                else:
                    self.start_requests(requests, done)
            return

    def _fail_waiting(self, error: ServerError) -> None:
        waiting, self._waiting = self._waiting, []
        for _requests, done in waiting:
            done(None, error, None)

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
        if self.state is State.CLOSED:
            return
        self._close_gates()
        restart = self._restart_task
        if restart is not None and not restart.done():
            assert self._wake_restart is not None
            self._wake_restart.set()  # a backoff ends now; a start in progress is waited for
            try:
                # While the server stops, only until its exit timeout: an initialize() that takes
                # minutes (weights loading again after a crash) is cut short, as a stuck execute() is.
                await asyncio.wait_for(asyncio.shield(restart), timeout=self._time_left_to_stop())
            except TimeoutError:
                logger.warning(
                    "the process of %s was still starting at the server's exit timeout: killed", self.model_py
                )
                self._note_cut_short("killed while it started")
                self._process.abort_start()
                await asyncio.shield(restart)
        self._fail_waiting(Unavailable("the model is unloading"))
        if not await self._process.stop(self._finalize_grace()):
            self._note_cut_short("killed, still busy at the exit timeout")
        self._services.release_metrics()
        # Streams still open after the drain.
        self._executions.fail_all(Unavailable("the model was unloaded before it sent its final response"))

    def _note_cut_short(self, what: str) -> None:
        """Only a stopping server's kills count: an unload's grace is the model's own."""
        if self.services is not None and self.services.stop_deadline is not None:
            name = self.args.get("model_instance_name", self.args["model_name"])
            self.services.note_cut_short(f"model '{self.args['model_name']}' ({name}) {what}")

    def _time_left_to_stop(self) -> float | None:
        """Seconds left of a stopping server's exit timeout (0 once spent); None while it serves."""
        deadline = self.services.stop_deadline if self.services is not None else None
        return None if deadline is None else max(deadline - time.monotonic(), 0.0)

    def _finalize_grace(self) -> float:
        """How long ``finalize()`` may take before the process is killed: its usual grace, or, while
        the server stops, what is left of its exit timeout (at least a second, for idle models)."""
        left = self._time_left_to_stop()
        if left is None:
            return _ipc.FINALIZE_GRACE_S
        return min(_ipc.FINALIZE_GRACE_S, max(left, MIN_FINALIZE_GRACE_S))

    def close(self) -> None:
        """Synchronous fallback (a half-loaded model): stop the process without finalize()."""
        self._close_gates()
        self._process.kill()
        self._services.release_metrics()

    def _close_gates(self) -> None:
        """From now on no execution starts and nothing more is sent for the model's own calls."""
        self.state = State.CLOSED
        self._executions.open = False
        self._services.stop()
        if self._readiness is not None:
            self._readiness.stop()


def _exit_text(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        return f"signal {-code}"
    return f"code {code}"
