"""Requests encoded once, before the load starts: HTTP bodies (binary tensors or JSON) and serialized gRPC
``ModelInferRequest`` messages. Per-request parameters (sequence ids) are spliced in at send time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from trt.perf.input_data import RequestInputs
from trt.perf.model_info import ModelInfo
from trt.perf.tensors import to_json_data, to_wire

Parameters = dict[str, bool | int | str]


@dataclass(frozen=True)
class ShmSlot:
    """Where one input of one request lies in a registered shared-memory region (system or CUDA)."""

    region: str
    offset: int
    byte_size: int


@dataclass(frozen=True)
class ShmOutputs:
    region: str
    byte_size: int  # per output; output i lies at i * byte_size


@dataclass(frozen=True)
class EncodedRequest:
    """HTTP: the JSON header and binary tail; gRPC: the serialized request (``header`` unused)."""

    header: bytes
    body: bytes


def infer_path(model: str, version: str) -> str:
    path = f"/v2/models/{quote(model, safe='')}"
    return f"{path}/versions/{quote(version, safe='')}/infer" if version else f"{path}/infer"


def http_request(
    info: ModelInfo,
    inputs: RequestInputs,
    binary_inputs: bool,
    binary_outputs: bool,
    shm: dict[str, ShmSlot] | None = None,
    shm_outputs: ShmOutputs | None = None,
) -> EncodedRequest:
    tensors: list[dict[str, Any]] = []
    tails: list[bytes] = []
    for spec in info.inputs:
        array = inputs.arrays[spec.name]
        entry: dict[str, Any] = {"name": spec.name, "shape": list(array.shape), "datatype": spec.datatype}
        if shm is not None:
            slot = shm[spec.name]
            entry["parameters"] = {
                "shared_memory_region": slot.region,
                "shared_memory_byte_size": slot.byte_size,
                "shared_memory_offset": slot.offset,
            }
        elif binary_inputs:
            raw = to_wire(array, spec.datatype)
            entry["parameters"] = {"binary_data_size": len(raw)}
            tails.append(raw)
        else:
            entry["data"] = to_json_data(array, spec.datatype)
        tensors.append(entry)
    header: dict[str, Any] = {"inputs": tensors}
    if shm_outputs is not None:
        header["outputs"] = [
            {
                "name": spec.name,
                "parameters": {
                    "shared_memory_region": shm_outputs.region,
                    "shared_memory_byte_size": shm_outputs.byte_size,
                    "shared_memory_offset": i * shm_outputs.byte_size,
                },
            }
            for i, spec in enumerate(info.outputs)
        ]
    elif binary_outputs and info.outputs:
        header["outputs"] = [{"name": s.name, "parameters": {"binary_data": True}} for s in info.outputs]
    return EncodedRequest(orjson.dumps(header), b"".join(tails))


class HttpFramer:
    """Frames an encoded request as bytes for a keep-alive HTTP/1.1 connection."""

    def __init__(self, host: str, port: int, path: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
        self.prefix = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{extra}".encode()

    def frame(self, request: EncodedRequest, parameters: Parameters | None = None) -> bytes:
        header = request.header
        if parameters:
            header = b'{"parameters":' + orjson.dumps(parameters) + b"," + header[1:]
        if request.body:
            return b"".join(
                (
                    self.prefix,
                    b"Content-Type: application/octet-stream\r\nInference-Header-Content-Length: ",
                    str(len(header)).encode(),
                    b"\r\nContent-Length: ",
                    str(len(header) + len(request.body)).encode(),
                    b"\r\n\r\n",
                    header,
                    request.body,
                )
            )
        return b"".join(
            (
                self.prefix,
                b"Content-Type: application/json\r\nContent-Length: ",
                str(len(header)).encode(),
                b"\r\n\r\n",
                header,
            )
        )


def grpc_request(
    info: ModelInfo,
    inputs: RequestInputs,
    shm: dict[str, ShmSlot] | None = None,
    shm_outputs: ShmOutputs | None = None,
    decoupled: bool = False,
) -> EncodedRequest:
    from trt.protos import grpc_service_pb2 as pb

    request = pb.ModelInferRequest(model_name=info.name, model_version=info.version)
    for spec in info.inputs:
        array = inputs.arrays[spec.name]
        tensor = request.inputs.add(name=spec.name, datatype=spec.datatype, shape=list(array.shape))
        if shm is not None:
            slot = shm[spec.name]
            tensor.parameters["shared_memory_region"].string_param = slot.region
            tensor.parameters["shared_memory_byte_size"].int64_param = slot.byte_size
            tensor.parameters["shared_memory_offset"].int64_param = slot.offset
        else:
            request.raw_input_contents.append(to_wire(array, spec.datatype))
    for i, spec in enumerate(info.outputs):
        output = request.outputs.add(name=spec.name)
        if shm_outputs is not None:
            output.parameters["shared_memory_region"].string_param = shm_outputs.region
            output.parameters["shared_memory_byte_size"].int64_param = shm_outputs.byte_size
            output.parameters["shared_memory_offset"].int64_param = i * shm_outputs.byte_size
    if decoupled:
        request.parameters["triton_enable_empty_final_response"].bool_param = True
    return EncodedRequest(b"", request.SerializeToString())


class GrpcFramer:
    """Adds per-request parameters by appending a parameters-only message: protobuf merges the two."""

    def __init__(self) -> None:
        from trt.protos import grpc_service_pb2 as pb

        self._pb = pb

    def frame(self, request: EncodedRequest, parameters: Parameters | None = None) -> bytes:
        if not parameters:
            return request.body
        extra = self._pb.ModelInferRequest()
        for key, value in parameters.items():
            if isinstance(value, bool):
                extra.parameters[key].bool_param = value
            elif isinstance(value, int):
                extra.parameters[key].int64_param = value
            else:
                extra.parameters[key].string_param = value
        serialized: bytes = extra.SerializeToString()
        return request.body + serialized
