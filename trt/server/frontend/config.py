"""What the core gives a worker process when it starts it (pickled onto the worker's stdin: the core
is the worker's parent and trusted by it; nothing travels the other way this way)."""

from __future__ import annotations

from dataclasses import dataclass

from trt.server.frontend.forward import MethodEntry
from trt.server.grpc.options import GrpcOptions
from trt.server.http.limits import HttpLimits
from trt.server.tls import TlsOptions

# The most a worker accepts in one frame from the core (answers carry output tensors); the core's own
# limit for frames from workers is the largest request the transports admit (``request_frame_limit``).
ANSWER_FRAME_LIMIT = (1 << 32) - 1


@dataclass(frozen=True)
class WorkerConfig:
    index: int
    channel_fd: int
    http_fd: int  # -1: no HTTP endpoint
    grpc_fd: int  # -1: no gRPC endpoint
    http_limits: HttpLimits
    http_tls: TlsOptions | None
    queued_bytes: int  # this worker's share of --max-queued-bytes (0: no bound)
    grpc_options: GrpcOptions
    grpc_methods: list[MethodEntry]
    log_level: int
    # Binary inference requests go to the core apart, by layout (``layouts``), where the core's
    # HttpApp takes them (``HttpApp.answers_split``).
    infer_layouts: bool = True


def request_frame_limit(http_limits: HttpLimits, grpc: GrpcOptions) -> int:
    """The largest frame a worker may send: a body or message at its limit plus its head and headers."""
    return max(http_limits.max_body_size, grpc.max_message_size) + http_limits.max_header_size + 4096
