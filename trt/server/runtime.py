"""Running the server: load models, open the HTTP, gRPC and metrics endpoints, stop gracefully.

Shutdown (SIGINT/SIGTERM) stops accepting connections, lets in-flight requests finish (up to
``--exit-timeout-secs``), then unloads the models, as tritonserver does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trt.server.core.options import CoreOptions
from trt.server.core.server import InferenceServer, StartupError
from trt.server.http.app import HttpApp
from trt.server.http.codec import DEFAULT_HEADER_CACHE_BYTES
from trt.server.http.limits import HttpLimits
from trt.server.http.protocol import HttpServer
from trt.server.http.tls import TlsOptions, TlsSetupError, server_context
from trt.server.metrics import MetricsApp
from trt.server.restrictions import Restrictions

logger = logging.getLogger("trt.runtime")


@dataclass(frozen=True)
class Endpoint:
    enabled: bool
    address: str
    port: int


@dataclass(frozen=True)
class ServeOptions:
    core: CoreOptions = field(default_factory=CoreOptions)
    http: Endpoint = Endpoint(True, "0.0.0.0", 8000)
    grpc: Endpoint = Endpoint(True, "0.0.0.0", 8001)
    metrics: Endpoint = Endpoint(True, "0.0.0.0", 8002)
    gpu_metrics: bool = True
    cpu_metrics: bool = True
    exit_timeout_secs: float = 30.0
    http_limits: HttpLimits = field(default_factory=HttpLimits)  # --http-max-input-size, -header-*
    http_header_cache_bytes: int = DEFAULT_HEADER_CACHE_BYTES  # --http-infer-header-cache-size
    http_tls: TlsOptions | None = None  # --http-use-ssl and its certificates
    http_restrictions: Restrictions = field(default_factory=Restrictions)  # --http-restricted-api
    grpc_restrictions: Restrictions = field(default_factory=Restrictions)  # --grpc-restricted-protocol


def _bind(endpoint: Endpoint, what: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in endpoint.address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((endpoint.address, endpoint.port))
    except OSError as exc:
        sock.close()
        raise OSError(
            f"cannot start the {what} endpoint on {endpoint.address}:{endpoint.port}: {exc.strerror}"
        ) from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def serve(options: ServeOptions, on_ready: Callable[[InferenceServer, dict[str, str]], None]) -> int:
    """Serve until a signal arrives; return the process exit code."""
    core = InferenceServer(options.core)
    try:
        failures = await core.start()
    except StartupError as exc:
        logger.error("error: creating server: %s", exc)
        await core.stop()
        return 1

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)

    servers: list[HttpServer] = []
    grpc_server = None
    try:
        if options.grpc.enabled:
            from trt.server.grpc.service import start_grpc_server

            grpc_server = await start_grpc_server(
                core, options.grpc.address, options.grpc.port, options.grpc_restrictions
            )
            logger.info("Started GRPCInferenceService at %s:%d", options.grpc.address, options.grpc.port)
        if options.http.enabled:
            http_app = HttpApp(
                core, options.http_limits.max_body_size, options.http_restrictions,
                options.http_header_cache_bytes,
            )  # fmt: skip
            tls = server_context(options.http_tls) if options.http_tls is not None else None
            http_server = HttpServer(
                http_app, options.http_limits, cancellable=HttpApp.cancellable,
                queued_bytes=core.queued_bytes, ssl_context=tls,
            )  # fmt: skip
            await http_server.start(_bind(options.http, "HTTPService"))
            servers.append(http_server)
            secure = " (HTTPS)" if tls is not None else ""
            logger.info("Started HTTPService at %s:%d%s", options.http.address, options.http.port, secure)
        if options.metrics.enabled:
            metrics_app = MetricsApp(core, options.gpu_metrics, options.cpu_metrics)
            metrics_server = HttpServer(metrics_app, HttpLimits(max_body_size=1 << 16))
            await metrics_server.start(_bind(options.metrics, "Metrics Service"))
            servers.append(metrics_server)
            logger.info("Started Metrics Service at %s:%d", options.metrics.address, options.metrics.port)
    except (OSError, TlsSetupError) as exc:
        logger.error("%s", exc)
        await _shutdown(core, servers, grpc_server, options.exit_timeout_secs)
        return 1

    on_ready(core, failures)
    await stop.wait()
    logger.info("shutting down: finishing in-flight requests")
    await _shutdown(core, servers, grpc_server, options.exit_timeout_secs)
    return 0


async def _shutdown(
    core: InferenceServer, servers: list[HttpServer], grpc_server: Any, timeout: float
) -> None:
    stops = [asyncio.ensure_future(server.stop(timeout)) for server in servers]
    if grpc_server is not None:
        stops.append(asyncio.ensure_future(grpc_server.stop(timeout)))
    if stops:
        await asyncio.wait(stops, timeout=timeout + 1)
    await core.stop()
