"""Transport clients for the measured load: raw keep-alive HTTP/1.1, gRPC through grpcio (blocking and
asyncio), and unary gRPC over hand-framed HTTP/2 with completion callbacks (``grpc_h2``).

Each sends already-encoded bytes and reports only what the measurement needs: success or the server's
error message, the number of responses, and the time spent sending and receiving."""

from __future__ import annotations


class RequestFailed(Exception):
    """The server answered with an error (or the connection broke); the message is the server's."""


class ConnectionLost(RequestFailed):
    """The connection closed under a request: the client reconnects before the next one."""
