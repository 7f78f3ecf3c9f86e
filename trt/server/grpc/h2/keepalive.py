"""Keepalive as grpc-core's server keeps it (Triton passes its flags to grpc-core as channel arguments).

Our PINGs: every ``time_ms`` while calls are open (or always, with ``permit_without_calls``), at most
``max_pings_without_data`` in a row without a DATA or HEADERS frame sent between them; one not
acknowledged within ``timeout_ms`` ends the connection.

The client's PINGs: one that comes sooner than ``min_recv_ping_interval_without_data_ms`` after the
previous (or, with no call open and ``permit_without_calls`` off, sooner than two hours) is a strike,
unless we sent DATA or HEADERS since; more than ``max_ping_strikes`` strikes end the connection with
GOAWAY ENHANCE_YOUR_CALM "too_many_pings", the words grpc-core uses.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable

from trt.server.grpc.h2.settings import KeepaliveOptions

IDLE_PING_INTERVAL_S = 7200.0  # grpc-core's interval for client PINGs while no call is open


class PingPolicy:
    def __init__(self, options: KeepaliveOptions) -> None:
        self._min_interval = options.min_recv_ping_interval_without_data_ms / 1000
        self._max_strikes = options.max_ping_strikes
        self._permit_without_calls = options.permit_without_calls
        self._last = -math.inf
        self._strikes = 0
        self._data_frames_seen = 0

    def too_many(self, now: float, open_calls: int, data_frames: int) -> bool:
        """Judge a client PING received at ``now``; ``data_frames`` counts our DATA/HEADERS sends."""
        if data_frames != self._data_frames_seen:
            self._data_frames_seen = data_frames
            self._last, self._strikes = -math.inf, 0
        idle = not self._permit_without_calls and open_calls == 0
        allowed_at = self._last + (IDLE_PING_INTERVAL_S if idle else self._min_interval)
        self._last = now
        if allowed_at <= now:
            return False
        self._strikes += 1
        return self._max_strikes != 0 and self._strikes > self._max_strikes


class Pinger:
    """Our keepalive PINGs on one connection."""

    def __init__(
        self,
        options: KeepaliveOptions,
        send_ping: Callable[[bytes], None],
        on_timeout: Callable[[], None],
        open_calls: Callable[[], int],
        data_frames: Callable[[], int],
    ) -> None:
        self._options = options
        self._send_ping = send_ping
        self._on_timeout = on_timeout
        self._open_calls = open_calls
        self._data_frames = data_frames
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._opaque = b""
        self._pings_without_data = 0
        self._data_frames_seen = 0

    def start(self) -> None:
        self._timer = self._loop.call_later(self._options.time_ms / 1000, self._fire)

    def _fire(self) -> None:
        self._timer = self._loop.call_later(self._options.time_ms / 1000, self._fire)
        if self._deadline is not None:
            return  # the previous PING is still unanswered
        if not self._options.permit_without_calls and self._open_calls() == 0:
            return
        frames = self._data_frames()
        if frames != self._data_frames_seen:
            self._data_frames_seen, self._pings_without_data = frames, 0
        limit = self._options.max_pings_without_data
        if limit and self._pings_without_data >= limit:
            return
        self._pings_without_data += 1
        self._opaque = os.urandom(8)
        self._send_ping(self._opaque)
        self._deadline = self._loop.call_later(self._options.timeout_ms / 1000, self._expired)

    def _expired(self) -> None:
        self._deadline = None
        self._on_timeout()

    def acknowledged(self, opaque: bytes) -> None:
        if self._deadline is not None and opaque == self._opaque:
            self._deadline.cancel()
            self._deadline = None

    def stop(self) -> None:
        for timer in (self._timer, self._deadline):
            if timer is not None:
                timer.cancel()
        self._timer = self._deadline = None
