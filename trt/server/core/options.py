"""Options of the serving core, resolved once from the command line (tritonserver's names)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from trt.server.core.datatypes import DEFAULT_MAX_BYTES_ELEMENTS
from trt.server.core.extensions.latency_distributions import LatencyMetricsSettings
from trt.server.core.extensions.log_settings import LogOptions
from trt.server.core.extensions.tracing import TraceSettings
from trt.server.core.models.answer_queue import DEFAULT_LIMIT as DEFAULT_UNREAD_LIMIT
from trt.server.core.scheduling.queued_bytes import DEFAULT_LIMIT


class ModelControlMode(StrEnum):
    NONE = "none"  # load everything at start, ignore changes, refuse load/unload requests
    POLL = "poll"  # load everything at start, then follow changes on disk
    EXPLICIT = "explicit"  # load only what --load-model names or a client asks for


@dataclass(frozen=True, slots=True)
class CoreOptions:
    # Folders, or object-store paths (s3://, gs://, as://) mirrored into a local cache.
    model_repositories: tuple[str | Path, ...] = (Path("model_repository"),)
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    load_models: tuple[str, ...] = ()  # explicit mode; "*" means all
    repository_poll_secs: float = 15.0
    strict_readiness: bool = True
    exit_on_error: bool = True
    auto_complete_config: bool = True
    # --model-config-name: each model's configs/<name>.pbtxt where it has one, else its config.pbtxt
    model_config_name: str = ""
    # --model-namespacing: each repository a namespace, so that two may hold models of one name
    model_namespacing: bool = False
    default_max_batch_size: int = 4
    model_load_thread_count: int = 4
    model_load_retry_count: int = 0  # a version that fails to load is tried this many times more
    cpu_colocation: bool = True  # --backend-config=python,cpu-colocation=BOOL (see CpuColocation)
    server_id: str = "triton"
    response_cache_bytes: int | None = None  # --cache-config local,size=BYTES
    rate_limit: bool = False  # --rate-limit=execution_count
    rate_limit_resources: dict[str, int] = field(default_factory=dict)  # --rate-limit-resource
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
    log: LogOptions = field(default_factory=LogOptions)  # --log-*
    trace: TraceSettings = field(default_factory=TraceSettings)  # --trace-config
    # --allow-client-shm: clients may register system shared memory (any object in /dev/shm the
    # server's user can open); off by default, as in current Triton.
    allow_client_shm: bool = False
    # Limits on what clients can make the server hold (see the README's Security section).
    max_queued_bytes: int = DEFAULT_LIMIT  # --max-queued-bytes: bytes of requests not yet answered; 0 = none
    max_bytes_elements: int = DEFAULT_MAX_BYTES_ELEMENTS  # --max-bytes-elements: per BYTES tensor; 0 = none
    # --max-unread-response-bytes: a decoupled request's answers held unread (see AnswerQueue); 0 = none
    max_unread_response_bytes: int = DEFAULT_UNREAD_LIMIT
    latency_metrics: LatencyMetricsSettings = field(
        default_factory=LatencyMetricsSettings
    )  # --metrics-config
