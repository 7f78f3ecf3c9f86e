"""HTTP/2 frame types, flags, settings and error codes (RFC 9113 sections 4-7), and the frame header."""

from __future__ import annotations

import struct
from enum import IntEnum

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER_SIZE = 9


class FrameType(IntEnum):
    DATA = 0x0
    HEADERS = 0x1
    PRIORITY = 0x2
    RST_STREAM = 0x3
    SETTINGS = 0x4
    PUSH_PROMISE = 0x5
    PING = 0x6
    GOAWAY = 0x7
    WINDOW_UPDATE = 0x8
    CONTINUATION = 0x9


# Flags (one bit can mean different things on different frames).
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20


class Setting(IntEnum):
    HEADER_TABLE_SIZE = 0x1
    ENABLE_PUSH = 0x2
    MAX_CONCURRENT_STREAMS = 0x3
    INITIAL_WINDOW_SIZE = 0x4
    MAX_FRAME_SIZE = 0x5
    MAX_HEADER_LIST_SIZE = 0x6


class ErrorCode(IntEnum):
    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    CONNECT_ERROR = 0xA
    ENHANCE_YOUR_CALM = 0xB
    INADEQUATE_SECURITY = 0xC
    HTTP_1_1_REQUIRED = 0xD


DEFAULT_WINDOW = 65535
MAX_WINDOW = (1 << 31) - 1
MIN_MAX_FRAME_SIZE = 1 << 14  # the smallest SETTINGS_MAX_FRAME_SIZE allowed, and the default
MAX_MAX_FRAME_SIZE = (1 << 24) - 1
MAX_STREAM_ID = (1 << 31) - 1

_HEAD = struct.Struct(">IBBI")


def frame_head(length: int, kind: int, flags: int, stream: int) -> bytes:
    """The 9-byte frame header."""
    return _HEAD.pack(length, kind, flags, stream)[1:]


def settings_payload(settings: dict[Setting, int]) -> bytes:
    return b"".join(struct.pack(">HI", key, value) for key, value in settings.items())
