"""What one HTTP/2 connection of the gRPC server allows, and the keepalive rules it keeps.

Every buffer is bounded: a frame is at most ``max_frame_size`` (a partly received frame is all that is
held before processing), a header block at most ``max_header_list_size`` plus the compressed slack
(beyond it the connection ends: the block cannot be decoded in part), streams at most
``max_concurrent_streams`` (more are refused), bytes waiting in the write buffer for control frames at
most ``max_write_buffer`` (a peer that floods PINGs or SETTINGS without reading is cut off). Message
sizes and the bytes of partly received messages are the gRPC layer's (``trt.server.grpc.options``).
"""

from __future__ import annotations

from dataclasses import dataclass

from trt.http2.frames import MAX_MAX_FRAME_SIZE, MAX_WINDOW, MIN_MAX_FRAME_SIZE


@dataclass(frozen=True, slots=True)
class KeepaliveOptions:
    """Triton's ``--grpc-keepalive-*`` / ``--grpc-http2-*`` / ``--grpc-max-connection-age*`` flags, with
    its defaults (grpc-core's channel arguments of the same names)."""

    time_ms: int = 7_200_000  # a PING after this long, to see that the client is there
    timeout_ms: int = 20_000  # the connection ends when that PING is not answered in time
    permit_without_calls: bool = False  # PINGs (ours, and the client's) while no call is open
    max_pings_without_data: int = 2  # our PINGs between two data or headers frames we send; 0: any
    min_recv_ping_interval_without_data_ms: int = 300_000  # closer client PINGs are strikes
    max_ping_strikes: int = 2  # strikes before GOAWAY ENHANCE_YOUR_CALM; 0: any
    max_connection_age_ms: int = 0  # 0: connections may live for ever
    max_connection_age_grace_ms: int = 0  # after the age: how long calls may finish; 0: for ever


@dataclass(frozen=True, slots=True)
class H2Settings:
    max_concurrent_streams: int = 1000
    initial_window_size: int = 1 << 20  # per stream; credit returns as the message is taken in
    connection_window_size: int = 1 << 24
    max_frame_size: int = 1 << 20
    max_header_list_size: int = 16 << 10  # grpc-core's default hard limit on metadata
    header_table_size: int = 4096
    max_write_buffer: int = 64 << 20
    max_header_block_frames: int = 64  # HEADERS and CONTINUATIONs of one block
    preface_timeout_s: float = 10.0  # to send the preface and SETTINGS after connecting
    # From a HEADERS frame without END_HEADERS to the CONTINUATION that ends its block. Clients send a
    # block's frames back to back (nothing else may come between them); a block trickled a frame at a
    # time would otherwise hold the connection for as long as its frames allow.
    header_block_timeout_s: float = 10.0
    # Streams a client may reset (or make us reset) in a burst, and how fast that allowance refills:
    # beyond it, a rapid-reset flood (CVE-2023-44487) ends the connection.
    reset_burst: int = 1000
    resets_per_second: float = 100.0
    max_empty_frames: int = 1000  # DATA frames that carry nothing and end nothing, per connection

    def __post_init__(self) -> None:
        if not MIN_MAX_FRAME_SIZE <= self.max_frame_size <= MAX_MAX_FRAME_SIZE:
            raise ValueError(f"max_frame_size must be in [{MIN_MAX_FRAME_SIZE}, {MAX_MAX_FRAME_SIZE}]")
        for name in ("initial_window_size", "connection_window_size"):
            if not 0 < getattr(self, name) <= MAX_WINDOW:
                raise ValueError(f"{name} must be in [1, {MAX_WINDOW}]")
