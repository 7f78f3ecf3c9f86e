"""Running the server: load models, open the HTTP, gRPC and metrics endpoints, stop gracefully.

Shutdown (SIGINT/SIGTERM) stops accepting connections, lets in-flight requests finish (up to
``--exit-timeout-secs``), then unloads the models, as tritonserver does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from trt.open_files import raise_open_file_limit
from trt.server.core.options import CoreOptions
from trt.server.core.server import InferenceServer, StartupError
from trt.server.grpc.options import GrpcOptions
from trt.server.header_forwarding import HeaderForwarding
from trt.server.hosted_front_ends import hosted_front_ends
from trt.server.http.app import HttpApp
from trt.server.http.codec import DEFAULT_HEADER_CACHE_BYTES
from trt.server.http.limits import HttpLimits
from trt.server.http.server import HttpServer
from trt.server.metrics import MetricsApp
from trt.server.openai.options import OpenAIOptions
from trt.server.restrictions import Restrictions
from trt.server.sagemaker.options import SageMakerOptions
from trt.server.tls import TlsOptions, server_context
from trt.server.vertex_ai.options import VertexAiOptions, VertexAiSetupError

logger = logging.getLogger("trt.runtime")

# How long the models' release may run past --exit-timeout-secs before the process ends regardless:
# a Python model's finalize() is given a second past it (MIN_FINALIZE_GRACE_S), and its end is reaped.
STOP_OVERRUN_S = 2.0
# Front ends hold what is still unanswered this long past the exit timeout, so that the requests in
# flight at the timeout are counted before they are cut (a worker's timeout starts a little later).
CUT_MARGIN_S = 0.5
# Fewer open files than this (after taking the hard limit) is said at start: one file per connection.
LOW_OPEN_FILE_LIMIT = 4096


@dataclass(frozen=True)
class Endpoint:
    enabled: bool
    address: str
    port: int
    reuse_port: bool = False  # SO_REUSEPORT (--reuse-http-port): other servers may listen on the port too


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
    http_header_forwarding: HeaderForwarding | None = None  # --http-header-forward-pattern
    grpc_header_forwarding: HeaderForwarding | None = None  # --grpc-header-forward-pattern
    grpc_options: GrpcOptions = field(default_factory=GrpcOptions)  # TLS, keepalive, compression, limits
    sagemaker: SageMakerOptions | None = None  # --allow-sagemaker=true
    vertex_ai: VertexAiOptions | None = None  # --allow-vertex-ai=true (or AIP_MODE=PREDICTION)
    openai: Endpoint = Endpoint(False, "0.0.0.0", 9000)  # --allow-openai, --openai-address/-port
    openai_options: OpenAIOptions = field(default_factory=OpenAIOptions)
    # --frontend-workers: HTTP and gRPC served by this many worker processes (0: by this process)
    frontend_workers: int = 0


def _bind(endpoint: Endpoint, what: str, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in endpoint.address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port or endpoint.reuse_port:  # front-end workers: one socket each on the port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
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
    _open_file_limit()
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
    grpc_server: Any = None
    try:
        # One context for this process's HTTP port and the OpenAI one (workers make their own).
        tls = server_context(options.http_tls) if options.http_tls is not None else None
        if options.frontend_workers > 0 and (options.http.enabled or options.grpc.enabled):
            grpc_server = await _start_frontend_workers(core, options)  # stopped as the gRPC server is
        elif options.grpc.enabled:
            from trt.server.grpc.server import start_grpc_server

            grpc_options = dataclasses.replace(options.grpc_options, restrictions=options.grpc_restrictions)
            grpc_server = await start_grpc_server(
                core, options.grpc.address, options.grpc.port, grpc_options, options.grpc_header_forwarding
            )
            logger.info("Started GRPCInferenceService at %s:%d", options.grpc.address, options.grpc.port)
        metrics = MetricsApp(core, options.gpu_metrics, options.cpu_metrics)
        if options.http.enabled and options.frontend_workers == 0:
            http_app = HttpApp(
                core, options.http_limits.max_body_size, options.http_restrictions,
                options.http_header_cache_bytes, options.http_header_forwarding,
            )  # fmt: skip
            http_server = HttpServer(
                http_app, options.http_limits, cancellable=HttpApp.cancellable,
                queued_bytes=core.queued_bytes, ssl_context=tls,
                keep_header_spelling=options.http_header_forwarding is not None,
            )  # fmt: skip
            await http_server.start(_bind(options.http, "HTTPService"))
            servers.append(http_server)
            secure = " (HTTPS)" if tls is not None else ""
            logger.info("Started HTTPService at %s:%d%s", options.http.address, options.http.port, secure)
        if options.metrics.enabled:
            metrics_server = HttpServer(metrics, HttpLimits(max_body_size=1 << 16))
            await metrics_server.start(_bind(options.metrics, "Metrics Service"))
            servers.append(metrics_server)
            logger.info("Started Metrics Service at %s:%d", options.metrics.address, options.metrics.port)
        servers += await _start_hosted_front_ends(core, options)
        if options.openai.enabled:
            servers.append(
                await _start_openai(core, options, metrics if options.metrics.enabled else None, tls)
            )
    # ValueError: TLS files that cannot be loaded (HTTP's TlsSetupError is one, as gRPC's errors are)
    except (OSError, ValueError, VertexAiSetupError, RuntimeError) as exc:
        logger.error("%s", exc)
        await _shutdown(core, servers, grpc_server, options.exit_timeout_secs)
        return 1

    on_ready(core, failures)
    await stop.wait()
    logger.info("shutting down: finishing in-flight requests")
    finished = await _shutdown(core, servers, grpc_server, options.exit_timeout_secs)
    return 0 if finished else 1


async def _start_frontend_workers(core: InferenceServer, options: ServeOptions) -> Any:
    """HTTP and gRPC in ``options.frontend_workers`` processes; the apps they forward to run here."""
    from trt.server.frontend.config import WorkerConfig
    from trt.server.frontend.supervisor import FrontendWorkers, method_entries, more_listeners
    from trt.server.grpc.server import listen, service_methods

    count = options.frontend_workers
    grpc_options = dataclasses.replace(
        options.grpc_options,
        restrictions=options.grpc_restrictions,
        # each worker holds at most its share of the messages being received
        max_receiving_bytes=max(options.grpc_options.max_receiving_bytes // count, 1),
    )
    http_app = http_sockets = grpc_sockets = None
    if options.http.enabled:
        http_app = HttpApp(
            core,
            options.http_limits.max_body_size,
            options.http_restrictions,
            options.http_header_cache_bytes,
            options.http_header_forwarding,
        )
        http_sockets = more_listeners(_bind(options.http, "HTTPService", reuse_port=True), count)
    if options.grpc.enabled:
        grpc_sockets = more_listeners(listen(options.grpc.address, options.grpc.port, True), count)
    methods = service_methods(core, options.grpc_header_forwarding)
    config = WorkerConfig(
        index=0, channel_fd=-1, http_fd=-1, grpc_fd=-1, http_limits=options.http_limits,
        http_tls=options.http_tls, queued_bytes=core.queued_bytes.limit // count, grpc_options=grpc_options,
        grpc_methods=method_entries(methods), log_level=logging.getLogger().getEffectiveLevel(),
        infer_layouts=http_app is not None and http_app.answers_split,
        forward_metadata=options.grpc_header_forwarding is not None,
        forward_header_spelling=options.http_header_forwarding is not None,
    )  # fmt: skip
    workers = FrontendWorkers(config, http_app, methods, http_sockets, grpc_sockets, count)
    try:
        await workers.start()
    except BaseException:
        await workers.stop(0)
        raise
    if options.http.enabled:
        secure = " (HTTPS)" if options.http_tls is not None else ""
        http = options.http
        logger.info("Started HTTPService at %s:%d (%d workers)%s", http.address, http.port, count, secure)
    if options.grpc.enabled:
        logger.info(
            "Started GRPCInferenceService at %s:%d (%d workers)",
            options.grpc.address,
            options.grpc.port,
            count,
        )
    return workers


async def _start_hosted_front_ends(core: InferenceServer, options: ServeOptions) -> list[HttpServer]:
    """SageMaker and Vertex AI, when asked for (a Vertex AI that cannot start stops the server, as in
    Triton: its message says why)."""
    if options.sagemaker is None and options.vertex_ai is None:
        return []
    metrics = (
        MetricsApp(core, options.gpu_metrics, options.cpu_metrics).render if options.metrics.enabled else None
    )
    try:
        front_ends = hosted_front_ends(
            core, options.sagemaker, options.vertex_ai, options.http_limits.max_body_size,
            options.http_restrictions, metrics,
        )  # fmt: skip
    except VertexAiSetupError as exc:
        raise VertexAiSetupError(f"failed to start Vertex AI service: {exc}") from None
    started = []
    for front_end in front_ends:
        sock = _bind(Endpoint(True, front_end.address, front_end.port), front_end.name)
        server = HttpServer(
            front_end.handler, options.http_limits, cancellable=front_end.cancellable,
            queued_bytes=core.queued_bytes,
        )  # fmt: skip
        await server.start(sock)
        started.append(server)
        logger.info("Started %s at %s:%d", front_end.name, front_end.address, front_end.port)
    return started


async def _start_openai(
    core: InferenceServer, options: ServeOptions, metrics: MetricsApp | None, tls: ssl.SSLContext | None
) -> HttpServer:
    """The OpenAI-compatible front end (--allow-openai), on its own port as in Triton. It serves HTTPS
    when the HTTP port does (--http-use-ssl, the same certificates): its prompts and completions are
    no less private than the HTTP port's tensors."""
    from trt.server.openai.app import OpenAIApp

    app = OpenAIApp(core, options.openai_options, metrics.render if metrics is not None else None)
    sock = _bind(options.openai, "OpenAI-Compatible Frontend")
    limits = dataclasses.replace(options.http_limits, max_body_size=options.openai_options.max_input_size)
    server = HttpServer(
        app, limits, cancellable=app.cancellable, too_large=app.too_large, queued_bytes=core.queued_bytes,
        ssl_context=tls,
    )  # fmt: skip
    await server.start(sock)
    secure = " (HTTPS)" if tls is not None else ""
    logger.info(
        "Started OpenAI-Compatible Frontend at %s:%d%s", options.openai.address, options.openai.port, secure
    )
    return server


