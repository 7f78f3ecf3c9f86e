"""The core's side of ``--frontend-workers N``: the worker processes, their sockets and their lives.

Each endpoint's port is bound N times with ``SO_REUSEPORT`` (the first bind is today's, so a port in
use stops the server with today's message), one socket per worker: the kernel spreads connections by
their addresses, and a restarted worker takes over its predecessor's socket, with the connections
waiting in its backlog. A worker that dies has its calls cancelled here and is started again; on stop,
each worker stops accepting and finishes its requests in flight (which this process answers) first.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import trt
from trt.server.frontend import messages as m
from trt.server.frontend.channel import Channel
from trt.server.frontend.config import WorkerConfig, config_to_json, request_frame_limit
from trt.server.frontend.forward import MethodEntry
from trt.server.frontend.serving import WorkerSession
from trt.server.grpc.app import Method
from trt.server.http.messages import Handler

logger = logging.getLogger("trt.frontend")

_READY_TIMEOUT = 60.0
_QUICK_DEATH = 2.0  # a worker that dies this soon after its start is restarted after a pause


def more_listeners(first: socket.socket, count: int) -> list[socket.socket]:
    """``first`` (bound with SO_REUSEPORT) and ``count - 1`` more sockets on its address."""
    sockets = [first]
    address = first.getsockname()
    for _ in range(count - 1):
        sock = socket.socket(first.family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(2048)
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


def method_entries(methods: dict[str, Method]) -> list[MethodEntry]:
    return [
        MethodEntry(path, method.name, method.category, method.compressed, method.stream_handler is not None)
        for path, method in methods.items()
    ]


@dataclass
class _Slot:
    index: int
    http: socket.socket | None
    grpc: socket.socket | None
    process: asyncio.subprocess.Process | None = None
    session: WorkerSession | None = None
    started: float = 0.0
    watcher: asyncio.Task[None] | None = None


class FrontendWorkers:
    def __init__(
        self,
        config: WorkerConfig,  # the settings every worker shares (index and fds are filled per worker)
        http_app: Handler | None,
        methods: dict[str, Method],
        http_sockets: list[socket.socket] | None,
        grpc_sockets: list[socket.socket] | None,
        count: int,
    ) -> None:
        self.config = config
        self.http_app = http_app
        self.methods = methods
        self.max_frame = request_frame_limit(config.http_limits, config.grpc_options)
        self.slots = [
            _Slot(i, http_sockets[i] if http_sockets else None, grpc_sockets[i] if grpc_sockets else None)
            for i in range(count)
        ]
        self.stopping = False
        self.restarts = 0

    async def start(self) -> None:
        """Start every worker and wait until each listens; RuntimeError if one cannot."""
        for slot in self.slots:
            await self._spawn(slot)
        for slot in self.slots:
            assert slot.session is not None
            pid = await asyncio.wait_for(asyncio.shield(slot.session.ready), _READY_TIMEOUT)
            if not pid:
                raise RuntimeError(f"frontend worker {slot.index} exited before it could serve")
        logger.info("Started %d frontend workers", len(self.slots))

    async def _spawn(self, slot: _Slot) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        config = replace(
            self.config,
            index=slot.index,
            channel_fd=theirs.fileno(),
            http_fd=slot.http.fileno() if slot.http is not None else -1,
            grpc_fd=slot.grpc.fileno() if slot.grpc is not None else -1,
        )
        fds = [fd for fd in (config.channel_fd, config.http_fd, config.grpc_fd) if fd >= 0]
        # The worker imports the same trt as this process, wherever it was started from.
        source = str(Path(trt.__file__).resolve().parent.parent)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")])),
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "trt.server.frontend.worker", stdin=asyncio.subprocess.PIPE,
            pass_fds=fds, env=env,
        )  # fmt: skip
        theirs.close()
        session = WorkerSession(slot.index, self.http_app, self.methods)
        session.channel = await Channel.open(ours, session.on_message, session.on_closed, self.max_frame)
        assert process.stdin is not None
        process.stdin.write(config_to_json(config))
        process.stdin.close()
        slot.process, slot.session, slot.started = process, session, time.monotonic()
        slot.watcher = asyncio.get_running_loop().create_task(self._watch(slot, process))

    async def _watch(self, slot: _Slot, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        if slot.session is not None and slot.session.channel is not None:
            slot.session.channel.close()  # its calls here are cancelled as the channel closes
        if self.stopping:
            return
        logger.warning(
            "frontend worker %d (pid %d) exited with %s; its requests in flight were cancelled; "
            "restarting it",
            slot.index, process.pid, code,
        )  # fmt: skip
        if time.monotonic() - slot.started < _QUICK_DEATH:
            await asyncio.sleep(1.0)
        if not self.stopping:
            self.restarts += 1
            await self._spawn(slot)

    async def stop(self, timeout: float) -> None:
        """Each worker stops accepting and finishes what it has in flight (up to ``timeout``), then exits."""
        self.stopping = True
        for slot in self.slots:
            if slot.session is not None and slot.session.channel is not None:
                slot.session.channel.send(m.Stop(int(timeout * 1000)))
        processes = [slot.process for slot in self.slots if slot.process is not None]
        waits = [asyncio.ensure_future(process.wait()) for process in processes]
        if waits:
            await asyncio.wait(waits, timeout=timeout + 2)
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
        for slot in self.slots:
            for sock in (slot.http, slot.grpc):
                if sock is not None:
                    sock.close()
