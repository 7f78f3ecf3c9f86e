"""``import triton_python_backend_utils as pb_utils``: the API a Triton ``model.py`` is written against.

Same names and behaviour as Triton's Python backend, so a user's model runs unchanged. The process
that hosts the model (``trt_python_stub``) installs a runtime here that carries BLS calls, response
senders and log lines back to the server.
"""

from __future__ import annotations

import json
import os
import struct
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

# -- constants ------------------------------------------------------------------------------------

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_GPU = 2

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool, "TYPE_UINT8": np.uint8, "TYPE_UINT16": np.uint16, "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64, "TYPE_INT8": np.int8, "TYPE_INT16": np.int16, "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64, "TYPE_FP16": np.float16, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}  # fmt: skip
_TRITON_TYPE_CODES = {
    1: "TYPE_BOOL", 2: "TYPE_UINT8", 3: "TYPE_UINT16", 4: "TYPE_UINT32", 5: "TYPE_UINT64", 6: "TYPE_INT8",
    7: "TYPE_INT16", 8: "TYPE_INT32", 9: "TYPE_INT64", 10: "TYPE_FP16", 11: "TYPE_FP32", 12: "TYPE_FP64",
    13: "TYPE_STRING",
}  # fmt: skip

_runtime: Any = None  # installed by the model process


def _install_runtime(runtime: Any) -> None:
    global _runtime
    _runtime = runtime


# -- errors ---------------------------------------------------------------------------------------


class TritonError(Exception):
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class TritonModelException(Exception):
    pass


# -- tensors --------------------------------------------------------------------------------------


class Tensor:
    def __init__(self, name: str, data: Any) -> None:
        if not isinstance(data, np.ndarray):
            raise TritonModelException(
                f"Tensor '{name}': data must be a numpy array, got {type(data).__name__}"
            )
        if data.dtype.kind in ("U", "S"):
            data = data.astype(np.object_)
        self._name = name
        self._data = data

    @classmethod
    def _wrap(cls, name: str, data: np.ndarray) -> Tensor:
        """A tensor around an array the model process received (no checks: it is one already)."""
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._data = data
        return tensor

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._data

    def shape(self) -> list[int]:
        return list(self._data.shape)

    def triton_dtype(self) -> int:
        return numpy_to_triton_type(self._data.dtype)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        return _torch().utils.dlpack.to_dlpack(_torch().from_numpy(self._writable()))

    def __dlpack__(self, stream: Any = None) -> Any:
        return self._writable().__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        torch = _torch()
        tensor = torch.utils.dlpack.from_dlpack(capsule)
        return Tensor(name, tensor.cpu().numpy())

    def _writable(self) -> np.ndarray:
        return self._data if self._data.flags.writeable else self._data.copy()

    def __repr__(self) -> str:
        return f"Tensor(name={self._name!r}, shape={self.shape()}, dtype={self._data.dtype})"


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise TritonModelException("DLPack conversion needs torch in the model's environment") from None
    return torch


# -- requests and responses -----------------------------------------------------------------------


