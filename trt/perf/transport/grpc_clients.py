"""gRPC clients over ``inference.GRPCInferenceService`` that send pre-serialized ``ModelInferRequest``
bytes (no protobuf work per request), unary or over one ModelStreamInfer stream, blocking or asyncio."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import grpc
import grpc.aio

from trt.perf.transport import ConnectionLost, RequestFailed

INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    # One TCP connection per channel even when several channels go to the same target.
    ("grpc.use_local_subchannel_pool", 1),
]


def _failure(error: grpc.RpcError) -> RequestFailed:
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    kind = ConnectionLost if code == grpc.StatusCode.UNAVAILABLE else RequestFailed
    return kind(f"gRPC {code.name if code else 'error'}: {details}")


class StreamResponses:
    """Reads ModelStreamInferResponse messages: counts responses until the final one of a request."""

    def __init__(self, decoupled: bool) -> None:
        from trt.protos import grpc_service_pb2 as pb

        self._message = pb.ModelStreamInferResponse
        self.decoupled = decoupled

    def check(self, raw: bytes) -> tuple[int, bool]:
        """(responses carried: 0 or 1, whether the request is complete)."""
        reply = self._message.FromString(raw)
        if reply.error_message:
            raise RequestFailed(f"gRPC stream: {reply.error_message}")
        if not self.decoupled:
            return 1, True
        final = reply.infer_response.parameters.get("triton_final_response")
        is_final = bool(final is not None and final.bool_param)
        carries = 1 if reply.infer_response.outputs or not is_final else 0
        return carries, is_final


class AsyncGrpcUnary:
    """Shares one channel between all the slots of a worker process (HTTP/2 multiplexes them)."""

    def __init__(self, channel: grpc.aio.Channel, timeout: float) -> None:
        self._call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(INFER)
        self.timeout = timeout
        self.last_send_ns = 0
        self.last_recv_ns = 0

    async def connect(self) -> None:
        return None

    async def infer(self, payload: bytes) -> int:
        try:
            await self._call(payload, timeout=self.timeout)
        except grpc.aio.AioRpcError as error:
            raise _failure(error) from error
        return 1

    def close(self) -> None:
        return None


class AsyncGrpcStream:
    """One bidirectional ModelStreamInfer stream per slot, one request at a time on it."""

    def __init__(self, channel: grpc.aio.Channel, decoupled: bool) -> None:
        self._method: grpc.aio.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(STREAM)
        self._responses = StreamResponses(decoupled)
        self._call: Any = None
        self.last_send_ns = 0
        self.last_recv_ns = 0

    async def connect(self) -> None:
        self._call = self._method()

    async def infer(self, payload: bytes) -> int:
        if self._call is None:
            await self.connect()
        count = 0
        try:
            await self._call.write(payload)
            while True:
                raw = await self._call.read()
                if raw is grpc.aio.EOF:
                    self._call = None
                    raise ConnectionLost("the server ended the stream")
                carried, final = self._responses.check(raw)
                count += carried
                if final:
                    return count
        except grpc.aio.AioRpcError as error:
            self._call = None
            raise _failure(error) from error

    def close(self) -> None:
        if self._call is not None:
            self._call.cancel()
        self._call = None


class SyncGrpcUnary:
    def __init__(self, channel: grpc.Channel, timeout: float) -> None:
        self._call: grpc.UnaryUnaryMultiCallable[Any, Any] = channel.unary_unary(INFER)
        self.timeout = timeout
        self.last_send_ns = 0
        self.last_recv_ns = 0

    def infer(self, payload: bytes) -> int:
        try:
            self._call(payload, timeout=self.timeout)
        except grpc.RpcError as error:
            raise _failure(error) from error
        return 1

    def close(self) -> None:
        return None


class SyncGrpcStream:
    """A blocking stream: requests go through a queue the gRPC runtime iterates."""

    def __init__(self, channel: grpc.Channel, decoupled: bool) -> None:
        self._method: grpc.StreamStreamMultiCallable[Any, Any] = channel.stream_stream(STREAM)
        self._responses = StreamResponses(decoupled)
        self._requests: queue.SimpleQueue[bytes | None] | None = None
        self._replies: Iterator[bytes] | None = None
        self.last_send_ns = 0
        self.last_recv_ns = 0

    def _open(self) -> None:
        requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._requests = requests
        self._replies = self._method(iter(requests.get, None))

    def infer(self, payload: bytes) -> int:
        if self._requests is None:
            self._open()
        assert self._requests is not None and self._replies is not None
        start = time.perf_counter_ns()
        self._requests.put(payload)
        self.last_send_ns = time.perf_counter_ns() - start
        count = 0
        try:
            for raw in self._replies:
                carried, final = self._responses.check(raw)
                count += carried
                if final:
                    return count
        except grpc.RpcError as error:
            self.close()
            raise _failure(error) from error
        self.close()
        raise ConnectionLost("the server ended the stream")

    def close(self) -> None:
        if self._requests is not None:
            self._requests.put(None)
        self._requests, self._replies = None, None
