"""``trt serve``: tritonserver's flags, names and forms, so existing launch scripts keep working."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from trt.cli.flags import (
    parse_backend_config,
    parse_bool,
    parse_cache_config,
    parse_metrics_config,
    parse_model_config_name,
    parse_rate_limit_resources,
    parse_trace_config,
    triton_only_flags,
)
from trt.cli.grpc_flags import GrpcFlags
from trt.cli.hosted_flags import check_port_collisions, resolve_hosted_flags
from trt.cli.serve_summary import listening_services, print_summary
from trt.server.core.datatypes import DEFAULT_MAX_BYTES_ELEMENTS
from trt.server.core.extensions.log_settings import LOG_FORMATS, LogOptions, LogSettings
from trt.server.core.models.answer_queue import DEFAULT_LIMIT as DEFAULT_UNREAD_BYTES
from trt.server.core.models.object_store import is_remote
from trt.server.core.options import CoreOptions, ModelControlMode
from trt.server.core.scheduling.queued_bytes import DEFAULT_LIMIT as DEFAULT_QUEUED_BYTES
from trt.server.header_forwarding import HeaderForwarding
from trt.server.http.codec import DEFAULT_HEADER_CACHE_BYTES
from trt.server.http.limits import DEFAULT_MAX_HEADER_COUNT, DEFAULT_MAX_HEADER_SIZE, HttpLimits
from trt.server.openai.options import OPENAI_CATEGORIES, OpenAIOptions
from trt.server.restrictions import Restrictions
from trt.server.tls import TlsOptions, server_context

if TYPE_CHECKING:
    from trt.server.core.server import InferenceServer

T = TypeVar("T")


def serve_command(
    context: typer.Context,
    model_repository: list[str] = typer.Option(
        None,
        "--model-repository",
        "--model-store",
        help="Model repository folder or s3://bucket/path; repeat for several.",
    ),
    http_port: int = typer.Option(8000, "--http-port"),
    grpc_port: int = typer.Option(8001, "--grpc-port"),
    metrics_port: int = typer.Option(8002, "--metrics-port"),
    http_address: str = typer.Option("0.0.0.0", "--http-address"),
    grpc_address: str = typer.Option("0.0.0.0", "--grpc-address"),
    metrics_address: str = typer.Option("", "--metrics-address", help="Defaults to --http-address."),
    allow_http: str = typer.Option("true", "--allow-http", metavar="BOOL"),
    allow_grpc: str = typer.Option("true", "--allow-grpc", metavar="BOOL"),
    allow_metrics: str = typer.Option("true", "--allow-metrics", metavar="BOOL"),
    allow_gpu_metrics: str = typer.Option("true", "--allow-gpu-metrics", metavar="BOOL"),
    allow_cpu_metrics: str = typer.Option("true", "--allow-cpu-metrics", metavar="BOOL"),
    metrics_config: list[str] = typer.Option(
        None,
        "--metrics-config",
        metavar="SETTING=VALUE",
        help="Latency metrics: counter_latencies=BOOL, summary_latencies=BOOL, summary_quantiles=Q:E,...,"
        " histogram_latencies=BOOL.",
    ),
    model_control_mode: ModelControlMode = typer.Option(ModelControlMode.NONE, "--model-control-mode"),
    load_model: list[str] = typer.Option(
        None, "--load-model", help="Explicit mode: model to load; '*' = all."
    ),
    repository_poll_secs: float = typer.Option(15.0, "--repository-poll-secs"),
    strict_readiness: str = typer.Option("true", "--strict-readiness", metavar="BOOL"),
    exit_on_error: str = typer.Option("true", "--exit-on-error", metavar="BOOL"),
    disable_auto_complete_config: bool = typer.Option(False, "--disable-auto-complete-config"),
    model_config_name: str = typer.Option("", "--model-config-name", help="configs/NAME.pbtxt if present."),
    model_namespacing: str = typer.Option(
        "false", "--model-namespacing", metavar="BOOL", help="Each repository a namespace: names may repeat."
    ),
    strict_model_config: str = typer.Option(
        "", "--strict-model-config", metavar="BOOL", help="Deprecated: true = --disable-auto-complete-config."
    ),
    backend_config: list[str] = typer.Option(None, "--backend-config", metavar="[BACKEND,]KEY=VALUE"),
    model_load_thread_count: int = typer.Option(4, "--model-load-thread-count"),
    model_load_retry_count: int = typer.Option(
        0, "--model-load-retry-count", min=0, help="Times a model version that failed to load is tried again."
    ),
    rate_limit: str = typer.Option("off", "--rate-limit", metavar="off|execution_count"),
    rate_limit_resource: list[str] = typer.Option(
        None, "--rate-limit-resource", metavar="NAME:COUNT[:DEVICE]"
    ),
    cache_config: list[str] = typer.Option(
        None, "--cache-config", metavar="local,size=BYTES", help="Response cache for models that enable it."
    ),
    exit_timeout_secs: float = typer.Option(30.0, "--exit-timeout-secs"),
    frontend_workers: int = typer.Option(
        0, "--frontend-workers", min=0, help="HTTP and gRPC in N worker processes (0: in this one)."
    ),
    http_max_input_size: int = typer.Option(64 * 1024 * 1024, "--http-max-input-size"),
    http_restricted_api: list[str] = typer.Option(
        None,
        "--http-restricted-api",
        metavar="CATEGORY[,CATEGORY...]:HEADER=VALUE",
        help="Requests to these API categories need this header (403 without it).",
    ),
    http_header_forward_pattern: str = typer.Option(
        "", "--http-header-forward-pattern", metavar="REGEX", help="Headers it finds: request parameters."
    ),
    grpc_header_forward_pattern: str = typer.Option(
        "", "--grpc-header-forward-pattern", metavar="REGEX", help="The same for gRPC metadata."
    ),
    grpc_restricted_protocol: list[str] = typer.Option(
        None,
        "--grpc-restricted-protocol",
        metavar="CATEGORY[,CATEGORY...]:HEADER=VALUE",
        help="RPCs of these categories need this metadata (UNAVAILABLE without it).",
    ),
    # gRPC: TLS, keepalive, compression and pools, as tritonserver's flags (trt.cli.grpc_flags).
    grpc_use_ssl: str = typer.Option("false", "--grpc-use-ssl", metavar="BOOL"),
    grpc_use_ssl_mutual: str = typer.Option("false", "--grpc-use-ssl-mutual", metavar="BOOL"),
    grpc_server_cert: str = typer.Option("", "--grpc-server-cert", help="PEM server certificate."),
    grpc_server_key: str = typer.Option("", "--grpc-server-key", help="PEM server key."),
    grpc_root_cert: str = typer.Option(
        "", "--grpc-root-cert", help="PEM CA that client certificates chain to."
    ),
    grpc_compression: str = typer.Option(
        "none", "--grpc-infer-response-compression-level", metavar="none|low|medium|high"
    ),
    grpc_keepalive_time: int = typer.Option(7_200_000, "--grpc-keepalive-time", metavar="MS"),
    grpc_keepalive_timeout: int = typer.Option(20_000, "--grpc-keepalive-timeout", metavar="MS"),
    grpc_keepalive_permit: str = typer.Option(
        "false", "--grpc-keepalive-permit-without-calls", metavar="BOOL"
    ),
    grpc_max_pings: int = typer.Option(2, "--grpc-http2-max-pings-without-data"),
    grpc_min_ping_interval: int = typer.Option(
        300_000, "--grpc-http2-min-recv-ping-interval-without-data", metavar="MS"
    ),
    grpc_max_ping_strikes: int = typer.Option(2, "--grpc-http2-max-ping-strikes"),
    grpc_max_connection_age: int = typer.Option(0, "--grpc-max-connection-age", metavar="MS"),
    grpc_max_connection_age_grace: int = typer.Option(0, "--grpc-max-connection-age-grace", metavar="MS"),
    grpc_response_pool: int = typer.Option(2**31 - 1, "--grpc-max-response-pool-size"),
    reuse_grpc_port: str = typer.Option("false", "--reuse-grpc-port", metavar="BOOL"),
    reuse_http_port: str = typer.Option("false", "--reuse-http-port", metavar="BOOL"),
    server_id: str = typer.Option("triton", "--id", help="Server name in server metadata."),
    log_verbose: int = typer.Option(0, "--log-verbose"),
    log_info: str = typer.Option("true", "--log-info", metavar="BOOL"),
    log_warning: str = typer.Option("true", "--log-warning", metavar="BOOL"),
    log_error: str = typer.Option("true", "--log-error", metavar="BOOL"),
    log_format: str = typer.Option("default", "--log-format", metavar="default|ISO8601"),
    log_file: str = typer.Option("", "--log-file", help="Write the log to this file instead of stderr."),
    trace_config: list[str] = typer.Option(
        None,
        "--trace-config",
        metavar="[triton,]SETTING=VALUE",
        help="Request tracing: level=TIMESTAMPS, rate=N, count=N, triton,file=PATH, triton,log-frequency=N.",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the start-up summary as one JSON line."),
    # -- limits and TLS (README "Security"): what a client can make the server hold, and HTTPS ----------
    allow_client_shm: str = typer.Option(
        "false",
        "--allow-client-shm",
        metavar="BOOL",
        help="Let clients register system shared memory (any object in /dev/shm this user can open).",
    ),
    max_queued_bytes: int = typer.Option(
        DEFAULT_QUEUED_BYTES,
        "--max-queued-bytes",
        min=0,
        help="Bytes of requests received and not yet answered, all together; over it: 503. 0 = no bound.",
    ),
    max_bytes_elements: int = typer.Option(
        DEFAULT_MAX_BYTES_ELEMENTS,
        "--max-bytes-elements",
        min=0,
        help="Most elements one BYTES tensor of a request may have; over it: 400. 0 = no bound.",
    ),
    max_unread_response_bytes: int = typer.Option(
        DEFAULT_UNREAD_BYTES,
        "--max-unread-response-bytes",
        min=0,
        help="Bytes of a decoupled model's responses to one request held while its reader lags; over it "
        "the request is cancelled. 0 = no bound.",
    ),
    http_max_header_size: int = typer.Option(
        DEFAULT_MAX_HEADER_SIZE,
        "--http-max-header-size",
        min=256,
        help="Bytes of an HTTP request line and headers together; over it: 431 (414 for the URL).",
    ),
    http_max_header_count: int = typer.Option(
        DEFAULT_MAX_HEADER_COUNT,
        "--http-max-header-count",
        min=1,
        help="Headers per HTTP request; over it: 431.",
    ),
    http_infer_header_cache_size: int = typer.Option(
        DEFAULT_HEADER_CACHE_BYTES,
        "--http-infer-header-cache-size",
        min=0,
        help="Bytes of decoded JSON inference headers remembered for reuse (0 = none).",
    ),
    http_use_ssl: str = typer.Option("false", "--http-use-ssl", metavar="BOOL", help="Serve HTTPS."),
    http_server_cert: str = typer.Option("", "--http-server-cert", help="PEM certificate chain for HTTPS."),
    http_server_key: str = typer.Option("", "--http-server-key", help="PEM private key for HTTPS."),
    http_root_cert: str = typer.Option("", "--http-root-cert", help="PEM CA certificates of HTTPS clients."),
    http_use_ssl_mutual: str = typer.Option(
        "false", "--http-use-ssl-mutual", metavar="BOOL", help="Require client certificates (mutual TLS)."
    ),
    # SageMaker and Vertex AI front ends (trt.cli.hosted_flags resolves them with the environment).
    allow_sagemaker: str = typer.Option("false", "--allow-sagemaker", metavar="BOOL"),
    sagemaker_port: int = typer.Option(8080, "--sagemaker-port"),
    sagemaker_safe_port_range: str = typer.Option("", "--sagemaker-safe-port-range", metavar="LOW-HIGH"),
    sagemaker_thread_count: int = typer.Option(8, "--sagemaker-thread-count", help="Taken, no effect."),
    allow_vertex_ai: str = typer.Option(
        "", "--allow-vertex-ai", metavar="BOOL", help="Default: true when AIP_MODE=PREDICTION."
    ),
    vertex_ai_port: int | None = typer.Option(
        None, "--vertex-ai-port", help="Default: $AIP_HTTP_PORT or 8080."
    ),
    vertex_ai_thread_count: int = typer.Option(8, "--vertex-ai-thread-count", help="Taken, no effect."),
    vertex_ai_default_model: str = typer.Option("", "--vertex-ai-default-model"),
    # The OpenAI-compatible front end, with the flags of Triton's (python/openai/openai_frontend/main.py).
    allow_openai: str = typer.Option(
        "false", "--allow-openai", metavar="BOOL", help="Serve the OpenAI-compatible API (/v1/...)."
    ),
    openai_port: int = typer.Option(9000, "--openai-port"),
    openai_address: str = typer.Option("", "--openai-address", help="Defaults to --http-address."),
    openai_restricted_api: list[str] = typer.Option(
        None,
        "--openai-restricted-api",
        metavar="CATEGORY[,CATEGORY...]:HEADER=VALUE",
        help="OpenAI routes of these categories (inference, model-repository, metrics, health) need it.",
    ),
    tokenizer: str = typer.Option(
        "",
        "--tokenizer",
        help="Tokenizer folder (or tokenizer.json) for every model; default: the model's own.",
    ),
    chat_template: str = typer.Option(
        "", "--chat-template", help="A Jinja chat template file to use instead."
    ),
    default_max_tokens: int = typer.Option(
        16, "--default-max-tokens", min=1, help="max_tokens of OpenAI requests that set none."
    ),
) -> None:
    """Serve a Triton model repository over HTTP (8000), gRPC (8001) and metrics (8002)."""
    # The server's modules (a third of a second) are imported to serve, not to print this help.
    from trt.server.runtime import Endpoint, ServeOptions, serve

    triton_only = triton_only_flags(context.args)
    if log_format not in LOG_FORMATS:
        raise typer.BadParameter(f"--log-format takes default or ISO8601, got '{log_format}'")
    log = LogOptions(
        log_file=log_file,
        log_info=parse_bool(log_info, "--log-info"),
        log_warning=parse_bool(log_warning, "--log-warning"),
        log_error=parse_bool(log_error, "--log-error"),
        log_verbose_level=log_verbose,
        log_format=log_format,
    )
    _configure_logging(log)
    for flag, why in triton_only.ignored:
        logging.getLogger("trt.serve").warning("%s has no effect in trt serve: %s", flag, why)
    for flag, target, value in triton_only.replaced:
        logging.getLogger("trt.serve").warning(
            "%s is deprecated in tritonserver: taken as %s=%s", flag, target, value
        )
    backend_settings = parse_backend_config(backend_config or [])
    auto_complete = not disable_auto_complete_config
    if strict_model_config:
        auto_complete = auto_complete and not parse_bool(strict_model_config, "--strict-model-config")
    default_batch = backend_settings.get("", {}).get("default-max-batch-size", "4")
    hosted = resolve_hosted_flags(
        context, os.environ, http_address, allow_sagemaker, sagemaker_port, sagemaker_safe_port_range,
        allow_vertex_ai, vertex_ai_port, vertex_ai_default_model,
    )  # fmt: skip
    if not model_repository and hosted.storage_uri:
        model_repository = [hosted.storage_uri]
    core = CoreOptions(
        model_repositories=tuple(_repository(p) for p in (model_repository or ["model_repository"])),
        model_control_mode=model_control_mode,
        load_models=tuple(load_model or ()),
        repository_poll_secs=repository_poll_secs,
        strict_readiness=parse_bool(strict_readiness, "--strict-readiness"),
        exit_on_error=parse_bool(exit_on_error, "--exit-on-error"),
        auto_complete_config=auto_complete,
        model_config_name=_parsed(parse_model_config_name, model_config_name),
        model_namespacing=parse_bool(model_namespacing, "--model-namespacing"),
        default_max_batch_size=int(default_batch),
        model_load_thread_count=model_load_thread_count,
        model_load_retry_count=model_load_retry_count,
        cpu_colocation=parse_bool(
            backend_settings.get("python", {}).get("cpu-colocation", "true"),
            "--backend-config=python,cpu-colocation",
        ),
        server_id=server_id,
        backend_config=backend_settings,
        response_cache_bytes=_parsed(
            parse_cache_config, triton_only.values_of("--cache-config") + (cache_config or [])
        ),
        rate_limit=_rate_limit_on(rate_limit),
        rate_limit_resources=_parsed(parse_rate_limit_resources, rate_limit_resource or []),
        log=log,
        trace=_parsed(parse_trace_config, triton_only.values_of("--trace-config") + (trace_config or [])),
        allow_client_shm=parse_bool(allow_client_shm, "--allow-client-shm"),
        max_queued_bytes=max_queued_bytes,
        max_bytes_elements=max_bytes_elements,
        max_unread_response_bytes=max_unread_response_bytes,
        latency_metrics=_parsed(parse_metrics_config, metrics_config or []),
    )
    http_tls = _http_tls(
        parse_bool(http_use_ssl, "--http-use-ssl"), http_server_cert, http_server_key, http_root_cert,
        parse_bool(http_use_ssl_mutual, "--http-use-ssl-mutual"),
    )  # fmt: skip
    options = ServeOptions(
        core=core,
        http=Endpoint(
            hosted.http_on_by_default and parse_bool(allow_http, "--allow-http"),
            http_address,
            http_port,
            parse_bool(reuse_http_port, "--reuse-http-port"),
        ),
        grpc=Endpoint(
            hosted.grpc_on_by_default and parse_bool(allow_grpc, "--allow-grpc"), grpc_address, grpc_port
        ),
        metrics=Endpoint(
            parse_bool(allow_metrics, "--allow-metrics"), metrics_address or http_address, metrics_port
        ),
        gpu_metrics=parse_bool(allow_gpu_metrics, "--allow-gpu-metrics"),
        cpu_metrics=parse_bool(allow_cpu_metrics, "--allow-cpu-metrics"),
        exit_timeout_secs=exit_timeout_secs,
        http_limits=HttpLimits(http_max_input_size, http_max_header_size, http_max_header_count),
        http_header_cache_bytes=http_infer_header_cache_size,
        http_tls=http_tls,
        http_restrictions=_parsed(Restrictions.parse, http_restricted_api or [], "--http-restricted-api"),
        grpc_restrictions=_parsed(
            Restrictions.parse, grpc_restricted_protocol or [], "--grpc-restricted-protocol"
        ),
        http_header_forwarding=_forwarding(http_header_forward_pattern, "--http-header-forward-pattern"),
        grpc_header_forwarding=_forwarding(grpc_header_forward_pattern, "--grpc-header-forward-pattern"),
        grpc_options=_parsed(
            GrpcFlags(
                grpc_use_ssl,
                grpc_use_ssl_mutual,
                grpc_server_cert,
                grpc_server_key,
                grpc_root_cert,
                grpc_compression,
                grpc_keepalive_time,
                grpc_keepalive_timeout,
                grpc_keepalive_permit,
                grpc_max_pings,
                grpc_min_ping_interval,
                grpc_max_ping_strikes,
                grpc_max_connection_age,
                grpc_max_connection_age_grace,
                grpc_response_pool,
                reuse_grpc_port,
            ).options
        ),
        sagemaker=hosted.sagemaker,
        vertex_ai=hosted.vertex_ai,
        openai=Endpoint(
            parse_bool(allow_openai, "--allow-openai"), openai_address or http_address, openai_port
        ),
        openai_options=_openai_options(
            tokenizer, chat_template, default_max_tokens, http_max_input_size, openai_restricted_api or []
        ),
        frontend_workers=frontend_workers,
    )
    check_port_collisions(listening_services(options))

    def on_ready(server: InferenceServer, failures: dict[str, str]) -> None:
        print_summary(server, options, json_output)

    code = _run(serve(options, on_ready))
    raise typer.Exit(code)


def _openai_options(
    tokenizer: str, chat_template: str, default_max_tokens: int, max_input_size: int, restricted: list[str]
) -> OpenAIOptions:
    """The OpenAI front end's settings; its files must be local (nothing is downloaded)."""
    for flag, value in (("--tokenizer", tokenizer), ("--chat-template", chat_template)):
        if value and not Path(value).exists():
            raise typer.BadParameter(
                f"{flag}: {value} does not exist (give a local path; nothing is downloaded)"
            )
    if chat_template and not Path(chat_template).is_file():
        raise typer.BadParameter(f"--chat-template: {chat_template} is not a file")
    return OpenAIOptions(
        tokenizer=Path(tokenizer) if tokenizer else None,
        chat_template=Path(chat_template) if chat_template else None,
        default_max_tokens=default_max_tokens,
        max_input_size=max_input_size,
        restrictions=_parsed(Restrictions.parse, restricted, "--openai-restricted-api", OPENAI_CATEGORIES),
    )


