"""What the core gives a worker process when it starts it, written as JSON onto the worker's stdin
(nothing travels the other way this way). Only the core, the worker's parent, holds that pipe; the
worker still reads it as data, never as a pickle, so that nothing it reads can build more than the
settings below."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from trt.server.frontend.forward import MethodEntry
from trt.server.grpc.h2.settings import H2Settings, KeepaliveOptions
from trt.server.grpc.options import GrpcOptions
from trt.server.http.limits import HttpLimits
from trt.server.restrictions import Restriction, Restrictions
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
    # Each gRPC call's metadata goes to the core with it, which forwards some to models.
    forward_metadata: bool = False
    # HTTP requests go to the core with their header names as the client spelt them, for the same.
    forward_header_spelling: bool = False


def request_frame_limit(http_limits: HttpLimits, grpc: GrpcOptions) -> int:
    """The largest frame a worker may send: a body or message at its limit plus its head and headers."""
    return max(http_limits.max_body_size, grpc.max_message_size) + http_limits.max_header_size + 4096


def config_to_json(config: WorkerConfig) -> bytes:
    return json.dumps(_plain(config), separators=(",", ":")).encode()


def config_from_json(data: bytes) -> WorkerConfig:
    """The settings ``config_to_json`` wrote; ValueError or TypeError where ``data`` holds others."""
    fields = json.loads(data)
    grpc = fields.pop("grpc_options")
    restrictions = grpc.pop("restrictions")
    return WorkerConfig(
        http_limits=HttpLimits(**fields.pop("http_limits")),
        http_tls=_tls(fields.pop("http_tls")),
        grpc_options=GrpcOptions(
            tls=_tls(grpc.pop("tls")),
            keepalive=KeepaliveOptions(**grpc.pop("keepalive")),
            http2=H2Settings(**grpc.pop("http2")),
            restrictions=Restrictions({name: Restriction(*pair) for name, pair in restrictions.items()}),
            **grpc,
        ),
        grpc_methods=[MethodEntry(**entry) for entry in fields.pop("grpc_methods")],
        **fields,
    )


def _tls(fields: dict[str, Any] | None) -> TlsOptions | None:
    return None if fields is None else TlsOptions(**fields)


def _plain(value: Any) -> Any:
    """``value`` as JSON values: dataclasses as objects of their fields."""
    if isinstance(value, Restrictions):
        return {name: [r.header, r.value] for name, r in value.by_category.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, (str, int, float)):
        return value
    raise TypeError(f"a worker setting of type {type(value).__name__} has no JSON form")