async def _shutdown(
    core: InferenceServer, servers: list[HttpServer], grpc_server: Any, timeout: float
) -> bool:
    """Stop within ``--exit-timeout-secs``, as Triton does: requests in flight get what they need of
    it, and the models' finalize() what is left (a model still stuck in execute() is then killed).
    False if the timeout cut anything short (the server then exits 1, as tritonserver does)."""
    deadline = time.monotonic() + timeout
    stops = [asyncio.ensure_future(server.stop(timeout + CUT_MARGIN_S)) for server in servers]
    if grpc_server is not None:
        stops.append(asyncio.ensure_future(grpc_server.stop(timeout + CUT_MARGIN_S)))
    if stops:
        await asyncio.wait(stops, timeout=timeout)
    # What tritonserver counts at its timeout: requests the models have not answered.
    in_flight = core.requests_in_flight()
    if stops:
        await asyncio.wait(stops, timeout=CUT_MARGIN_S + 1)
    # Python models are given at least MIN_FINALIZE_GRACE_S past the deadline, and then killed.
    overrun = max(deadline - time.monotonic(), 0.0) + STOP_OVERRUN_S
    try:
        await asyncio.wait_for(asyncio.shield(core.stop(deadline)), timeout=overrun)
    except TimeoutError:
        # A backend still inside a native call (ONNX Runtime, PyTorch) cannot be interrupted, and the
        # interpreter would wait for its thread however long it runs. Triton exits then too.
        logger.error("failed to stop server: exit timeout expired with models still running: exiting now")
        core.tracer.flush()  # the traces of requests answered: the stop had not reached its own flush
        _exit_now(1)
    unfinished = (
        [f"{in_flight} inference request{'s' if in_flight > 1 else ''} in flight"] if in_flight else []
    )
    unfinished += core.cut_short
    if unfinished:
        logger.error(
            "failed to stop server: exit timeout expired with work unfinished: %s", "; ".join(unfinished)
        )
        return False
    return True


def _open_file_limit() -> None:
    """Each connection is an open file: the limit goes up to the hard limit, and one that stays low
    is said once, at start (past it, connections are reset without a word in the log)."""
    limit = raise_open_file_limit()
    if limit is not None and limit < LOW_OPEN_FILE_LIMIT:
        logger.warning(
            "the open-file limit is %d (hard limit): connections beyond about that many are reset; "
            "raise it (ulimit -n, or the container's nofile) to serve more clients",
            limit,
        )


def _exit_now(code: int) -> NoReturn:
    """End the process without waiting for its threads (the log written out first)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
