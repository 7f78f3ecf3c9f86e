"""tritonserver's gRPC flags (TLS, keepalive, compression, pools, port reuse) -> ``GrpcOptions``."""

from __future__ import annotations

from dataclasses import dataclass

from trt.cli.flags import parse_bool
from trt.server.grpc.h2.settings import KeepaliveOptions
from trt.server.grpc.options import GrpcOptions
from trt.server.tls import TlsOptions


@dataclass(frozen=True)
class GrpcFlags:
    """The flags as given (booleans as tritonserver spells them: true/false, 1/0, ...)."""

    use_ssl: str = "false"
    use_ssl_mutual: str = "false"
    server_cert: str = ""
    server_key: str = ""
    root_cert: str = ""
    infer_response_compression_level: str = "none"
    keepalive_time: int = 7_200_000
    keepalive_timeout: int = 20_000
    keepalive_permit_without_calls: str = "false"
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_age: int = 0
    max_connection_age_grace: int = 0
    max_response_pool_size: int = 2**31 - 1
    reuse_port: str = "false"

    def options(self) -> GrpcOptions:
        """The options they mean; ValueError names the flag that is wrong."""
        mutual = parse_bool(self.use_ssl_mutual, "--grpc-use-ssl-mutual")
        tls = None
        if mutual or parse_bool(self.use_ssl, "--grpc-use-ssl"):  # mutual implies TLS, as in Triton
            if not self.server_cert or not self.server_key:
                raise ValueError("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
            tls = TlsOptions(self.server_cert, self.server_key, self.root_cert, mutual)
        for flag, value in (
            ("--grpc-keepalive-time", self.keepalive_time),
            ("--grpc-keepalive-timeout", self.keepalive_timeout),
            ("--grpc-http2-max-pings-without-data", self.http2_max_pings_without_data),
            (
                "--grpc-http2-min-recv-ping-interval-without-data",
                self.http2_min_recv_ping_interval_without_data,
            ),
            ("--grpc-http2-max-ping-strikes", self.http2_max_ping_strikes),
            ("--grpc-max-connection-age", self.max_connection_age),
            ("--grpc-max-connection-age-grace", self.max_connection_age_grace),
        ):
            if value < 0:
                raise ValueError(f"{flag} must not be negative, got {value}")
        if self.keepalive_time == 0:
            raise ValueError("--grpc-keepalive-time must be above 0 (milliseconds)")
        keepalive = KeepaliveOptions(
            time_ms=self.keepalive_time,
            timeout_ms=self.keepalive_timeout,
            permit_without_calls=parse_bool(
                self.keepalive_permit_without_calls, "--grpc-keepalive-permit-without-calls"
            ),
            max_pings_without_data=self.http2_max_pings_without_data,
            min_recv_ping_interval_without_data_ms=self.http2_min_recv_ping_interval_without_data,
            max_ping_strikes=self.http2_max_ping_strikes,
            max_connection_age_ms=self.max_connection_age,
            max_connection_age_grace_ms=self.max_connection_age_grace,
        )
        return GrpcOptions(
            tls=tls,
            keepalive=keepalive,
            infer_compression_level=self.infer_response_compression_level.lower(),
            reuse_port=parse_bool(self.reuse_port, "--reuse-grpc-port"),
            max_response_pool_size=self.max_response_pool_size,
        )
