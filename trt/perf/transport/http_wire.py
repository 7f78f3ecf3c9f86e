"""HTTP/1.1 response framing shared by the blocking and asyncio clients."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ResponseHead:
    status: int
    length: int  # body bytes, or -1 when chunked
    keep_alive: bool
    head_size: int  # bytes up to and including the blank line


def parse_head(buffer: bytes | bytearray, end: int) -> ResponseHead:
    """``end`` is the index of the ``\\r\\n\\r\\n`` that closes the status line and headers."""
    head = bytes(buffer[: end + 2]).lower()
    status = int(head[9:12]) if head[9:12].isdigit() else 0
    at = head.find(b"\r\ncontent-length:")
    if at >= 0:
        length = int(head[at + 17 : head.index(b"\r\n", at + 2)])
    elif head.find(b"\r\ntransfer-encoding:") >= 0 and b"chunked" in head:
        length = -1
    else:
        length = 0
    keep_alive = not head.startswith(b"http/1.0") and b"\r\nconnection: close" not in head
    return ResponseHead(status, length, keep_alive, end + 4)


def chunked_body_end(buffer: bytes | bytearray, start: int) -> tuple[int, bytes]:
    """Where a chunked body that begins at ``start`` ends (-1 if not all here yet), and its bytes."""
    position, body = start, bytearray()
    while True:
        line_end = buffer.find(b"\r\n", position)
        if line_end < 0:
            return -1, b""
        size = int(bytes(buffer[position:line_end]).split(b";")[0] or b"0", 16)
        if size == 0:
            trailer_end = buffer.find(b"\r\n\r\n", line_end)
            return (-1, b"") if trailer_end < 0 else (trailer_end + 4, bytes(body))
        chunk_start = line_end + 2
        if len(buffer) < chunk_start + size + 2:
            return -1, b""
        body += buffer[chunk_start : chunk_start + size]
        position = chunk_start + size + 2


def error_message(status: int, body: bytes) -> str:
    text = body[:300].decode(errors="replace").strip()
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"
