"""One instance of a Python model: a child process, its shared-memory arenas and its connection.

The event loop reads the connection with ``add_reader`` (no thread hop). Inputs are written into
the input arena, outputs read back from the output arena; BYTES tensors travel in the frames. A
child that dies fails the requests it held and is started again; requests that arrive meanwhile
wait for the new one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import subprocess
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

from server.backends.base import BackendRequest, BackendResponse, ServerServices
from server.backends.python.stub import _ipc
from server.core.errors import (
    AlreadyExists,
    InvalidArgument,
    ModelLoadError,
    NotFound,
    ServerError,
    Unavailable,
    Unsupported,
)
from server.core.types import InferenceRequest, InputTensor, RequestedOutput

logger = logging.getLogger("trt.backends.python")

STUB = Path(__file__).resolve().parent / "stub" / "trt_python_stub.py"
ARENA_BYTES = 16 * 1024 * 1024
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


@dataclass
class _Execution:
    future: asyncio.Future[list[BackendResponse]]
    count: int
    responses: list[list[BackendResponse]] = field(default_factory=list)
    finals: set[int] = field(default_factory=set)
    returned: bool = False  # execute() has returned (with None: answers come through senders)
    streams: list[Any] = field(default_factory=list)  # per request: its on_response callback or None

    def settle_if_complete(self) -> None:
        if self.future.done() or not self.returned or len(self.finals) < self.count:
            return
        answers = []
        for index, responses in enumerate(self.responses):
            if self.streams[index] is not None:
                answers.append(BackendResponse({}))  # already delivered, one by one
            elif not responses:
                answers.append(
                    BackendResponse({}, error=ServerError(f"the model sent no response for request {index}"))
                )
            else:
                answers.append(responses[0])
        self.future.set_result(answers)


class PythonModelInstance:
    def __init__(self, python: str, model_py: Path, args: dict[str, str], services: ServerServices | None,
                 extra_path: list[Path]) -> None:  # fmt: skip
        self.python = python
        self.model_py = model_py
        self.args = args
        self.services = services
        self.extra_path = extra_path
        tag = f"trt_{os.getpid()}_{secrets.token_hex(4)}"
        self._input_memory = shared_memory.SharedMemory(name=f"{tag}_in", create=True, size=ARENA_BYTES)
        self._output_memory = shared_memory.SharedMemory(name=f"{tag}_out", create=True, size=ARENA_BYTES)
        self._input_arena = _ipc.Arena(self._input_memory.name, ARENA_BYTES)
        self._output_arena = _ipc.Arena(self._output_memory.name, ARENA_BYTES)
        self._executions: dict[int, _Execution] = {}
        self._next_execution = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._restarting: asyncio.Future[None] | None = None
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()
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
        parent, child = socket.socketpair()
        env = dict(os.environ)
        paths = [str(STUB.parent), *(str(p) for p in self.extra_path)]
        env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        try:
            self._process = subprocess.Popen(
                [self.python, str(STUB), "--fd", str(child.fileno())], pass_fds=(child.fileno(),), env=env
            )
        except OSError as exc:
            parent.close()
            raise ModelLoadError(f"cannot start the Python model process with {self.python}: {exc}") from None
        finally:
            child.close()
        parent.settimeout(START_TIMEOUT_S)
        arenas = ((self._input_memory.name, ARENA_BYTES), (self._output_memory.name, ARENA_BYTES))
        try:
            parent.sendall(_ipc.encode_frame(("init", self.args, str(self.model_py), *arenas)))
            frames = _ipc.BlockingFrameSource(parent)
            reply = frames.next()
            while reply[0] == "log":  # initialize() may log before it finishes
                self._dispatch(reply)
                reply = frames.next()
        except (OSError, EOFError) as exc:
            self._process.kill()
            parent.close()
            raise ModelLoadError(
                f"the Python model process exited during start-up ({exc}); see the log for its output"
            ) from None
        if reply[0] != "ready":
            self._process.kill()
            parent.close()
            logger.error("initialize() of %s failed:\n%s", self.model_py, reply[2])
            raise ModelLoadError(f"initialize() failed: {reply[1]}")
        parent.setblocking(False)
        self._sock = parent
        self._frames = _ipc.FrameReader()
        self._loop = None  # the reader is attached on first use, from the event loop

    def _attach(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            loop.add_reader(self._sock.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        try:
            data = self._sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._on_death()
            return
        for message in self._frames.feed(data):
            self._dispatch(message)

    def _on_death(self) -> None:
        assert self._loop is not None
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
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
        for execution in self._executions.values():
            if not execution.future.done():
                execution.future.set_exception(error)
        self._executions.clear()
        self._loop = None
        self._restarting = asyncio.get_running_loop().create_future()
        task = asyncio.get_running_loop().create_task(self._restart(self._restarting))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
            execution = self._executions.get(number)
            if execution is None:
                return  # the request already failed (process restart) or was answered
            answer = self._response(described, copy=True) if described is not None else None
            stream = execution.streams[index]
            if stream is not None:
                stream(answer, bool(final))
            elif answer is not None:
                execution.responses[index].append(answer)
            if final:
                execution.finals.add(index)
            execution.settle_if_complete()
            if execution.future.done():
                self._executions.pop(number, None)
        elif kind == "bls":
            task = asyncio.get_running_loop().create_task(self._bls(message[1], message[2]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif kind == "log":
            level = {"WARNING": logging.WARNING, "ERROR": logging.ERROR, "VERBOSE": logging.DEBUG}.get(
                message[1], logging.INFO
            )
            logger.log(level, "%s: %s", self.args["model_name"], message[2])
        elif kind == "finalized":
            pass

    def _on_result(self, number: int, payload: dict[str, Any]) -> None:
        execution = self._executions.get(number)
        if execution is None:
            return
        if "error" in payload:
            message, code = payload["error"]
            if payload.get("traceback"):
                logger.debug("execute() of %s raised:\n%s", self.model_py, payload["traceback"])
            error = _ERRORS_BY_CODE.get(code, ServerError)(message)
            execution.future.set_result([BackendResponse({}, error=error) for _ in range(execution.count)])
        elif payload["responses"] is None:
            execution.returned = True
            execution.settle_if_complete()
        else:
            answers = [self._response(d, copy=True) for d in payload["responses"]]
            for index, stream in enumerate(execution.streams):
                if stream is not None:  # a decoupled model that returned its responses anyway
                    stream(answers[index], True)
            execution.future.set_result(answers)
        if execution.future.done():
            self._executions.pop(number, None)

    def _response(self, described: dict[str, Any], copy: bool) -> BackendResponse:
        if described["error"] is not None:
            message, code = described["error"]
            return BackendResponse({}, error=_ERRORS_BY_CODE.get(code, ServerError)(message))
        outputs = _ipc.unpack_tensors(described["outputs"], self._output_arena, copy=copy)
        return BackendResponse(outputs, described.get("parameters") or {})

    async def _bls(self, call: int, payload: dict[str, Any]) -> None:
        """A request from the model to another model, through the server's own scheduler."""
        answers: list[dict[str, Any]]
        try:
            if self.services is None:
                raise Unavailable("BLS is not available in this context")
            parameters = dict(payload["parameters"])
            if payload["correlation_id"]:
                parameters["sequence_id"] = payload["correlation_id"]
            request = InferenceRequest(
                model_name=payload["model_name"],
                model_version="" if payload["model_version"] in (-1, None) else str(payload["model_version"]),
                id=payload["id"],
                inputs=[
                    InputTensor(n, _ipc.wire_datatype(a), tuple(a.shape), a)
                    for n, a in payload["inputs"].items()
                ],
                outputs=[RequestedOutput(name) for name in payload["outputs"]] or None,
                parameters=parameters,
            )
            response = await self.services.infer(request)
            answers = [
                {
                    "error": None,
                    "outputs": {o.name: o.data for o in response.outputs},
                    "parameters": response.parameters,
                }
            ]
        except ServerError as exc:
            answers = [{"error": (exc.message, _CODES_BY_TRITON_NAME.get(exc.triton_code, 1))}]
        except Exception as exc:
            logger.exception("BLS call from %s failed", self.model_py)
            answers = [{"error": (f"{type(exc).__name__}: {exc}", 1)}]
        if self._loop is not None and not self._closed:
            await self._send(("bls_result", call, answers))

    async def _send(self, message: Any) -> None:
        assert self._loop is not None
        frame = _ipc.encode_frame(message)
        try:
            sent = self._sock.send(frame)  # nearly always all of it: the socket buffer is large
        except BlockingIOError:
            sent = 0
        if sent < len(frame):
            await self._loop.sock_sendall(self._sock, frame[sent:])

    # -- the RequestLevelInstance interface -----------------------------------------------------

    async def execute_requests(self, requests: list[BackendRequest]) -> list[BackendResponse]:
        if self._closed:
            raise Unavailable("the model is unloading")
        if self._restarting is not None:
            await asyncio.shield(self._restarting)
        self._attach()
        self._input_arena.reset()
        metas = [
            {
                "id": r.id,
                "inputs": _ipc.pack_tensors(r.inputs, self._input_arena),
                "outputs": list(r.requested_outputs),
                "parameters": r.parameters,
                "correlation_id": r.correlation_id,
                "flags": r.flags,
            }
            for r in requests
        ]
        number = self._next_execution
        self._next_execution += 1
        assert self._loop is not None
        execution = _Execution(
            self._loop.create_future(),
            len(requests),
            [[] for _ in requests],
            streams=[r.on_response for r in requests],
        )
        self._executions[number] = execution
        await self._send(("execute", number, metas))
        return await execution.future

    async def aclose(self) -> None:
        """Run the model's finalize(), stop the process and free the arenas."""
        if self._closed:
            return
        self._closed = True
        if self._loop is not None:
            try:
                await self._send(("finalize",))
            except OSError:
                pass
            self._loop.remove_reader(self._sock.fileno())
        else:
            try:
                self._sock.setblocking(True)
                self._sock.sendall(_ipc.encode_frame(("finalize",)))
            except OSError:
                pass
        try:
            await asyncio.wait_for(asyncio.to_thread(self._process.wait), timeout=10)
        except TimeoutError:
            self._process.kill()
        self._sock.close()
        self._release_memory()

    def close(self) -> None:
        """Synchronous fallback (a half-loaded model): stop the process without finalize()."""
        self._closed = True
        if getattr(self, "_process", None) is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._release_memory()

    def _release_memory(self) -> None:
        for arena in (self._input_arena, self._output_arena):
            arena.close()
        for memory in (self._input_memory, self._output_memory):
            try:
                memory.close()
                memory.unlink()
            except (FileNotFoundError, BufferError):
                pass
