"""Triton's response cache: identical requests to a model with ``response_cache { enable: true }``
are answered from memory instead of running the model.

The key covers everything that can change the answer: model and version, every input's name,
datatype, shape and bytes, the requested outputs (with classification counts) and the request's
custom parameters. Entries are evicted least-recently-used to stay within the byte budget given by
``--cache-config local,size=BYTES``. Cached arrays are shared and never written to; each hit gets
its own response object.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import orjson

from trt.server.core.datatypes import tensor_to_bytes
from trt.server.core.types import RESERVED_PARAMETERS, InferenceRequest, InferenceResponse, OutputTensor


class ResponseCache:
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self._entries: OrderedDict[bytes, tuple[InferenceResponse, int]] = OrderedDict()

    def key(self, model_name: str, version: str, request: InferenceRequest) -> bytes:
        digest = hashlib.blake2b(digest_size=32)
        digest.update(f"{model_name}\0{version}\0".encode())
        for tensor in sorted(request.inputs, key=lambda t: t.name):
            digest.update(f"{tensor.name}\0{tensor.datatype}\0{tensor.shape}\0".encode())
            if tensor.data is not None:
                digest.update(tensor_to_bytes(tensor.data, tensor.datatype))
        outputs = (
            sorted((o.name, o.class_count) for o in request.outputs) if request.outputs is not None else None
        )
        custom = {k: v for k, v in request.parameters.items() if k not in RESERVED_PARAMETERS}
        digest.update(orjson.dumps([outputs, custom], option=orjson.OPT_SORT_KEYS))
        return digest.digest()

    def get(self, key: bytes, request_id: str) -> InferenceResponse | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        cached = entry[0]
        outputs = [
            OutputTensor(o.name, o.datatype, o.shape, o.data, dict(o.parameters)) for o in cached.outputs
        ]
        return InferenceResponse(
            cached.model_name, cached.model_version, request_id, outputs, dict(cached.parameters)
        )

    def put(self, key: bytes, response: InferenceResponse) -> None:
        size = sum(o.data.nbytes for o in response.outputs if o.data is not None) + 256
        if size > self.capacity_bytes or key in self._entries:
            return
        outputs = []
        for output in response.outputs:
            data = output.data
            if data is not None:
                data = data.copy()
                data.flags.writeable = False  # shared by every future hit
            outputs.append(
                OutputTensor(output.name, output.datatype, output.shape, data, dict(output.parameters))
            )
        while self.used_bytes + size > self.capacity_bytes and self._entries:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.used_bytes -= evicted
        stored = InferenceResponse(
            response.model_name, response.model_version, "", outputs, dict(response.parameters)
        )
        self._entries[key] = (stored, size)
        self.used_bytes += size
