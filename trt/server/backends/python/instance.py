"""One instance of a Python model: a child process, its shared-memory arenas and its rings.

Messages cross through two shared-memory rings (``_ipc.Ring``), each message announced on an
eventfd; the event loop waits on the model's eventfd with ``add_reader`` (no thread hop). Inputs
are written into an input arena, outputs read back from an output arena; BYTES tensors travel
in the messages. There are two pairs of arenas, one per execution slot: the scheduler may hand an
instance its next execution while one runs (``execution_slots``), so that the model process goes
from one ``execute`` to the next without waiting for the event loop to see the first one's result.

The socket that carried start-up stays open to tell each side when the other exits: a child that
dies fails the requests it held and is started again; requests that arrive meanwhile wait for the
new one.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import secrets
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any, cast

from trt.server.backends.python.stub import _ipc
from trt.server.core.backends.base import BackendRequest, BackendResponse, ServerServices
from trt.server.core.errors import (
    AlreadyExists,
    DecoupledModelNeedsStream,
    InvalidArgument,
    ModelLoadError,
    NotFound,
    ServerError,
    Unavailable,
    Unsupported,
)
from trt.server.core.extensions.custom_metrics import Owner
from trt.server.core.extensions.tracing import Trace
from trt.server.core.scheduling.cpu_colocation import CpuColocation
from trt.server.core.types import InferenceRequest, InferenceResponse, InputTensor, RequestedOutput

logger = logging.getLogger("trt.backends.python")

STUB = Path(__file__).resolve().parent / "stub" / "trt_python_stub.py"
ARENA_BYTES = 16 * 1024 * 1024  # per slot and direction
EXECUTION_SLOTS = 2
RING_BYTES = 1 << 20  # per direction; a message over a quarter of it spills into a segment of its own
START_TIMEOUT_S = 120.0

# pb_utils.TritonError codes <-> the core's errors.
_ERRORS_BY_CODE: dict[int, type[ServerError]] = {
    2: NotFound, 3: InvalidArgument, 4: Unavailable, 5: Unsupported, 6: AlreadyExists,
}  # fmt: skip
_CODES_BY_TRITON_NAME = {
    "NOT_FOUND": 2,
    "INVALID_ARG": 3,
    "UNAVAILABLE": 4,
    "UNSUPPORTED": 5,
    "ALREADY_EXISTS": 6,
}


class ModelProcessDied(ServerError):
    """The model's process exited while it held the request."""


# Called once per execution, from the event loop: (responses, None) or (None, the error), and
# when the model process started it (perf_counter ns; None if it never did).
ExecutionDone = Callable[[list[BackendResponse] | None, BaseException | None, int | None], None]


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
        if self.streamed:
            self.settle([BackendResponse({}) for _ in range(self.count)])  # answers go by the streams
            return
        if len(self.finals) < self.count:
            return
        answers = []
        for index, responses in enumerate(self.responses):
            if self.requests[index].on_response is not None:
                answers.append(BackendResponse({}))  # already delivered, one by one
            elif not responses:
                answers.append(
                    BackendResponse({}, error=ServerError(f"the model sent no response for request {index}"))
                )
            else:
                answers.append(responses[0])
        self.settle(answers)