class PreferredMemory:
    def __init__(
        self, preferred_memory_type: int = TRITONSERVER_MEMORY_CPU, preferred_device_id: int = 0
    ) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceResponse:
    def __init__(
        self,
        output_tensors: list[Tensor] | None = None,
        error: TritonError | str | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        self._output_tensors = list(output_tensors or [])
        if isinstance(error, str):
            error = TritonError(error)
        self._error = error
        self._parameters: dict[str, Any] = (
            json.loads(parameters) if isinstance(parameters, str) else dict(parameters or {})
        )

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return json.dumps(self._parameters)


class InferenceResponseSender:
    """Sends responses for one request; ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` closes it."""

    def __init__(self, execution: Any, index: int) -> None:
        self._execution = execution
        self._index = index
        self._closed = False

    def __del__(self) -> None:
        if not self._closed:  # it can send nothing more: the server ends the request
            _release(("sender_dropped", self._execution, self._index))

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self._closed:
            raise TritonModelException("the response sender is already closed (a final flag was sent)")
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException("send() needs a response unless it carries the final flag")
        self._closed = final
        _runtime.send_response(self._execution, self._index, response, final)

    def is_cancelled(self) -> bool:
        """Whether the client stopped waiting (a cancelled gRPC call or stream): a model that streams
        can stop early."""
        return bool(_runtime.call("request_cancelled", self._execution, self._index))


class ResponseIterator:
    """What ``exec(decoupled=True)`` returns: the called model's responses as they arrive, the last
    one marked final (an empty response when the model ends without one). Iterating again after
    the end replays them."""

    def __init__(
        self,
        fetch: Callable[[], tuple[InferenceResponse, bool]],
        abandon: Callable[[], object],
        cancel: Callable[[], object],
    ) -> None:
        self._fetch = fetch
        self._abandon = abandon
        self._cancel = cancel
        self._responses: list[InferenceResponse] = []
        self._index = 0
        self._finished = False

    def __iter__(self) -> Iterator[InferenceResponse]:
        if self._finished and self._index >= len(self._responses):
            self._index = 0
        return self

    def __next__(self) -> InferenceResponse:
        if self._finished:
            if self._index < len(self._responses):
                self._index += 1
                return self._responses[self._index - 1]
            raise StopIteration
        response, final = self._fetch()
        self._responses.append(response)
        if final:
            self._finished = True
            self._index = len(self._responses)
        return response

    def cancel(self) -> None:
        """Cancel the call: the called model sees ``is_cancelled()``, and iterating on gives what it
        sent before, then a final response with a CANCELLED error."""
        if not self._finished:
            self._cancel()

    def __del__(self) -> None:
        if not self._finished:
            self._abandon()  # responses still to come are dropped on arrival


class InferenceTrace:
    """A request's trace (``request.trace()``), which a model passes on to its BLS requests
    (``InferenceRequest(..., trace=request.trace())``): when the request it came from is traced,
    the call is traced as a child of it, as in Triton. It names that request, not a trace: the
    server knows whether it is traced. No OpenTelemetry context (trt traces in triton mode only)."""

    def __init__(self, origin: tuple[int, int] | None = None) -> None:
        self._origin = origin  # (execution, index) of the request execute() received

    def get_context(self, mode: str = "opentelemetry") -> str | None:
        return None


class InferenceRequest:
    def __init__(
        self,
        model_name: str = "",
        requested_output_names: list[str] | None = None,
        inputs: list[Tensor] | None = None,
        request_id: str = "",
        correlation_id: int | str = 0,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: Any = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        self.model_name = model_name
        self._requested_output_names = list(requested_output_names or [])
        self._inputs = list(inputs or [])
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._parameters: dict[str, Any] = (
            json.loads(parameters) if isinstance(parameters, str) else dict(parameters or {})
        )
        self._sender: InferenceResponseSender | None = None
        self._origin: tuple[int, int] | None = None  # (execution, index) of a request sent to execute
        self._owes_final = False  # set when execute() returned None: its answers go through senders
        self._trace = trace if isinstance(trace, InferenceTrace) else None

    @classmethod
    def _received(
        cls,
        inputs: list[Tensor],
        request_id: str,
        requested_output_names: list[str],
        parameters: dict[str, Any],
        correlation_id: int | str,
        flags: int,
        origin: tuple[int, int],
    ) -> InferenceRequest:
        """A request as ``execute`` receives it, built without the constructor's conversions."""
        request = cls.__new__(cls)
        request.model_name = ""
        request._requested_output_names = requested_output_names
        request._inputs = inputs
        request._request_id = request_id
        request._correlation_id = correlation_id
        request._model_version = -1
        request._flags = flags
        request._timeout = 0
        request._parameters = parameters
        request._sender = None
        request._origin = origin
        request._owes_final = False
        request._trace = None
        return request

    def __del__(self) -> None:
        # execute() returned None and no sender was ever made for this request: nothing can answer it.
        if getattr(self, "_owes_final", False) and self._sender is None:
            assert self._origin is not None
            _release(("sender_dropped", *self._origin))

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = flags

    def trace(self) -> InferenceTrace:
        return InferenceTrace(self._origin)

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        return json.dumps(self._parameters)

    def requested_output_names(self) -> list[str]:
        return self._requested_output_names

    def get_response_sender(self) -> InferenceResponseSender:
        if self._sender is None:
            if self._origin is None:
                raise TritonModelException("this request has no response sender (it was not sent to execute)")
            self._sender = InferenceResponseSender(*self._origin)
        return self._sender

    def is_cancelled(self) -> bool:
        """Whether the client stopped waiting for this request (a cancelled gRPC call or stream)."""
        if self._origin is None:
            return False
        return bool(_runtime.call("request_cancelled", *self._origin))

    def set_release_flags(self, flags: int) -> None:
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise TritonModelException("request rescheduling is not supported by this server")

    def exec(self, decoupled: bool = False) -> Any:
        """Business logic scripting: run this request on another model of the server; its response,
        or with ``decoupled=True`` a ``ResponseIterator`` over its responses."""
        return _runtime.bls(self, decoupled)

    async def async_exec(self, decoupled: bool = False) -> Any:
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(None, _runtime.bls, self, decoupled)


# -- helpers --------------------------------------------------------------------------------------


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    for tensor in request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for config in model_config.get("input", []):
        if config.get("name") == name:
            return config
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for config in model_config.get("output", []):
        if config.get("name") == name:
            return config
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def triton_string_to_numpy(triton_type_string: str) -> Any:
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    return TRITON_STRING_TO_NUMPY[_TRITON_TYPE_CODES[data_type]]


def numpy_to_triton_type(data_type: Any) -> int:
    dtype = np.dtype(data_type)
    if dtype.kind in ("O", "S", "U"):
        return 13
    for code, name in _TRITON_TYPE_CODES.items():
        if name != "TYPE_STRING" and np.dtype(TRITON_STRING_TO_NUMPY[name]) == dtype:
            return code
    raise TritonModelException(f"no Triton type for numpy dtype {dtype}")


def numpy_to_triton_string(data_type: Any) -> str:
    return _TRITON_TYPE_CODES[numpy_to_triton_type(data_type)]


def serialize_byte_tensor(input_tensor: np.ndarray) -> np.ndarray:
    """Length-prefixed bytes of a BYTES tensor, as a uint8 array (Triton's layout)."""
    if input_tensor.size == 0:
        return np.empty([0], dtype=np.uint8)
    parts = []
    for item in input_tensor.reshape(-1):
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts.append(struct.pack("<I", len(data)) + data)
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    items = []
    offset = 0
    view = memoryview(encoded_tensor)
    while offset < len(view):
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        items.append(bytes(view[offset : offset + length]))
        offset += length
    return np.array(items, dtype=np.object_)


class Logger:
    """Log lines go to the server's log, tagged with the model."""

    @staticmethod
    def log(message: str, level: int = 0) -> None:
        _runtime.log(
            ("INFO", "WARNING", "ERROR", "VERBOSE")[level] if 0 <= level < 4 else "INFO", str(message)
        )

    @staticmethod
    def log_info(message: str) -> None:
        _runtime.log("INFO", str(message))

    @staticmethod
    def log_warn(message: str) -> None:
        _runtime.log("WARNING", str(message))

    @staticmethod
    def log_error(message: str) -> None:
        _runtime.log("ERROR", str(message))

    @staticmethod
    def log_verbose(message: str) -> None:
        _runtime.log("VERBOSE", str(message))

    INFO, WARNING, ERROR, VERBOSE = 0, 1, 2, 3


# -- model control --------------------------------------------------------------------------------
# As Triton: the server must run with --model-control-mode=explicit. A load holds one of the
# server's load slots (--model-load-thread-count) while it runs, like any other load.


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) a model of the repository; ``config`` overrides its config (JSON), ``files``
    ("file:<version>/<name>" -> bytes, with ``config``) replace its files."""
    _runtime.call("load_model", model_name, config, dict(files or {}))


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload a model: it is no longer ready when this returns; requests it holds still finish."""
    _runtime.call("unload_model", model_name, unload_dependents)


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    return bool(_runtime.call("model_ready", model_name, str(model_version)))


# -- custom metrics -------------------------------------------------------------------------------

# Messages from ``__del__``: releases of metric families and series, and response senders dropped
# without their final flag. ``__del__`` may run inside any allocation, even while this process is
# sending a message, so it only queues, and writes a byte to ``_released_pipe``: the runtime sends
# them ahead of its next message, or from a thread of its own woken by that byte (a model may send
# nothing else for long, while the request it dropped waits).
_released: deque[tuple[Any, ...]] = deque()
_released_pipe = -1


def _release(message: tuple[Any, ...]) -> None:
    _released.append(message)
    if _released_pipe >= 0:
        try:
            os.write(_released_pipe, b"\0")
        except OSError:  # full: a wake-up is pending already
            pass


_LIFETIME_ERROR = "Invalid metric operation as the corresponding 'MetricFamily' has been deleted."


class MetricFamily:
    """A family of metrics the model reports on the server's metrics endpoint."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        if kind not in (MetricFamily.COUNTER, MetricFamily.GAUGE, MetricFamily.HISTOGRAM):
            raise TritonModelException(f"unknown metric kind {kind!r}")
        self._kind = kind
        self._metrics: weakref.WeakSet[Metric] = weakref.WeakSet()
        self._handle = 0  # set once the server has it: a failed constructor must release nothing
        self._handle = _runtime.call("metric_family", name, description, kind)

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:
        handle = _runtime.call("metric_series", self._handle, labels, buckets)
        metric = Metric._held(handle, self._kind)
        self._metrics.add(metric)
        return metric

    def __del__(self) -> None:
        if self._handle:
            for metric in list(self._metrics):
                metric._release()
            _release(("metric", "release_family", self._handle, 0.0))
            self._handle = 0


class Metric:
    """One labelled series of a ``MetricFamily``; made by ``MetricFamily.Metric``."""

    _handle: int  # 0 once released
    _kind: int

    def __init__(self) -> None:
        raise TritonModelException("create metrics with MetricFamily.Metric(labels=..., buckets=...)")

    @classmethod
    def _held(cls, handle: int, kind: int) -> Metric:
        metric = cls.__new__(cls)
        metric._handle = handle
        metric._kind = kind
        return metric

    def increment(self, value: float) -> None:
        self._check("increment", MetricFamily.COUNTER, MetricFamily.GAUGE)
        if self._kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("Failed to increment metric value: a counter cannot decrease")
        _runtime.metric_update("increment", self._handle, float(value))

    def set(self, value: float) -> None:
        self._check("set", MetricFamily.GAUGE)
        _runtime.metric_update("set", self._handle, float(value))

    def observe(self, value: float) -> None:
        self._check("observe", MetricFamily.HISTOGRAM)
        _runtime.metric_update("observe", self._handle, float(value))

    def value(self) -> float:
        self._check("value", MetricFamily.COUNTER, MetricFamily.GAUGE)
        return float(_runtime.call("metric_value", self._handle))

    def _check(self, operation: str, *kinds: int) -> None:
        if not self._handle:
            raise TritonModelException(_LIFETIME_ERROR)
        if self._kind not in kinds:
            kind = ("counter", "gauge", "histogram")[self._kind]
            raise TritonModelException(f"a {kind} metric does not support {operation}()")

    def _release(self) -> None:
        if self._handle:
            _release(("metric", "release_series", self._handle, 0.0))
            self._handle = 0

    def __del__(self) -> None:
        self._release()


# -- auto-complete --------------------------------------------------------------------------------


class ModelConfig:
    """What ``TritonPythonModel.auto_complete_config`` receives and returns."""

    def __init__(self, model_config: dict[str, Any]) -> None:
        self._config = model_config

    def as_dict(self) -> dict[str, Any]:
        return self._config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._config.get("max_batch_size", 0) or 0)
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current} is larger than "
                f"the requested {max_batch_size}"
            )
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        if "sequence_batching" in self._config:
            raise ValueError("configuration specifies sequence_batching; cannot set dynamic batching")
        self._config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output)

    def set_model_transaction_policy(self, transaction_policy: dict[str, Any]) -> None:
        self._config["model_transaction_policy"] = dict(transaction_policy)

    def _add(self, kind: str, tensor: dict[str, Any]) -> None:
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                raise ValueError(f"{kind} {tensor} is missing '{key}'")
        existing = self._config.setdefault(kind, [])
        for item in existing:
            if item.get("name") == tensor["name"]:
                for key in ("data_type", "dims"):
                    ours, theirs = item.get(key), tensor[key]
                    if ours and (list(ours) if key == "dims" else ours) != (
                        list(theirs) if key == "dims" else theirs
                    ):
                        raise ValueError(f"{kind} '{tensor['name']}': {key} {theirs} conflicts with {ours}")
                item.update({k: v for k, v in tensor.items() if not item.get(k)})
                return
        existing.append(dict(tensor))
