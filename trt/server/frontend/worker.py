"""A front-end worker process: ``python -m trt.server.frontend.worker``, started by the core.

It serves the HTTP and gRPC endpoints on listening sockets the core bound and passed down, with
today's transports, and forwards every request to the core (``forward``). It exits when the core
says stop (after its requests in flight are answered), when the channel closes (the core is gone),
or when the core dies (``PR_SET_PDEATHSIG``: the kernel kills it, even if its loop is stuck).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys

from trt.parent_death import end_with_parent
from trt.server.core.scheduling.queued_bytes import QueuedBytes
from trt.server.frontend import messages as m
from trt.server.frontend.channel import Channel
from trt.server.frontend.config import ANSWER_FRAME_LIMIT, WorkerConfig, config_from_json
from trt.server.frontend.forward import CoreLink, HttpForwarder, forwarding_methods
from trt.server.frontend.layouts import LayoutNumbers
from trt.server.grpc.server import GrpcServer
from trt.server.http.app import HttpApp
from trt.server.http.server import HttpServer
from trt.server.tls import server_context

logger = logging.getLogger("trt.frontend")


async def run(config: WorkerConfig, parent: int) -> int:
    loop = asyncio.get_running_loop()
    link = CoreLink()
    stop = asyncio.Event()
    stop_timeout = [30.0]

    def on_message(message: m.Message) -> None:
        if isinstance(message, m.Stop):
            stop_timeout[0] = message.timeout_ms / 1000
            stop.set()
        else:
            link.deliver(message)

    def on_closed() -> None:
        link.closed()
        stop_timeout[0] = 0.0  # the core is gone: nothing in flight can be answered
        stop.set()

    channel_sock = socket.socket(fileno=config.channel_fd)
    link.channel = await Channel.open(channel_sock, on_message, on_closed, ANSWER_FRAME_LIMIT)
    if os.getppid() != parent:  # the core died before PR_SET_PDEATHSIG took effect
        return 0
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    servers: list[HttpServer] = []
    grpc_server = None
    if config.http_fd >= 0:
        tls = server_context(config.http_tls) if config.http_tls is not None else None
        http_server = HttpServer(
            HttpForwarder(
                link, LayoutNumbers() if config.infer_layouts else None, config.http_limits.max_body_size
            ),
            config.http_limits,
            cancellable=HttpApp.cancellable,
            queued_bytes=QueuedBytes(config.queued_bytes), ssl_context=tls,
            keep_header_spelling=config.forward_header_spelling,
        )  # fmt: skip
        await http_server.start(socket.socket(fileno=config.http_fd))
        servers.append(http_server)
    if config.grpc_fd >= 0:
        methods = forwarding_methods(link, config.grpc_methods, config.forward_metadata)
        grpc_server = GrpcServer(config.grpc_options, methods, None)
        await grpc_server.start_on(socket.socket(fileno=config.grpc_fd))
    link.send_now(m.Ready(os.getpid()))
    await stop.wait()
    timeout = stop_timeout[0]
    stops = [asyncio.ensure_future(server.stop(timeout)) for server in servers]
    if grpc_server is not None:
        stops.append(asyncio.ensure_future(grpc_server.stop(timeout)))
    await asyncio.wait(stops, timeout=timeout + 1)
    link.channel.close()
    return 0


def main() -> int:
    end_with_parent(signal.SIGKILL)  # not on Linux: the channel's EOF still ends the worker
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the core decides
    config = config_from_json(sys.stdin.buffer.read())  # from the core, our parent
    logging.basicConfig(level=config.log_level, format=f"frontend worker {config.index}: %(message)s")
    try:
        import uvloop
    except ImportError:
        return asyncio.run(run(config, parent))
    return int(uvloop.run(run(config, parent)))


if __name__ == "__main__":
    sys.exit(main())