class PythonModelInstance:
    # Executions it can hold at once: one running, the next already in its process' ring.
    execution_slots = EXECUTION_SLOTS

    def __init__(self, python: str, model_py: Path, args: dict[str, str], services: ServerServices | None,
                 arena_bytes: int = ARENA_BYTES, ring_bytes: int = RING_BYTES) -> None:  # fmt: skip
        self.python = python
        self.model_py = model_py
        self.args = args
        self.services = services
        self._colocation: CpuColocation | None = getattr(services, "colocation", None)
        registry = getattr(services, "custom_metrics", None)
        # The metric families and series this model's process holds (pb_utils.MetricFamily).
        self._metrics: Owner | None = registry.owner() if registry is not None else None
        self._tag = tag = f"trt_{os.getpid()}_{secrets.token_hex(4)}"
        self._arena_bytes = arena_bytes
        self._ring_bytes = ring_bytes
        control_bytes = 2 * _ipc.Ring.bytes_needed(ring_bytes)
        slots = EXECUTION_SLOTS
        self._memories = [  # tmpfs: only the pages written are ever allocated
            shared_memory.SharedMemory(name=f"{tag}_in", create=True, size=slots * arena_bytes),
            shared_memory.SharedMemory(name=f"{tag}_out", create=True, size=slots * arena_bytes),
            shared_memory.SharedMemory(name=f"{tag}_ctl", create=True, size=control_bytes),
        ]
        self._input_arenas = _ipc.slot_arenas(f"{tag}_in", arena_bytes, slots)
        self._output_arenas = _ipc.slot_arenas(f"{tag}_out", arena_bytes, slots)
        self._control = _ipc.map_segment(f"{tag}_ctl", control_bytes)
        self._outbox, self._inbox = _ipc.ring_pair(self._control, ring_bytes, f"{tag}_x")
        self._backlog: list[Any] = []  # messages waiting for room in the outbox (rare)
        self._to_model = self._to_server = -1  # eventfds
        self._executions: dict[int, _Execution] = {}
        self._next_execution = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._restarting: asyncio.Future[None] | None = None
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._bls_streams: dict[int, asyncio.Task[Any]] = {}  # exec(decoupled=True) calls by number
        try:
            self._start_process()
        except BaseException:
            self._release_memory()
            raise

    @property
    def pid(self) -> int:
        return self._process.pid

    # -- process ---------------------------------------------------------------------------------

    def _start_process(self) -> None:
        """Start the child and run ``initialize`` (blocking: called from a loader thread)."""
        self._outbox.reset()
        self._inbox.reset()
        to_model, to_server = os.eventfd(0), os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        parent, child = socket.socketpair()
        env = dict(os.environ)
        # pb_utils comes first; the model's folders are appended by the process itself, as Triton does.
        env["PYTHONPATH"] = os.pathsep.join(
            [str(STUB.parent), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
        )
        try:
            self._process = subprocess.Popen(
                [self.python, str(STUB), "--fd", str(child.fileno())],
                pass_fds=(child.fileno(), to_model, to_server),
                env=env,
            )
        except OSError as exc:
            parent.close()
            os.close(to_model)
            os.close(to_server)
            raise ModelLoadError(f"cannot start the Python model process with {self.python}: {exc}") from None
        finally:
            child.close()
        parent.settimeout(START_TIMEOUT_S)
        channel = {
            "segment": f"{self._tag}_ctl",
            "size": 2 * _ipc.Ring.bytes_needed(self._ring_bytes),
            "capacity": self._ring_bytes,
            "spill_prefix": f"{self._tag}_x",
            "wait_fd": to_model,
            "wake_fd": to_server,
        }
        arenas = (
            (f"{self._tag}_in", self._arena_bytes, EXECUTION_SLOTS),
            (f"{self._tag}_out", self._arena_bytes, EXECUTION_SLOTS),
        )
        try:
            parent.sendall(_ipc.encode_frame(("init", self.args, str(self.model_py), *arenas, channel)))
            frames = _ipc.BlockingFrameSource(parent)
            reply = frames.next()
            while reply[0] in ("log", "metric", "call"):  # from initialize(), before it finishes
                if reply[0] == "call":  # answered over the socket: the rings are not in use yet
                    answer = self._answer_from_loader(reply[2], reply[3])
                    parent.sendall(_ipc.encode_frame(("answer", reply[1], answer)))
                else:
                    self._dispatch(reply)
                reply = frames.next()
        except (OSError, EOFError) as exc:
            reply = ("init_error", f"the Python model process exited during start-up ({exc})", "")
        if reply[0] != "ready":
            self._process.kill()
            self._process.wait()
            if self._metrics is not None:
                self._metrics.release_all()
            parent.close()
            os.close(to_model)
            os.close(to_server)
            if reply[2]:
                logger.error("initialize() of %s failed:\n%s", self.model_py, reply[2])
                raise ModelLoadError(f"initialize() failed: {reply[1]}")
            raise ModelLoadError(f"{reply[1]}; see the log for its output")
        parent.setblocking(False)
        self._sock = parent
        self._late_frames = _ipc.FrameReader()
        self._to_model, self._to_server = to_model, to_server
        self._loop = None  # the readers are attached on first use, from the event loop

    def _attach(self) -> None:
        if self._loop is None:
            loop = self._loop = asyncio.get_running_loop()
            loop.add_reader(self._to_server, self._on_messages)
            loop.add_reader(self._sock.fileno(), self._on_socket)
            if self._colocation is not None:
                self._colocation.add(self._process.pid, loop)

    def _on_messages(self) -> None:
        try:
            os.eventfd_read(self._to_server)
        except BlockingIOError:
            pass
        inbox, empty = self._inbox, _ipc.EMPTY
        message = inbox.get()
        while message is not empty:
            self._dispatch(message)
            message = inbox.get()

    def _on_socket(self) -> None:
        try:
            data = self._sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # it exited
            self._on_death()
            return
        for message in self._late_frames.feed(data):  # sent before it switched to the rings
            self._dispatch(message)

    def _on_death(self) -> None:
        assert self._loop is not None
        self._on_messages()  # what it sent before it died still counts
        self._disconnect()
        code = self._process.poll()  # None if it closed the socket but has not exited yet
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
        # It runs executions in order, one at a time: the first that has not returned was running;
        # those behind it (held in its ring) never started, and go to the new process instead.
        waiting = sorted(n for n, e in self._executions.items() if not e.settled and not e.returned)
        never_started = [self._executions.pop(number) for number in waiting[1:]]
        for execution in list(self._executions.values()):
            execution.fail(error)
        self._executions.clear()
        if self._metrics is not None:  # its metrics go with it; the new process makes its own
            self._metrics.release_all()
        self._backlog.clear()
        self._remove_spills()
        self._restarting = asyncio.get_running_loop().create_future()
        for execution in never_started:  # ahead of requests that arrive while it restarts
            self._restarting.add_done_callback(
                partial(self._after_restart, execution.requests, execution.done)
            )
        task = asyncio.get_running_loop().create_task(self._restart(self._restarting))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _disconnect(self) -> None:
        """Stop watching the child and close this side of its connection."""
        if self._loop is not None:
            if self._colocation is not None:
                self._colocation.discard(self._process.pid)
            self._loop.remove_reader(self._to_server)
            self._loop.remove_reader(self._sock.fileno())
            self._loop = None
        self._sock.close()
        for fd in (self._to_model, self._to_server):
            if fd >= 0:
                os.close(fd)
        self._to_model = self._to_server = -1

    def _remove_spills(self) -> None:
        for path in glob.glob(f"/dev/shm/{self._tag}_x*"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    async def _restart(self, done: asyncio.Future[None]) -> None:
        try:
            await asyncio.to_thread(self._start_process)
            self._attach()
            done.set_result(None)
        except Exception as exc:
            logger.error("restarting the Python model process failed: %s", exc)
            done.set_exception(Unavailable(f"the Python model process could not be restarted: {exc}"))
        finally:
            self._restarting = None

    # -- messages ------------------------------------------------------------------------------

    def _dispatch(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "result":
            self._on_result(message[1], message[2])
        elif kind == "response":
            _, number, index, described, final = message
            # Sent from any thread at any time, so never through an arena: inline in the message.
            answer = _response(described, None) if described is not None else None
            self._on_response(number, index, answer, bool(final))
        elif kind == "sender_dropped":
            self._on_sender_dropped(message[1], message[2])
        elif kind == "bls":
            call = message[1]
            task = asyncio.get_running_loop().create_task(self._bls(call, message[2]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            if message[2].get("decoupled"):  # ResponseIterator.cancel() may stop it
                self._bls_streams[call] = task
                task.add_done_callback(partial(self._forget_bls_stream, call))
        elif kind == "bls_cancel":
            stream_task = self._bls_streams.get(message[1])
            if stream_task is not None:
                stream_task.cancel()
        elif kind == "metric":
            self._metric_update(message[1], message[2], message[3])
        elif kind == "call":
            self._answer(message[1], message[2], message[3])
        elif kind == "log":
            level = {"WARNING": logging.WARNING, "ERROR": logging.ERROR, "VERBOSE": logging.DEBUG}.get(
                message[1], logging.INFO
            )
            logger.log(level, "%s: %s", self.args["model_name"], message[2])
        elif kind == "finalized":
            pass

    def _on_response(self, number: int, index: int, answer: BackendResponse | None, final: bool) -> None:
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

    def _on_sender_dropped(self, number: int, index: int) -> None:
        """The model let go of a request's response sender (or returned None from execute() without
        ever making one) before sending the final flag: nothing can answer it any more. A stream ends
        with an error; a request that waits for one response gets what was sent, or an error."""
        execution = self._executions.get(number)
        if execution is None or index in execution.finals:
            return
        answered = execution.requests[index].on_response is None and execution.responses[index]
        error = ServerError(
            f"model '{self.args['model_name']}' let go of the response sender of request {index} of an "
            "execute() call without sending the final flag (TRITONSERVER_RESPONSE_COMPLETE_FINAL)"
        )
        self._on_response(number, index, None if answered else BackendResponse({}, error=error), True)

    def _on_result(self, number: int, payload: dict[str, Any]) -> None:
        execution = self._executions.get(number)
        if execution is None:
            return
        execution.started_ns = payload.get("started_ns")
        if payload.get("withdrawn"):  # cancelled before it started: it never ran
            execution.fail(ServerError("the request was cancelled before its execution started"))
        elif "error" in payload:
            message, code = payload["error"]
            if payload.get("traceback"):
                logger.debug("execute() of %s raised:\n%s", self.model_py, payload["traceback"])
            error = _ERRORS_BY_CODE.get(code, ServerError)(message)
            execution.finals.update(range(execution.count))  # each request ends with this error
            execution.settle([BackendResponse({}, error=error) for _ in range(execution.count)])
        elif payload["responses"] is None:
            execution.returned = True
            execution.settle_if_complete()
        else:
            arena = None if execution.slot is None else self._output_arenas[execution.slot]
            answers = [_response(d, arena) for d in payload["responses"]]
            for request, answer in zip(execution.requests, answers, strict=True):
                if request.on_response is not None:  # a decoupled model that returned its responses anyway
                    request.on_response(answer, True)
            execution.finals.update(range(execution.count))
            execution.settle(answers)
        if execution.finished:
            self._executions.pop(number, None)

    async def _bls(self, call: int, payload: dict[str, Any]) -> None:
        """A request from the model to another model, through the server's own scheduler."""
        answer: dict[str, Any]
        try:
            if self.services is None:
                raise Unavailable("BLS is not available in this context")
            request = _bls_request(payload)
            if payload.get("decoupled"):
                await self._bls_stream(call, request)
                return
            request.trace = self._bls_trace(payload.get("trace_origin"), request)
            try:
                answer = _bls_answer(await self.services.infer(request))
            finally:
                if request.trace is not None:
                    self.services.tracer.finish(request.trace)
        except DecoupledModelNeedsStream as exc:
            message = f"model '{exc.model_name}' is decoupled: call exec(decoupled=True) for its responses"
            answer = _call_error(Unsupported(message))
        except Exception as exc:
            answer = self._bls_failure(exc)
        if not self._closed:
            self._post(("answer", call, answer))

    def _bls_trace(self, origin: tuple[int, int] | None, request: InferenceRequest) -> Trace | None:
        """A trace for a BLS call made with ``trace=request.trace()`` of a request being traced:
        a child of that request's trace, as in Triton (other BLS calls are not traced)."""
        if origin is None or self.services is None:
            return None
        execution = self._executions.get(origin[0])
        parent = execution.requests[origin[1]].trace if execution is not None else None
        if parent is None:
            return None
        return self.services.tracer.child(parent, request.model_name, request.model_version, request.id)

    async def _bls_stream(self, call: int, request: InferenceRequest) -> None:
        """``exec(decoupled=True)``: each response goes to the model as it comes (an LLM-style model
        forwards them while the called model still works), the last one marked final."""
        assert self.services is not None
        final = False
        try:
            async for item in self.services.infer_stream(request):
                if self._closed:
                    return
                if item.error is not None:
                    answer: dict[str, Any] | None = self._bls_failure(item.error)
                else:
                    answer = _bls_answer(item.response) if item.response is not None else None
                final = item.final
                self._post(("bls_stream", call, answer, final))
        except asyncio.CancelledError:  # the model cancelled the call (ResponseIterator.cancel())
            if not self._closed:
                self._post(("bls_stream", call, {"error": ("the request was cancelled", _CANCELLED)}, True))
            return
        except Exception as exc:
            if not self._closed:
                self._post(("bls_stream", call, self._bls_failure(exc), True))
            return
        if not final and not self._closed:
            self._post(("bls_stream", call, None, True))

    def _forget_bls_stream(self, call: int, _task: asyncio.Task[Any]) -> None:
        self._bls_streams.pop(call, None)

    def _bls_failure(self, exc: BaseException) -> dict[str, Any]:
        if isinstance(exc, ServerError):
            return _call_error(exc)
        logger.error("BLS call from %s failed", self.model_py, exc_info=exc)
        return {"error": (f"{type(exc).__name__}: {exc}", 1)}

    # -- calls the model waits on ------------------------------------------------------------------

    def _answer(self, call: int, operation: str, arguments: tuple[Any, ...]) -> None:
        if operation in _MODEL_CONTROL:
            task = asyncio.get_running_loop().create_task(self._answer_later(call, operation, arguments))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self._post(("answer", call, self._call(operation, arguments)))

    async def _answer_later(self, call: int, operation: str, arguments: tuple[Any, ...]) -> None:
        answer = await self._model_control(operation, arguments)
        if not self._closed:
            self._post(("answer", call, answer))

    def _answer_from_loader(self, operation: str, arguments: tuple[Any, ...]) -> dict[str, Any]:
        """A call from ``initialize()``, which runs on a loader thread: model control goes to the
        event loop and this thread waits for it."""
        if operation not in _MODEL_CONTROL:
            return self._call(operation, arguments)
        loop = getattr(self.services, "event_loop", None)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            return _call_error(Unavailable(f"{operation} is not available in this context"))
        return asyncio.run_coroutine_threadsafe(self._model_control(operation, arguments), loop).result()

    def _call(self, operation: str, arguments: tuple[Any, ...]) -> dict[str, Any]:
        """Creating a metric family or series, reading a metric, asking if a model is ready."""
        try:
            if operation == "request_cancelled":
                number, index = arguments
                execution = self._executions.get(number)
                # An execution no longer here has been answered or failed: nobody reads more.
                return {"value": execution is None or execution.requests[index].cancelled}
            if operation == "model_ready":
                if self.services is None:
                    raise Unavailable("is_model_ready is not available in this context")
                return {"value": self.services.model_ready(*arguments)}
            if self._metrics is None:
                raise Unavailable("custom metrics are not available in this context")
            if operation == "metric_family":
                return {"value": self._metrics.new_family(*arguments)}
            if operation == "metric_series":
                return {"value": self._metrics.new_series(*arguments)}
            if operation == "metric_value":
                return {"value": self._metrics.registry.value(*arguments)}
            raise InvalidArgument(f"unknown operation '{operation}'")
        except ServerError as exc:
            return _call_error(exc)
        except TypeError as exc:  # wrong arguments from the model's side
            return {"error": (f"{operation}: {exc}", 3)}

    async def _model_control(self, operation: str, arguments: tuple[Any, ...]) -> dict[str, Any]:
        """``pb_utils.load_model`` and ``unload_model``, through the server as its API would."""
        try:
            if self.services is None:
                raise Unavailable(f"{operation} is not available in this context")
            if operation == "load_model":
                name, config, files = arguments
                if name == self.args["model_name"]:
                    raise InvalidArgument(f"model '{name}' cannot load itself")
                await self.services.load_model(name, config or None, files or None)
                return {"value": True}
            name, unload_dependents = arguments
            # As Triton, the model is no longer ready when the call returns, but the requests it
            # holds (maybe the caller's own) still finish: answer once the unload has begun.
            unload = asyncio.get_running_loop().create_task(
                self.services.unload_model(name, bool(unload_dependents))
            )
            self._tasks.add(unload)
            unload.add_done_callback(self._tasks.discard)
            await asyncio.sleep(0)
            if unload.done():
                unload.result()
            return {"value": True}
        except ServerError as exc:
            return _call_error(exc)
        except (TypeError, ValueError) as exc:
            return {"error": (f"{operation}: {exc}", 3)}

    def _metric_update(self, operation: str, handle: int, value: float) -> None:
        """A metric operation the model does not wait on (it checked kinds and signs itself)."""
        metrics = self._metrics
        if metrics is None:
            return
        try:
            if operation == "increment":
                metrics.registry.increment(handle, value)
            elif operation == "set":
                metrics.registry.set(handle, value)
            elif operation == "observe":
                metrics.registry.observe(handle, value)
            elif operation == "release_series":
                metrics.release_series(handle)
            elif operation == "release_family":
                metrics.release_family(handle)
        except ServerError as exc:
            logger.warning("%s: metric %s refused: %s", self.args["model_name"], operation, exc.message)

    def _post(self, message: Any) -> None:
        """Send ``message`` to the child: into its ring, then a wake-up on its eventfd."""
        if self._to_model < 0:
            return  # no child (it died; the requests it held have failed)
        if self._backlog or not self._outbox.put(message):
            self._backlog.append(message)
            if len(self._backlog) == 1:
                asyncio.get_running_loop().call_later(0.001, self._flush_backlog)
            return
        os.eventfd_write(self._to_model, 1)

    def _flush_backlog(self) -> None:
        while self._backlog and self._to_model >= 0 and self._outbox.put(self._backlog[0]):
            self._backlog.pop(0)
            os.eventfd_write(self._to_model, 1)
        if self._backlog and self._to_model >= 0:
            asyncio.get_running_loop().call_later(0.001, self._flush_backlog)

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

    def start_requests(self, requests: list[BackendRequest], done: ExecutionDone) -> None:
        """``execute_requests`` without a coroutine: the execution is on its way to the model when
        this returns, and ``done`` is called from the event loop when it ends (a scheduler saves a
        task and two trips through the loop per execution)."""
        if self._closed:  # answered from the loop: a scheduler may call again from ``done``
            asyncio.get_running_loop().call_soon(done, None, Unavailable("the model is unloading"), None)
            return
        if self._restarting is not None:
            self._restarting.add_done_callback(partial(self._after_restart, requests, done))
            return
        if self._loop is None:
            self._attach()
        number = self._next_execution
        self._next_execution += 1
        slot = self._free_slot()
        arena = None
        if slot is not None:
            arena = self._input_arenas[slot]
            arena.reset()
        pack = _ipc.pack_tensors
        metas = [
            (r.id, pack(r.inputs, arena), r.requested_outputs, r.parameters, r.correlation_id, r.flags)
            for r in requests
        ]
        self._executions[number] = _Execution(done, len(requests), [[] for _ in requests], requests, slot)
        for request in requests:
            request.on_cancel = partial(self._withdraw, number)
        self._post(("execute", number, slot, metas))

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
        free = list(range(EXECUTION_SLOTS))
        for execution in self._executions.values():
            if execution.slot is not None:
                free.remove(execution.slot)
        return free[0] if free else None

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

    async def aclose(self) -> None:
        """Run the model's finalize(), stop the process and free the arenas."""
        if self._closed:
            return
        self._closed = True
        if self._restarting is not None:
            try:
                await asyncio.shield(self._restarting)
            except Exception:
                pass
        self._post(("finalize",))
        try:
            await asyncio.wait_for(asyncio.to_thread(self._process.wait), timeout=10)
        except TimeoutError:
            self._process.kill()
            await asyncio.to_thread(self._process.wait)
        if self._loop is not None and self._to_server >= 0:
            self._on_messages()  # the last log lines of finalize()
        self._disconnect()
        self._release_memory()
        if self._metrics is not None:
            self._metrics.release_all()
        unloaded = Unavailable("the model was unloaded before it sent its final response")
        for execution in self._executions.values():  # streams still open after the drain
            execution.fail(unloaded)
        self._executions.clear()

    def close(self) -> None:
        """Synchronous fallback (a half-loaded model): stop the process without finalize()."""
        self._closed = True
        if getattr(self, "_process", None) is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        if getattr(self, "_sock", None) is not None:
            if self._loop is not None and self._loop.is_closed():
                self._loop = None
            self._disconnect()
        self._release_memory()
        if self._metrics is not None:
            self._metrics.release_all()

    def _release_memory(self) -> None:
        self._remove_spills()
        for ring in (self._outbox, self._inbox):
            ring.close()
        for arena in (*self._input_arenas, *self._output_arenas):
            arena.close()
        try:
            self._control.close()
        except BufferError:
            pass
        for memory in self._memories:
            try:
                memory.close()
                memory.unlink()
            except (FileNotFoundError, BufferError):
                pass


def _bls_request(payload: dict[str, Any]) -> InferenceRequest:
    parameters = dict(payload["parameters"])
    if payload["correlation_id"]:
        parameters["sequence_id"] = payload["correlation_id"]
    return InferenceRequest(
        model_name=payload["model_name"],
        model_version="" if payload["model_version"] in (-1, None) else str(payload["model_version"]),
        id=payload["id"],
        inputs=[
            InputTensor(name, _ipc.wire_datatype(array), tuple(array.shape), array)
            for name, array in payload["inputs"].items()
        ],
        outputs=[RequestedOutput(name) for name in payload["outputs"]] or None,
        parameters=parameters,
    )


def _bls_answer(response: InferenceResponse) -> dict[str, Any]:
    outputs = {output.name: output.data for output in response.outputs}
    return {"error": None, "outputs": outputs, "parameters": response.parameters}


_CANCELLED = 7  # pb_utils.TritonError.CANCELLED
_MODEL_CONTROL = ("load_model", "unload_model")  # calls answered once the server has done them


def _call_error(exc: ServerError) -> dict[str, Any]:
    return {"error": (exc.message, _CODES_BY_TRITON_NAME.get(exc.triton_code, 1))}


def _response(described: dict[str, Any], arena: _ipc.Arena | None) -> BackendResponse:
    """A response the model process described; its tensors copied out of ``arena``, which the
    process reuses."""
    if described["error"] is not None:
        message, code = described["error"]
        return BackendResponse({}, error=_ERRORS_BY_CODE.get(code, ServerError)(message))
    outputs = _ipc.unpack_tensors(described["outputs"], arena, copy=True)
    return BackendResponse(outputs, described.get("parameters") or {})
