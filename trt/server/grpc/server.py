"""The gRPC endpoint: a listening socket (TLS with ALPN ``h2`` when asked), an HTTP/2 connection per
client, and a graceful stop (GOAWAY, in-flight calls finish, then the rest are cut)."""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING

from trt.server.grpc.app import GrpcApp, Method
from trt.server.grpc.errors import GrpcBindError
from trt.server.grpc.h2.connection import H2ServerConnection
from trt.server.grpc.options import GrpcOptions
from trt.server.grpc.service import GrpcInferenceService, HealthService
from trt.server.header_forwarding import HeaderForwarding
from trt.server.tls import server_context

if TYPE_CHECKING:
    from trt.server.core.extensions.tracing import Tracer
    from trt.server.core.server import InferenceServer


def _target(address: str, port: int) -> str:
    if ":" in address and not address.startswith("["):
        return f"[{address}]:{port}"  # IPv6 literal
    return f"{address}:{port}"


def listen(address: str, port: int, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:  # --reuse-grpc-port: several servers share the port, the kernel spreads clients
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((address.strip("[]"), port))
    except OSError:
        sock.close()
        raise GrpcBindError(
            f"cannot start the GRPCInferenceService endpoint on {_target(address, port)}: the port is in "
            "use or the address is not available (choose another with --grpc-port / --grpc-address)"
        ) from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def service_methods(
    core: InferenceServer, header_forwarding: HeaderForwarding | None = None
) -> dict[str, Method]:
    """Triton's ``GRPCInferenceService`` and ``grpc.health.v1.Health``, by ``:path``."""
    return GrpcInferenceService(core, header_forwarding).methods() | HealthService(core).methods()


class GrpcServer:
    """A method table (Triton's services, or a front-end worker's forwarders) on one address."""

    def __init__(self, options: GrpcOptions, methods: dict[str, Method], tracer: Tracer | None) -> None:
        self.options = options
        self.methods = methods
        self.tracer = tracer
        self.connections: set[H2ServerConnection] = set()
        self._server: asyncio.base_events.Server | None = None

    async def start(self, address: str, port: int) -> None:
        await self.start_on(listen(address, port, self.options.reuse_port))

    async def start_on(self, sock: socket.socket) -> None:
        """Serve on a listening socket bound already (a worker's, inherited from the core process)."""
        options = self.options
        try:
            context = server_context(options.tls, "--grpc", alpn=("h2",)) if options.tls is not None else None
        except ValueError:
            sock.close()
            raise
        app = GrpcApp(options, self.methods, self.tracer)

        def connection() -> H2ServerConnection:
            return H2ServerConnection(app, options.http2, options.keepalive, self.connections)

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(connection, sock=sock, ssl=context)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self, timeout: float) -> None:
        """Stop accepting, tell every client (GOAWAY), let calls finish up to ``timeout``, close."""
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.shutdown()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for connection in list(self.connections):
            connection.abort()


async def start_grpc_server(
    core: InferenceServer,
    address: str,
    port: int,
    options: GrpcOptions | None = None,
    header_forwarding: HeaderForwarding | None = None,
) -> GrpcServer:
    """Build, bind and start the gRPC endpoint; the caller stops it with ``await server.stop(grace)``.

    Raises ``GrpcBindError`` (an ``OSError``) when the address cannot be bound, ``ValueError`` when the
    TLS files cannot be loaded.
    """
    server = GrpcServer(options or GrpcOptions(), service_methods(core, header_forwarding), core.tracer)
    await server.start(address, port)
    return server
