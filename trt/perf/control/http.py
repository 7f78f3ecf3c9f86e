"""Control calls over HTTP/REST (KServe v2 routes and Triton's extensions)."""

from __future__ import annotations

import base64
import http.client
from typing import Any
from urllib.parse import quote

import orjson

from trt.perf import model_info
from trt.perf.errors import ModelNotFound, ServerError
from trt.perf.model_info import ModelInfo
from trt.perf.server_stats import StatsSnapshot, snapshot_from_json


class HttpControl:
    def __init__(self, host: str, port: int, timeout: float, headers: dict[str, str] | None = None) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.headers = headers or {}
        self._conn: http.client.HTTPConnection | None = None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        payload = orjson.dumps(body) if body is not None else None
        for attempt in range(2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self._conn.request(method, path, body=payload, headers=self.headers)
                reply = self._conn.getresponse()
                data = reply.read()
            except (OSError, http.client.HTTPException) as error:
                self._conn.close()
                self._conn = None
                if attempt:
                    raise ServerError(
                        f"cannot reach the server at {self.host}:{self.port} over HTTP ({error}); "
                        "check -u and that the server is up"
                    ) from error
                continue
            try:
                parsed = orjson.loads(data) if data else None
            except orjson.JSONDecodeError:
                parsed = data.decode(errors="replace")
            return reply.status, parsed
        raise AssertionError("unreachable")

    @staticmethod
    def _model_path(model: str, version: str) -> str:
        path = f"/v2/models/{quote(model, safe='')}"
        return f"{path}/versions/{quote(version, safe='')}" if version else path

    def server_extensions(self) -> list[str]:
        status, body = self._call("GET", "/v2")
        if status != 200 or not isinstance(body, dict):
            return []
        return [str(e) for e in body.get("extensions", [])]

    def model_info(self, model: str, version: str) -> ModelInfo:
        base = self._model_path(model, version)
        status, metadata = self._call("GET", base)
        if status != 200 or not isinstance(metadata, dict):
            message = metadata.get("error", metadata) if isinstance(metadata, dict) else metadata
            raise ModelNotFound(f"model '{model}' is not available on {self.host}:{self.port}: {message}")
        status, config = self._call("GET", f"{base}/config")
        if status == 200 and isinstance(config, dict) and config.get("input") is not None:
            info = model_info.from_config(config, version)
            if not info.inputs and metadata.get("inputs"):
                return model_info.from_metadata(metadata, version)
            return info
        return model_info.from_metadata(metadata, version)

    def statistics(self, model: str, version: str) -> StatsSnapshot | None:
        status, body = self._call("GET", f"{self._model_path(model, version)}/stats")
        if status != 200 or not isinstance(body, dict) or not body.get("model_stats"):
            return None
        entries = [e for e in body["model_stats"] if e.get("name") == model]
        total = StatsSnapshot()
        for entry in entries:
            total = total + snapshot_from_json(entry)
        return total

    def register_system_shm(self, name: str, key: str, byte_size: int) -> None:
        status, body = self._call(
            "POST",
            f"/v2/systemsharedmemory/region/{quote(name, safe='')}/register",
            {"key": key, "offset": 0, "byte_size": byte_size},
        )
        if status != 200:
            raise ServerError(f"the server refused shared-memory region '{name}': {body}")

    def unregister_system_shm(self, name: str) -> None:
        self._call("POST", f"/v2/systemsharedmemory/region/{quote(name, safe='')}/unregister")

    def system_shm_regions(self) -> dict[str, str]:
        status, body = self._call("GET", "/v2/systemsharedmemory/status")
        if status != 200 or not isinstance(body, list):
            return {}
        return {
            str(region["name"]): str(region.get("key", ""))
            for region in body
            if isinstance(region, dict) and "name" in region
        }

    def register_cuda_shm(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        body = {"raw_handle": {"b64": base64.b64encode(raw_handle).decode()}, "device_id": device_id}
        path = f"/v2/cudasharedmemory/region/{quote(name, safe='')}/register"
        status, reply = self._call("POST", path, body | {"byte_size": byte_size})
        if status != 200:
            raise ServerError(f"the server refused CUDA shared-memory region '{name}': {reply}")

    def unregister_cuda_shm(self, name: str) -> None:
        self._call("POST", f"/v2/cudasharedmemory/region/{quote(name, safe='')}/unregister")

    def cuda_shm_regions(self) -> list[str]:
        status, body = self._call("GET", "/v2/cudasharedmemory/status")
        if status != 200 or not isinstance(body, list):
            return []
        return [str(region["name"]) for region in body if isinstance(region, dict) and "name" in region]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
