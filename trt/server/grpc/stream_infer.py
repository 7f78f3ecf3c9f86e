"""``ModelStreamInfer``: requests on one stream run concurrently and are answered as they complete.

Each request may get one response (an ordinary model) or any number (a decoupled model), each marked
with ``triton_final_response``; errors travel in-band as ``error_message`` and the stream goes on. A
client that cancels the stream (or goes away) cancels its requests, so a model asking
``request.is_cancelled()`` can stop. Responses the client leaves unread hold up the request that
produces them (``GrpcCall.writable``), not the server's memory.
"""

from __future__ import annotations

import asyncio
import logging

from trt.protos import grpc_service_pb2 as pb
from trt.server.core.server import InferenceServer
from trt.server.core.types import InferenceResponse
from trt.server.grpc import codec, compression
from trt.server.grpc.call import GrpcCall
from trt.server.grpc.errors import status_of
from trt.server.grpc.response_wire import stream_response
from trt.server.header_forwarding import HeaderForwarding

logger = logging.getLogger("trt.grpc")


class StreamInfer:
    def __init__(self, core: InferenceServer, header_forwarding: HeaderForwarding | None = None) -> None:
        self.core = core
        self.header_forwarding = header_forwarding

    async def run(self, call: GrpcCall) -> None:
        loop = asyncio.get_running_loop()
        mine: set[asyncio.Task[None]] = set()  # strong references: the loop keeps weak ones
        try:
            async for message in call.requests():
                task = loop.create_task(self._one(message, call))
                mine.add(task)
                task.add_done_callback(mine.discard)
            # The client closed its side: answer what is still running, then end the stream.
            if mine:
                await asyncio.wait(set(mine))
        except asyncio.CancelledError:
            for task in mine:
                task.cancel()
            raise

    async def _one(self, message: bytes | memoryview, call: GrpcCall) -> None:
        """Every answer to one streamed request."""
        request: pb.ModelInferRequest | None = None
        try:
            request, raw = codec.parse_infer_message(message)
            inference = codec.decode_infer_request(request, raw)
            if self.header_forwarding is not None:
                self.header_forwarding.apply(inference, call.metadata)
            empty_final = bool(inference.parameters.pop("triton_enable_empty_final_response", False))
            async for item in self.core.infer_stream(inference):
                if item.response is None and item.error is None:
                    if empty_final:  # the model ended the request without a last response
                        await self._send(call, _reply(request, None, final=True).SerializeToString())
                    continue
                if item.error is not None:
                    _, error_message = status_of(item.error, "ModelStreamInfer")
                    await self._send(call, _reply(request, error_message, item.final).SerializeToString())
                    continue
                assert item.response is not None
                await self._send(call, _answer(item.response, item.final))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            _, error_message = status_of(exc, "ModelStreamInfer")
            exc.__traceback__ = None  # drop the frames (and the tensors they hold) now
            await self._send(call, _reply(request, error_message, final=True).SerializeToString())

    @staticmethod
    async def _send(call: GrpcCall, reply: bytes) -> None:
        await call.writable()
        if call.response_encoding is not None and len(reply) > compression.OFF_LOOP_BYTES:
            reply = await compression.deflated(reply, call.response_encoding)
        call.send_message(reply)


def _answer(response: InferenceResponse, final: bool) -> bytes:
    """A serialized stream response carrying ``response`` and its final flag."""
    serialized = stream_response(response, final)
    if serialized is None:  # parameters of its own: protobuf writes it
        reply = pb.ModelStreamInferResponse()
        codec.encode_infer_response(response, reply.infer_response)
        reply.infer_response.parameters["triton_final_response"].bool_param = final
        serialized = reply.SerializeToString()
    return serialized


def _reply(
    request: pb.ModelInferRequest | None, error_message: str | None, final: bool
) -> pb.ModelStreamInferResponse:
    """A stream response carrying only an error, or the empty final response."""
    reply = pb.ModelStreamInferResponse(error_message=error_message or "")
    if request is not None:
        reply.infer_response.model_name = request.model_name
        reply.infer_response.model_version = request.model_version
        reply.infer_response.id = request.id
    reply.infer_response.parameters["triton_final_response"].bool_param = final
    return reply
