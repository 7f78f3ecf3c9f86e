"""The process that hosts one instance of a Python model (``model.py`` with ``TritonPythonModel``).

Started by the server with ``python trt_python_stub.py --fd N`` (or ``--auto-complete``), under the
model's own interpreter when ``EXECUTION_ENV_PATH`` names one. The server sends ``init`` over the
inherited socket and this side answers ``ready``; after that, messages travel through the rings of
a shared-memory segment (``_ipc``): the server sends ``execute``, ``answer`` and ``finalize``;
this side answers with results, and sends ``bls`` requests, responses from response senders and
log lines of its own. The hot path is plain blocking code: no event loop unless the model's
``execute`` is a coroutine.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections import deque
from typing import Any

import _ipc
import triton_python_backend_utils as pb_utils
import trt_pb_execute
import trt_pb_loading
import trt_pb_readiness
import trt_pb_runtime
import trt_pb_wire

released = trt_pb_runtime.released  # messages queued by __del__, sent ahead of the next message


class Runtime:
    """The model process' side of the connection; pb_utils calls into it.

    Start-up (``init`` and its answer) travels over the socket; everything after it through the
    rings, announced on eventfds. No reader thread: whichever thread waits for something (the main
    thread for its next command, a BLS call for its answer) reads the ring itself, one at a time;
    what it reads for another is parked and the other woken (a handoff between threads per request
    costs more than the model). A watchdog thread only waits for the server's end of the socket
    to close.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        # Until the first frame gives it the tag of blob marks, the codec takes no bytes or arrays.
        self.codec = trt_pb_wire.Codec(None)
        self._frames = _ipc.BlockingFrameSource(sock, self.codec)
        self._send_lock = threading.Lock()
        self._state = threading.Condition(threading.Lock())
        self._reading = False  # a thread is reading the ring (guarded by _state)
        self._waiting = 0  # threads waiting for the reader (guarded by _state)
        self._answers: dict[int, Any] = {}
        self._streams: dict[int, deque[tuple[Any, bool]]] = {}  # exec(decoupled=True) calls in progress
        self._commands: deque[Any] = deque()
        self._next_call = 0
        self._call_lock = threading.Lock()
        self._inbox: _ipc.Ring | None = None
        self._outbox: _ipc.Ring | None = None
        self._wait_fd = -1
        self._wake_fd = -1
        self._server_gone = False
        self.input_arenas: list[_ipc.Arena] = []  # one per execution slot
        self.instance_name = ""  # the model instance's name, as Triton's errors give it
        self.decoupled = False  # the model's transaction policy: execute() must return None
        self.readiness_check: Any = None  # the model's is_ready(), when it has one (see _watch_server)
        self.output_arenas: list[_ipc.Arena] = []

    def start_up_message(self) -> Any:
        return self._frames.next()

    def use_codec(self, codec: trt_pb_wire.Codec) -> None:
        """The codec with the tag the server drew, for everything from now on."""
        self.codec = self._frames.codec = codec

    def connect(self, inbox: _ipc.Ring, outbox: _ipc.Ring, wait_fd: int, wake_fd: int) -> None:
        """From now on messages go through the rings; called once ``ready`` has been sent."""
        self._inbox, self._outbox = inbox, outbox
        self._wait_fd, self._wake_fd = wait_fd, wake_fd
        threading.Thread(target=self._watch_server, name="trt-watch-server", daemon=True).start()
        signal_read, trt_pb_runtime.released_pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(signal_read, True)
        threading.Thread(
            target=self._send_released, args=(signal_read,), name="trt-send-released", daemon=True
        ).start()

    def _watch_server(self) -> None:
        """Wait for the server's end of the socket to close (then the main thread, if it waits for
        a command, runs ``finalize()`` and returns). Bytes on it ask for the model's own readiness
        check, answered from this thread so that a long ``execute`` does not hold it up."""
        try:
            while self._sock.recv(4096):
                if self.readiness_check is not None:
                    self.send(("user_ready", self.readiness_check()))
        except OSError:
            pass
        self._server_gone = True
        _ipc.wake(self._wait_fd)

    def _send_released(self, signal_read: int) -> None:
        """Send what ``__del__`` queued as soon as it says so (``trt_pb_runtime.release``)."""
        while os.read(signal_read, 4096):
            with self._send_lock:
                if released:
                    assert self._outbox is not None
                    while released:
                        self._put(self._outbox, released.popleft())
                    _ipc.wake(self._wake_fd)

    def send(self, message: Any) -> None:
        """Send ``message`` to the server; ``TritonModelException`` if it holds a value that cannot
        cross (then nothing of it was sent)."""
        try:
            self._send(message)
        except trt_pb_wire.WireError as exc:
            raise pb_utils.TritonModelException(f"cannot be sent to the server: {exc}") from None

    def _send(self, message: Any) -> None:
        outbox = self._outbox
        if outbox is None:
            with self._send_lock:
                while released:
                    self._sock.sendall(_ipc.encode_frame(self.codec, released.popleft()))
                self._sock.sendall(_ipc.encode_frame(self.codec, message))
            return
        with self._send_lock:
            while released:
                self._put(outbox, released.popleft())
            self._put(outbox, message)
            _ipc.wake(self._wake_fd)

    def _put(self, outbox: _ipc.Ring, message: Any) -> None:
        pause = 0.0001
        while not outbox.put(message):  # the server is behind: rare, so poll
            if self._server_gone:
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.005)

    def _read(self) -> Any:
        assert self._inbox is not None
        while True:
            message = self._inbox.get()
            if message is not _ipc.EMPTY:
                return message
            if self._server_gone:
                raise EOFError("the server closed the connection")
            _ipc.wait(self._wait_fd)

    def _wait_for(self, found: Any) -> Any:
        """Read messages (or let another thread read them) until ``found()`` returns something."""
        state = self._state
        with state:
            while True:
                result = found()
                if result is not None:
                    return result
                if self._reading:
                    self._waiting += 1
                    try:
                        state.wait()
                    finally:
                        self._waiting -= 1
                    continue
                self._reading = True
                state.release()
                try:
                    message = self._read()
                finally:
                    state.acquire()
                    self._reading = False
                    if self._waiting:
                        state.notify_all()
                self._sort(message)

    def _sort(self, message: Any) -> None:
        """File a message read from the ring where its reader looks (``_state`` held)."""
        if message[0] == "answer":
            self._answers[message[1]] = message[2]
        elif message[0] == "bls_stream":
            stream = self._streams.get(message[1])
            if stream is not None:  # else the model dropped the iterator: nobody reads it
                stream.append((message[2], message[3]))
        else:
            self._commands.append(message)

    def _queued_command(self) -> Any:
        return self._commands.popleft() if self._commands else None

    def next_command(self) -> Any:
        """Block until the server sends something other than a BLS answer."""
        try:
            return self._wait_for(self._queued_command)
        except (EOFError, OSError):
            return ("finalize",)

    def withdrawn(self, execution: int) -> bool:
        """Whether the server withdrew ``execution`` (its requests were cancelled while it waited
        behind another), from what has arrived so far: looked at, not waited for."""
        assert self._inbox is not None
        if not self._commands and self._inbox.empty():
            return False  # nothing has arrived since: the usual case, asked before every execution
        with self._state:
            if not self._reading:  # else another thread reads the ring, and files what it reads
                message = self._inbox.get()
                while message is not _ipc.EMPTY:
                    self._sort(message)
                    message = self._inbox.get()
            for command in self._commands:
                if command[0] == "withdraw" and command[1] == execution:
                    self._commands.remove(command)
                    return True
        return False

    # -- called by pb_utils ----------------------------------------------------------------------

    def _new_call(self) -> int:
        """A number for a message the server will answer (``answer`` / ``bls_stream`` carry it)."""
        with self._call_lock:
            call = self._next_call
            self._next_call += 1
        return call

    def bls(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        """Run ``request`` on another model: its response, or with ``decoupled`` an iterator over
        its responses that yields each as the server sends it."""
        call = self._new_call()
        if decoupled:
            self._streams[call] = deque()
        self.send(
            (
                "bls",
                call,
                {
                    "model_name": request.model_name,
                    "model_version": request._model_version,
                    "id": request.request_id(),
                    "inputs": {t.name(): t.as_numpy() for t in request.inputs()},
                    "outputs": request.requested_output_names(),
                    "parameters": json.loads(request.parameters()),
                    "correlation_id": request.correlation_id(),
                    "flags": request.flags(),
                    "timeout": request.timeout(),
                    "decoupled": decoupled,
                    "trace_origin": request._trace._origin if request._trace is not None else None,
                },
            )
        )
        if decoupled:
            return pb_utils.ResponseIterator(
                lambda: self._next_streamed(call),
                lambda: self._streams.pop(call, None),
                lambda: self.send(("bls_cancel", call)),
            )
        try:
            result = self._wait_for(lambda: self._answers.pop(call, None))
        except (EOFError, OSError):
            raise pb_utils.TritonModelException("the server went away during a BLS call") from None
        return _bls_response(result)

    def _next_streamed(self, call: int) -> tuple[pb_utils.InferenceResponse, bool]:
        stream = self._streams[call]
        try:
            answer, final = self._wait_for(lambda: stream.popleft() if stream else None)
        except (EOFError, OSError):
            self._streams.pop(call, None)
            message = "the server went away during a BLS call"
            gone = pb_utils.TritonError(message, pb_utils.TritonError.UNAVAILABLE)
            return pb_utils.InferenceResponse(error=gone), True
        if final:
            self._streams.pop(call, None)
        return _bls_response(answer), final

    def call(self, operation: str, *arguments: Any) -> Any:
        """An operation on the server whose answer the model waits for: creating a metric or reading
        one, loading or unloading a model, asking whether one is ready."""
        call = self._new_call()
        message = ("call", call, operation, arguments)
        try:
            if self._outbox is None:  # still in initialize(): the socket carries both ways
                self.send(message)
                answer = self._frames.next()[2]
            else:
                self.send(message)
                answer = self._wait_for(lambda: self._answers.pop(call, None))
        except (EOFError, OSError):
            raise pb_utils.TritonModelException(f"the server went away during {operation}") from None
        if "error" in answer:
            raise pb_utils.TritonModelException(answer["error"][0])
        return answer["value"]

    def metric_update(self, operation: str, handle: int, value: float = 0.0) -> None:
        """A metric update or release, sent without waiting: the rings keep it in order with any
        later ``call``."""
        self.send(("metric", operation, handle, value))

    def send_response(self, execution: int, index: int, response: Any, final: bool) -> None:
        described = trt_pb_execute.describe(response, None) if response is not None else None
        self.send(("response", execution, index, described, final))

    def log(self, level: str, message: str) -> None:
        self.send(("log", level, message))


def _bls_response(answer: dict[str, Any] | None) -> pb_utils.InferenceResponse:
    if answer is None:  # the end of a stream, with no response of its own
        return pb_utils.InferenceResponse([])
    if answer["error"] is not None:
        message, code = answer["error"]
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))
    tensors = [pb_utils.Tensor(name, array) for name, array in answer["outputs"].items()]
    return pb_utils.InferenceResponse(tensors, parameters=answer.get("parameters"))


