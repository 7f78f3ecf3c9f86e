"""Generation over gRPC ``ModelStreamInfer``: the vLLM backend's tensors in, ``text_output`` out, one
bidirectional stream per load slot, each response timestamped as it is read."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from trt.perf.genai.endpoints import sampling_parameters
from trt.perf.genai.options import GenAIOptions
from trt.perf.genai.prompts import Prompt
from trt.perf.model_info import ModelInfo
from trt.perf.transport import ConnectionLost, RequestFailed
from trt.perf.transport.grpc_clients import CHANNEL_OPTIONS, STREAM

TEXT_INPUT, TEXT_OUTPUT = "text_input", "text_output"
OnText = Callable[[str, int], None]  # (text of one response, perf_counter_ns when it was read)


def _bytes_element(value: bytes) -> bytes:
    return struct.pack("<I", len(value)) + value


def _strings(raw: bytes) -> list[str]:
    """A BYTES tensor's raw contents: each element a 4-byte little-endian length, then its bytes."""
    values, offset = [], 0
    while offset + 4 <= len(raw):
        (length,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + length > len(raw):
            raise RequestFailed("a BYTES output element runs past the end of its tensor")
        values.append(raw[offset : offset + length].decode("utf-8", "replace"))
        offset += length
    return values


class RequestBuilder:
    """Serialized ``ModelInferRequest`` bytes for a prompt, with the inputs the model declares."""

    def __init__(self, info: ModelInfo, options: GenAIOptions) -> None:
        from trt.protos import grpc_service_pb2 as pb

        self.pb, self.info, self.options = pb, info, options
        names = {spec.name: spec for spec in info.inputs}
        if TEXT_INPUT not in names or TEXT_OUTPUT not in {spec.name for spec in info.outputs}:
            raise RequestFailed(
                f"model '{info.name}' has no text_input/text_output: --endpoint-type kserve measures models "
                "that follow the vLLM backend's contract"
            )
        self.specs = names

    def _shape(self, name: str) -> list[int]:
        dims = [1 if d < 0 else d for d in self.specs[name].dims] or [1]
        return [1, *dims] if self.info.batching else dims

    def build(self, prompt: Prompt, request_id: str) -> bytes:
        options = self.options
        request = self.pb.ModelInferRequest(model_name=self.info.name, model_version=options.model_version)
        request.id = request_id
        # Without it a decoupled model's final flag, sent on its own, never reaches the client (Triton's
        # rule), and the end of a request could not be told.
        request.parameters["triton_enable_empty_final_response"].bool_param = True
        values: dict[str, bytes] = {TEXT_INPUT: _bytes_element(prompt.text.encode())}
        if "stream" in self.specs:
            values["stream"] = b"\x01" if options.streaming else b"\x00"
        if "exclude_input_in_output" in self.specs:
            values["exclude_input_in_output"] = b"\x01"
        parameters = {**sampling_parameters(options, prompt), **dict(options.extra_inputs)}
        if "sampling_parameters" in self.specs and parameters:
            values["sampling_parameters"] = _bytes_element(json.dumps(parameters).encode())
        for name, raw in values.items():
            tensor = request.inputs.add()
            tensor.name, tensor.datatype = name, self.specs[name].datatype
            tensor.shape.extend(self._shape(name))
            request.raw_input_contents.append(raw)
        return bytes(request.SerializeToString())


class StreamReader:
    """Turns ``ModelStreamInferResponse`` bytes into (text, final)."""

    def __init__(self) -> None:
        from trt.protos import grpc_service_pb2 as pb

        self._message = pb.ModelStreamInferResponse

    def read(self, raw: bytes) -> tuple[str, bool]:
        reply = self._message.FromString(raw)
        if reply.error_message:
            raise RequestFailed(f"gRPC stream: {reply.error_message}")
        response = reply.infer_response
        final = response.parameters.get("triton_final_response")
        text = ""
        for index, output in enumerate(response.outputs):
            if output.name != TEXT_OUTPUT:
                continue
            if index < len(response.raw_output_contents):
                text = "".join(_strings(response.raw_output_contents[index]))
            else:
                text = "".join(v.decode("utf-8", "replace") for v in output.contents.bytes_contents)
        # A model that is not decoupled answers once; a decoupled one says which answer is its last.
        is_final = final is None or bool(final.bool_param)
        return text, is_final


class GrpcGenerateStream:
    """One ModelStreamInfer stream; ``generate`` sends a request and reads its responses to the final."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._method: grpc.aio.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(STREAM)
        self._reader = StreamReader()
        self._call: Any = None

    async def generate(self, payload: bytes, on_text: OnText) -> None:
        if self._call is None:
            self._call = self._method()
        try:
            await self._call.write(payload)
            while True:
                raw = await self._call.read()
                if raw is grpc.aio.EOF:
                    self._call = None
                    raise ConnectionLost("the server ended the stream")
                text, final = self._reader.read(raw)
                on_text(text, time.perf_counter_ns())
                if final:
                    return
        except grpc.aio.AioRpcError as error:
            self._call = None
            raise RequestFailed(f"gRPC {error.code().name}: {error.details()}") from error

    def close(self) -> None:
        if self._call is not None:
            self._call.cancel()
        self._call = None


def open_channel(host: str, port: int) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(f"{host}:{port}", options=CHANNEL_OPTIONS)
