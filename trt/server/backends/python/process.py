"""The process that runs one instance of a Python model, and the shared memory it talks through.

Messages cross through two shared-memory rings (``_ipc.Ring``), each message announced on an
eventfd; the event loop waits on the model's eventfd with ``add_reader`` (no thread hop). Inputs
are written into an input arena, outputs read back from an output arena; BYTES tensors travel
in the messages. There are two pairs of arenas, one per execution slot (see ``executions``).

The socket that carried start-up stays open to tell each side when the other exits. This module
starts the process, watches it and lets it go; what a death means for the requests it held, and
when to start it again, is decided by its owner (``instance``) through ``on_exit``.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import os
import secrets
import socket
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trt.server.backends.python.stub import _ipc, trt_pb_wire
from trt.server.core.errors import ModelLoadError
from trt.server.core.scheduling.cpu_colocation import CpuColocation

logger = logging.getLogger("trt.backends.python")

STUB = Path(__file__).resolve().parent / "stub" / "trt_python_stub.py"
# Per slot and direction: address space, not memory (shared memory takes pages as they are written,
# and an arena gives back the pages past _ipc.KEPT_BYTES that its executions stop using). A tensor that
# does not fit travels in the message, encoded and copied several times: 16 MiB arenas made a 64 MB
# round trip 576 ms against Triton's 36.
ARENA_BYTES = 1 << 30
EXECUTION_SLOTS = 8  # executions an instance holds at once (see core.scheduling.request_scheduler)
RING_BYTES = 1 << 20  # per direction; a message over a quarter of it goes through the ring's spill
START_TIMEOUT_S = 120.0
REAP_TIMEOUT_S = 5.0
MESSAGES_PER_TURN = 32  # read from the ring in one turn of the event loop (read_messages)


class ModelInitializeError(ModelLoadError):
    """The model's import or ``initialize()`` raised; ``traceback`` is the model process' account of
    it, for the log (the message is the one line a client and the repository index see)."""

    def __init__(self, message: str, traceback: str) -> None:
        super().__init__(message)
        self.traceback = traceback


Message = tuple[Any, ...]  # what crosses the rings: a kind, then its fields (see trt_python_stub)
# Answers a call the model makes from initialize(), on the loader thread that starts it.
StartUpCall = Callable[[str, tuple[Any, ...]], dict[str, Any]]


class ModelProcess:
    """One model process and its shared memory: the arenas and rings are made once, with this
    object, and outlive the processes started on them (a restart reuses them); ``release`` frees
    them. ``on_message`` gets every message the process sends; ``on_exit`` is called once the process
    has gone (its socket closed), before what it sent last is read: the owner reads it
    (``read_messages``), ``disconnect``s and ``reap``s."""

    def __init__(
        self,
        python: str,
        model_py: Path,
        args: dict[str, str],
        *,
        on_message: Callable[[Message], None],
        on_start_up_call: StartUpCall,
        on_exit: Callable[[], None],
        colocation: CpuColocation | None,
        arena_bytes: int = ARENA_BYTES,
        ring_bytes: int = RING_BYTES,
    ) -> None:
        self.python = python
        self.model_py = model_py
        self.args = args
        self._on_message = on_message
        self._on_start_up_call = on_start_up_call
        self._on_exit = on_exit
        self._colocation = colocation
        self.tag = tag = f"trt_{os.getpid()}_{secrets.token_hex(4)}"
        granule = mmap.ALLOCATIONGRANULARITY  # each slot's arena is mapped on its own, from its start
        self._arena_bytes = arena_bytes = -(-arena_bytes // granule) * granule
        self._ring_bytes = ring_bytes
        # After the rings, the number of the last execution the process took off its ring (it
        # writes it before running it): on a death, those after it never started.
        self._taken_offset = _ipc.control_bytes(ring_bytes)
        control_bytes = self._taken_offset + 8
        slots = EXECUTION_SLOTS
        # No names in /dev/shm: only this process and the model processes it hands the file
        # descriptors to can reach them. Shared memory: only the pages written are allocated.
        self._segments: list[int] = []
        try:
            sizes = {"in": slots * arena_bytes, "out": slots * arena_bytes, "ctl": control_bytes}
            sizes |= {"spill_s": 0, "spill_m": 0}  # messages too big for a ring, one at a time
            for suffix, size in sizes.items():
                self._segments.append(_ipc.new_segment(f"{tag}_{suffix}", size))
        except OSError:
            self._close_segments()
            raise
        self._input_fd, self._output_fd, self._control_fd, *spills = self._segments
        self._spills = (spills[0], spills[1])
        self.input_arenas = _ipc.slot_arenas(self._input_fd, arena_bytes, slots)
        self.output_arenas = _ipc.slot_arenas(self._output_fd, arena_bytes, slots)
        self._control = _ipc.map_segment(self._control_fd, control_bytes)
        # The tag of blob marks: drawn here, so that no client can write a dict that reads as one.
        self._codec = trt_pb_wire.Codec(secrets.token_hex(16))
        self._outbox, self._inbox = _ipc.ring_pair(self._control, ring_bytes, self._spills, self._codec)
        self._backlog: list[Message] = []  # messages waiting for room in the outbox (rare)
        self._to_model = self._to_server = -1  # eventfds
        self._popen: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self.first_readiness: bool | None = None
        self._late_frames = _ipc.FrameReader(self._codec)
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def pid(self) -> int:
        assert self._popen is not None
        return self._popen.pid

    def start(self) -> None:
        """Start the child and run ``initialize`` (blocking: called from a loader thread). Raises
        ``ModelLoadError`` if it cannot start or its ``initialize()`` fails."""
        for ring in (self._outbox, self._inbox):
            ring.reset()
        struct.pack_into("<q", self._control, self._taken_offset, -1)
        to_model, to_server = os.eventfd(0), os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        parent, child = socket.socketpair()
        env = dict(os.environ)
        # pb_utils comes first; the model's folders are appended by the process itself, as Triton does.
        env["PYTHONPATH"] = os.pathsep.join(
            [str(STUB.parent), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
        )
        try:
            self._popen = process = subprocess.Popen(
                [self.python, str(STUB), "--fd", str(child.fileno())],
                pass_fds=(child.fileno(), to_model, to_server, *self._segments),
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
            "segment": self._control_fd,
            "size": self._taken_offset + 8,
            "taken_offset": self._taken_offset,
            "capacity": self._ring_bytes,
            "spills": self._spills,
            "wait_fd": to_model,
            "wake_fd": to_server,
            "tag": self._codec.tag,
        }
        arenas = (
            (self._input_fd, self._arena_bytes, EXECUTION_SLOTS),
            (self._output_fd, self._arena_bytes, EXECUTION_SLOTS),
        )
        try:
            init = ("init", self.args, str(self.model_py), *arenas, channel)
            parent.sendall(_ipc.encode_frame(self._codec, init))
            frames = _ipc.BlockingFrameSource(parent, self._codec)
            reply = frames.next()
            while reply[0] in ("log", "metric", "call"):  # from initialize(), before it finishes
                if reply[0] == "call":  # answered over the socket: the rings are not in use yet
                    answer = self._on_start_up_call(reply[2], reply[3])
                    parent.sendall(_ipc.encode_frame(self._codec, ("answer", reply[1], answer)))
                else:
                    self._on_message(reply)
                reply = frames.next()
        except (OSError, EOFError) as exc:
            reply = ("init_error", f"the Python model process exited during start-up ({exc})", "")
        except trt_pb_wire.WireError as exc:
            reply = ("init_error", f"the Python model process sent a message that was refused ({exc})", "")
        if reply[0] != "ready":
            process.kill()
            process.wait()
            parent.close()
            os.close(to_model)
            os.close(to_server)
            if reply[2]:
                raise ModelInitializeError(f"initialize() failed: {reply[1]}", reply[2])
            raise ModelLoadError(f"{reply[1]}; see the log for its output")
        # The first answer of the model's own readiness check (None: it has no is_ready()).
        self.first_readiness = reply[2] if len(reply) > 2 and type(reply[2]) is bool else None
        parent.setblocking(False)
        self._sock = parent
        self._late_frames = _ipc.FrameReader(self._codec)
        self._to_model, self._to_server = to_model, to_server
        self._loop = None  # the readers are attached on first use, from the event loop

    def ask_readiness(self) -> None:
        """Ask the process for its model's readiness check (a byte on its socket; the answer comes
        as a ``user_ready`` message)."""
        if self._sock is not None:
            try:
                self._sock.send(b"?")
            except OSError:
                pass  # full or gone: the question times out, and a dead process is noticed anyway

    def last_taken(self) -> int:
        """The number of the last execution the process took off its ring (-1: none yet)."""
        return int(struct.unpack_from("<q", self._control, self._taken_offset)[0])

    @property
    def attached(self) -> bool:
        """The event loop watches the process (``attach``) and has not let it go since."""
        return self._loop is not None

    def attach(self) -> None:
        """Watch the process from the running event loop, once after each start."""
        if self._loop is None:
            assert self._sock is not None and self._popen is not None
            loop = self._loop = asyncio.get_running_loop()
            loop.add_reader(self._to_server, self.read_messages)
            loop.add_reader(self._sock.fileno(), self._on_socket)
            if self._colocation is not None:
                self._colocation.add(self._popen.pid, loop)

    def read_messages(self) -> None:
        """Hand on what the process has sent through its ring (its eventfd is readable), at most
        ``MESSAGES_PER_TURN`` at a time: the rest in a later turn of the event loop, after the work
        these woke (a model that sent thousands of answers from one ``execute()`` held every other
        client of the loop until all of them were decoded: up to 300 ms for 4,000)."""
        if self._loop is None:
            return  # let go since this turn was scheduled
        if self._read(MESSAGES_PER_TURN):
            self._loop.call_soon(self.read_messages)

    def read_all_messages(self) -> None:
        """Everything in the ring now (the process has ended, or is ending)."""
        self._read(None)

    def _read(self, limit: int | None) -> bool:
        """Hand on up to ``limit`` messages; whether more may be waiting."""
        try:
            os.eventfd_read(self._to_server)
        except BlockingIOError:
            pass
        inbox, empty, on_message = self._inbox, _ipc.EMPTY, self._on_message
        taken = 0
        try:
            while (message := inbox.get()) is not empty:
                on_message(message)
                taken += 1
                if taken == limit:
                    return True
        except Exception as exc:
            self._stop_for(exc)
        return False

    def _stop_for(self, exc: Exception) -> None:
        """A message that could not be read or acted on (the process no longer speaks our
        protocol, or it sent what its owner cannot take). Skipping it would leave the execution it
        answered waiting for good; the process is stopped instead, and its death answers what it
        held and restarts it."""
        if isinstance(exc, trt_pb_wire.WireError):
            logger.error(
                "the process of %s sent a message that was refused (%s): stopping it",
                self.model_py,
                exc,
            )
        else:
            logger.error("a message from the process of %s failed: stopping it", self.model_py, exc_info=exc)
        if self._popen is not None and self._popen.poll() is None:
            self._popen.kill()

    def _on_socket(self) -> None:
        assert self._sock is not None
        try:
            data = self._sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # it exited
            self._on_death()
            return
        try:
            for message in self._late_frames.feed(data):  # sent before it switched to the rings
                self._on_message(message)
        except Exception as exc:
            self._stop_for(exc)

    def _on_death(self) -> None:
        # The owner reads what is left in the ring and disconnects: it must first stop new
        # executions from being sent to this process, as reading results may start others.
        self._on_exit()

    def reap(self) -> int | None:
        """Wait for the process to exit (blocking; killed if it has not within ``REAP_TIMEOUT_S``:
        it closed its socket but hangs) and return its exit code (negative: the signal)."""
        if self._popen is None:
            return None
        try:
            return self._popen.wait(timeout=REAP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            return self._popen.wait()

    def disconnect(self) -> None:
        """Stop watching the child and close this side of its connection."""
        if self._loop is not None:
            assert self._sock is not None and self._popen is not None
            if self._colocation is not None:
                self._colocation.discard(self._popen.pid)
            self._loop.remove_reader(self._to_server)
            self._loop.remove_reader(self._sock.fileno())
            self._loop = None
        if self._sock is not None:
            self._sock.close()
        for fd in (self._to_model, self._to_server):
            if fd >= 0:
                os.close(fd)
        self._to_model = self._to_server = -1

    def post(self, message: Message) -> None:
        """Send ``message`` to the child: into its ring, then a wake-up on its eventfd."""
        if self._to_model < 0:
            return  # no child (it died; the requests it held have failed)
        if self._backlog or not self._outbox.put(message):
            self._backlog.append(message)
            if len(self._backlog) == 1:
                asyncio.get_running_loop().call_later(0.001, self._flush_backlog)
            return
        os.eventfd_write(self._to_model, 1)

    async def room(self) -> None:
        """Wait until the messages waiting for room in the child's ring have gone into it: a sender
        of many messages (a BLS stream's responses) goes no faster than the child reads them."""
        while self._backlog and self._to_model >= 0:
            await asyncio.sleep(0.001)  # the backlog is flushed every millisecond

    def _flush_backlog(self) -> None:
        while self._backlog and self._to_model >= 0 and self._outbox.put(self._backlog[0]):
            self._backlog.pop(0)
            os.eventfd_write(self._to_model, 1)
        if self._backlog and self._to_model >= 0:
            asyncio.get_running_loop().call_later(0.001, self._flush_backlog)

    def discard_unsent(self) -> None:
        """Drop what was on its way to a process that died: the backlog (the rings and their
        spills are emptied when the next process starts)."""
        self._backlog.clear()

    async def stop(self, grace: float = _ipc.FINALIZE_GRACE_S) -> bool:
        """Ask the process to run ``finalize()`` and exit (killed after ``grace`` seconds), read its
        last messages, let it go and free the shared memory; False if it had to be killed."""
        finished = True
        if self._popen is not None and self._popen.poll() is None:
            self.post(("finalize",))
            try:
                await asyncio.wait_for(asyncio.to_thread(self._popen.wait), timeout=grace)
            except TimeoutError:
                logger.warning(
                    "the process of %s was still busy %.1f s after it was asked to finalize(): killed",
                    self.model_py, grace,
                )  # fmt: skip
                self._popen.kill()
                await asyncio.to_thread(self._popen.wait)
                finished = False
        if self._loop is not None and self._to_server >= 0:
            self.read_all_messages()  # the last log lines of finalize()
        self.disconnect()
        self.release()
        return finished

    def abort_start(self) -> None:
        """Kill the process while ``start()`` waits for it on a loader thread: that start then fails
        as for any death during start-up, and cleans up after itself."""
        if self._popen is not None and self._popen.poll() is None:
            self._popen.kill()

    def kill(self) -> None:
        """Synchronous fallback (a half-loaded model): stop the process without ``finalize()``,
        let it go and free the shared memory."""
        if self._popen is not None and self._popen.poll() is None:
            self._popen.kill()
            self._popen.wait()
        if self._sock is not None:
            if self._loop is not None and self._loop.is_closed():
                self._loop = None
            self.disconnect()
        self.release()

    def release(self) -> None:
        """Free the rings, arenas and segments (once the process no longer uses them)."""
        for ring in (self._outbox, self._inbox):
            ring.close()
        for arena in (*self.input_arenas, *self.output_arenas):
            arena.close()
        try:
            self._control.close()
        except BufferError:
            pass
        self._close_segments()

    def _close_segments(self) -> None:
        for fd in self._segments:
            os.close(fd)  # a mapping still alive keeps its memory until it goes
        self._segments = []
