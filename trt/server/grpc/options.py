"""How the gRPC endpoint runs: TLS, keepalive, compression, limits (Triton's ``--grpc-*`` flags)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from trt.server.grpc.h2.settings import H2Settings, KeepaliveOptions
from trt.server.restrictions import Restrictions

# Triton's MAX_GRPC_MESSAGE_SIZE (INT32_MAX), for what it receives and what it sends.
MAX_MESSAGE_SIZE = 2**31 - 1

# --grpc-infer-response-compression-level: none, low, medium, high.
COMPRESSION_LEVELS = ("none", "low", "medium", "high")


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """``--grpc-use-ssl`` / ``--grpc-use-ssl-mutual`` with ``--grpc-server-cert``, ``--grpc-server-key``
    and ``--grpc-root-cert`` (with mutual TLS, the client certificates must chain to it)."""

    server_cert: str
    server_key: str
    root_cert: str = ""
    mutual: bool = False

    def context(self) -> ssl.SSLContext:
        """The server's TLS context: HTTP/2 over TLS 1.2 or later (ALPN ``h2``, as gRPC requires)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.server_cert, self.server_key)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"--grpc-server-cert / --grpc-server-key: cannot load '{self.server_cert}' with "
                f"'{self.server_key}': {exc}"
            ) from None
        if self.mutual:
            if not self.root_cert:
                raise ValueError("--grpc-use-ssl-mutual needs --grpc-root-cert to check clients against")
            try:
                context.load_verify_locations(self.root_cert)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"--grpc-root-cert: cannot load '{self.root_cert}': {exc}") from None
            context.verify_mode = ssl.CERT_REQUIRED
        context.set_alpn_protocols(["h2"])
        return context


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