def _http_tls(use_ssl: bool, cert: str, key: str, root_cert: str, mutual: bool) -> TlsOptions | None:
    """The HTTPS settings, checked now (files readable, key matching), not after the models load."""
    if not use_ssl:
        if mutual or cert or key or root_cert:
            raise typer.BadParameter(
                "the --http-server-cert/-key/--http-root-cert flags need --http-use-ssl=true"
            )
        return None
    options = TlsOptions(cert, key, root_cert, mutual)
    _parsed(server_context, options)  # TlsSetupError is a ValueError: a usage error naming the flag
    return options


def _repository(location: str) -> str | Path:
    return location if is_remote(location) else Path(location)


def _parsed(parse: Callable[..., T], *arguments: Any) -> T:
    """A flag's parsed value; a parser's ValueError becomes the usage error typer prints."""
    try:
        return parse(*arguments)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _forwarding(pattern: str, flag: str) -> HeaderForwarding | None:
    return _parsed(HeaderForwarding.parse, pattern, flag) if pattern else None


def _rate_limit_on(value: str) -> bool:
    if value not in ("off", "execution_count"):
        raise typer.BadParameter(f"--rate-limit takes off or execution_count, got '{value}'")
    return value == "execution_count"


def _run(coroutine: object) -> int:
    try:
        import uvloop

        return int(uvloop.run(coroutine))  # type: ignore[arg-type]
    except ImportError:
        return int(asyncio.run(coroutine))  # type: ignore[arg-type]


def _configure_logging(log: LogOptions) -> None:
    """Where the log goes; its level and format are the server's ``LogSettings`` (changeable later
    through the logging API)."""
    handler: logging.Handler
    if log.log_file:
        try:
            handler = logging.FileHandler(log.log_file, encoding="utf-8")
        except OSError as exc:
            raise typer.BadParameter(f"--log-file: cannot write {log.log_file}: {exc.strerror}") from None
    else:
        handler = logging.StreamHandler(sys.stderr)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    LogSettings(log).apply()
