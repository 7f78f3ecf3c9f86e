"""The JSON bodies of the shared memory routes (``/v2/{system,cuda}sharedmemory/...``), both ways."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from trt.server.core.errors import InvalidArgument
from trt.server.core.extensions.shared_memory import CudaRegionStatus, RegionStatus


@dataclass(frozen=True, slots=True)
class SystemRegistration:
    key: str
    offset: int
    byte_size: int


@dataclass(frozen=True, slots=True)
class CudaRegistration:
    raw_handle: bytes
    device_id: int
    byte_size: int


def system_registration(body: dict[str, Any]) -> SystemRegistration:
    """``{"key": ..., "offset": ..., "byte_size": ...}``, checked."""
    key = body.get("key")
    if not isinstance(key, str):
        raise InvalidArgument("Shared memory register request has no 'key' field (a string)")
    byte_size = _unsigned(body, "byte_size", None)
    return SystemRegistration(key, _unsigned(body, "offset", 0), byte_size)


def cuda_registration(body: dict[str, Any]) -> CudaRegistration:
    """``{"raw_handle": {"b64": ...}, "device_id": ..., "byte_size": ...}``, checked (Triton's words)."""
    if "raw_handle" not in body:
        raise InvalidArgument("Shared memory register request has no 'raw_handle' field")
    encoded = body["raw_handle"].get("b64") if isinstance(body["raw_handle"], dict) else None
    if not isinstance(encoded, str):
        raise InvalidArgument("Shared memory register request: 'raw_handle' must be {\"b64\": <string>}")
    byte_size = _unsigned(body, "byte_size", None)
    device_id = _unsigned(body, "device_id", None)
    try:
        raw_handle = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t") from None
    return CudaRegistration(raw_handle, device_id, byte_size)


def status_rows(regions: list[RegionStatus] | list[CudaRegionStatus]) -> list[dict[str, Any]]:
    """The status answer: system regions with their key and offset, CUDA ones with their device."""
    rows: list[dict[str, Any]] = []
    for region in regions:
        if isinstance(region, CudaRegionStatus):
            rows.append({"name": region.name, "device_id": region.device_id, "byte_size": region.byte_size})
        else:
            row = {"name": region.name, "key": region.key, "offset": region.offset}
            rows.append(row | {"byte_size": region.byte_size})
    return rows


def _unsigned(body: dict[str, Any], field: str, default: int | None) -> int:
    value = body.get(field, default)
    if value is None:
        raise InvalidArgument(f"Shared memory register request has no '{field}' field")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgument(f"Shared memory register request: '{field}' must be a non-negative integer")
    return value
