"""HPACK for the hand-framed gRPC client: the shared decoder (``trt.http2.hpack``), whose errors become
the client's ``RequestFailed``, and the literal encoding of the constant request headers. The client
never indexes what it sends, so it keeps no encoder table."""

from __future__ import annotations

from trt.http2 import hpack
from trt.http2.hpack import ENTRY_OVERHEAD, encode_literal, huffman_decode
from trt.http2.hpack_tables import HUFFMAN_CODES, STATIC_TABLE
from trt.perf.transport import RequestFailed

__all__ = [
    "ENTRY_OVERHEAD",
    "HUFFMAN_CODES",
    "STATIC_TABLE",
    "HpackDecoder",
    "HpackError",
    "encode_literal",
    "huffman_decode",
]


class HpackError(RequestFailed):
    """The server's header block cannot be decoded: the connection must be dropped."""


class HpackDecoder(hpack.HpackDecoder):
    """Decodes the server's header blocks in the order it sent them; errors are ``HpackError``."""

    def decode(self, data: bytes) -> list[tuple[str, str]]:
        try:
            return super().decode(data)
        except hpack.HpackError as error:
            raise HpackError(str(error)) from None