def _end_when_orphaned(server: int) -> None:
    """End this process ``FINALIZE_GRACE_S`` after the server has died, if it has not ended by then.

    A process in an ``initialize()``, ``execute()`` or ``auto_complete_config()`` that does not
    return would otherwise live on for good once its server has gone (killed, crashed, stopped while
    loading), holding its memory and devices; the grace is the one a stopping server gives it to
    finish and run ``finalize()``. Triton's stub checks for its server every 300 ms and ends at once.

    Polled, because the socket carries start-up messages until ``initialize()`` is done, and the
    ``pidfd`` that could be waited on is missing from the older interpreters a model's environment
    may bring."""
    while os.getppid() == server:
        time.sleep(0.5)
    time.sleep(_ipc.FINALIZE_GRACE_S)
    os._exit(1)


def serve(fd: int) -> None:
    # The server decides when this process ends (finalize, or its socket closing): a Ctrl-C sent
    # to the terminal's whole process group must not kill the model under a draining server.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SCHED_BATCH: a request handed over does not preempt the server on its own core (which still
    # has HTTP work to finish); the model runs when a core is free. Measured: 15-20% more requests
    # per second and 15% less CPU per request at concurrency 8-16, the same at 1.
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        pass
    sock = socket.socket(fileno=fd)
    runtime = Runtime(sock)
    trt_pb_runtime.install(runtime)
    loop = asyncio.new_event_loop()
    try:
        message = runtime.start_up_message()
    except (EOFError, OSError):
        return
    if message[0] != "init":
        return
    _, args, model_path, input_arena, output_arena, channel = message
    runtime.instance_name = args.get("model_instance_name") or args.get("model_name", "")
    runtime.decoupled = _decoupled(args.get("model_config", "{}"))
    runtime.use_codec(trt_pb_wire.Codec(channel["tag"]))
    try:
        runtime.input_arenas = _ipc.slot_arenas(*input_arena)
        runtime.output_arenas = _ipc.slot_arenas(*output_arena)
        segment = _ipc.map_segment(channel["segment"], channel["size"])
        inbox, outbox = _ipc.ring_pair(segment, channel["capacity"], tuple(channel["spills"]), runtime.codec)
        model = trt_pb_loading.load_model_class(model_path)()
        if hasattr(model, "initialize"):
            result = model.initialize(args)
            if inspect.isawaitable(result):
                loop.run_until_complete(result)
    except Exception as exc:
        runtime.send(("init_error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        return
    first_check = trt_pb_readiness.check(model) if trt_pb_readiness.has_check(model) else None
    if first_check is not None:
        runtime.readiness_check = functools.partial(trt_pb_readiness.check, model)
    runtime.send(("ready", sys.executable, first_check))
    runtime.connect(inbox, outbox, channel["wait_fd"], channel["wake_fd"])
    taken = memoryview(segment)[channel["taken_offset"] :][:8].cast("q")  # see ModelProcess.last_taken
    while True:
        message = runtime.next_command()
        kind = message[0]
        if kind == "execute":
            taken[0] = message[1]
            if runtime.withdrawn(message[1]):
                runtime.send(("result", message[1], {"withdrawn": True}))
            else:
                trt_pb_execute.execute(runtime, model, loop, message[1], message[2], message[3])
        elif kind == "withdraw":
            pass  # for an execution already started: its model sees is_cancelled()
        elif kind == "finalize":
            if hasattr(model, "finalize"):
                try:
                    model.finalize()
                except Exception:
                    traceback.print_exc()
            runtime.send(("finalized",))
            return


def _decoupled(model_config: str) -> bool:
    try:
        config = json.loads(model_config)
    except ValueError:
        return False
    policy = config.get("model_transaction_policy") if isinstance(config, dict) else None
    return isinstance(policy, dict) and policy.get("decoupled") is True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int)
    parser.add_argument("--auto-complete", metavar="MODEL_PY")
    parser.add_argument("--result", metavar="JSON_FILE")
    args = parser.parse_args()
    threading.Thread(target=_end_when_orphaned, args=(os.getppid(),), name="trt-orphan", daemon=True).start()
    if args.auto_complete:
        trt_pb_loading.auto_complete(args.auto_complete, args.result)
    else:
        serve(args.fd)


if __name__ == "__main__":
    main()
