"""How the gRPC endpoint runs: TLS, keepalive, compression, limits (Triton's ``--grpc-*`` flags)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trt.server.grpc.h2.settings import H2Settings, KeepaliveOptions
from trt.server.restrictions import Restrictions
from trt.server.tls import TlsOptions

# Triton's MAX_GRPC_MESSAGE_SIZE (INT32_MAX), for what it receives and what it sends.
MAX_MESSAGE_SIZE = 2**31 - 1

# --grpc-infer-response-compression-level: none, low, medium, high.
COMPRESSION_LEVELS = ("none", "low", "medium", "high")


@dataclass(frozen=True, slots=True)
class GrpcOptions:
    tls: TlsOptions | None = None
    keepalive: KeepaliveOptions = field(default_factory=KeepaliveOptions)
    http2: H2Settings = field(default_factory=H2Settings)
    restrictions: Restrictions = field(default_factory=Restrictions)  # --grpc-restricted-protocol
    infer_compression_level: str = "none"  # --grpc-infer-response-compression-level
    reuse_port: bool = False  # --reuse-grpc-port
    max_message_size: int = MAX_MESSAGE_SIZE
    # Bytes of messages being received (announced by their length prefix), over every connection: a
    # message that would take the total past it is refused with RESOURCE_EXHAUSTED before any of it
    # is held. One message of the largest size always fits.
    max_receiving_bytes: int = MAX_MESSAGE_SIZE
    # --grpc-max-response-pool-size: responses a stream may hold unsent (the client reads slowly)
    # before the code producing them waits; ``max_unsent_bytes`` bounds their bytes the same way.
    max_response_pool_size: int = 2**31 - 1
    max_unsent_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        if self.infer_compression_level not in COMPRESSION_LEVELS:
            raise ValueError(
                "--grpc-infer-response-compression-level takes none, low, medium or high, got "
                f"'{self.infer_compression_level}'"
            )
        if self.max_response_pool_size <= 0:
            raise ValueError("--grpc-max-response-pool-size must be greater than 0")
