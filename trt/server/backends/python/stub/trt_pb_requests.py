"""What ``execute`` receives and returns: ``pb_utils.InferenceRequest`` (also a BLS request, run with
``exec()``), ``InferenceResponse``, the response senders of decoupled models, the iterator over a
decoupled BLS call's responses, and request traces."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import trt_pb_runtime
from trt_pb_errors import TritonError, TritonModelException
from trt_pb_runtime import release as _release
from trt_pb_tensors import Tensor

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_GPU = 2


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
        self._rescheduled = False  # its request ran again: that execute() call's sender answers

    def __del__(self) -> None:
        if not self._closed:  # it can send nothing more: the server ends the request
            _release(("sender_dropped", self._execution, self._index))

    def _retire(self) -> None:
        """Its request was rescheduled: the sender of the request's next ``execute`` answers it."""
        self._closed = self._rescheduled = True

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self._rescheduled:
            raise TritonModelException(
                "the request was rescheduled (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE): the response "
                "sender of the request that its next execute() receives sends its responses"
            )
        if self._closed:
            raise TritonModelException("the response sender is already closed (a final flag was sent)")
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException("send() needs a response unless it carries the final flag")
        self._closed = final
        trt_pb_runtime.current.send_response(self._execution, self._index, response, final)

    def is_cancelled(self) -> bool:
        """Whether the client stopped waiting (a cancelled gRPC call or stream): a model that streams
        can stop early."""
        return bool(trt_pb_runtime.current.call("request_cancelled", self._execution, self._index))


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
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
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
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
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
        return bool(trt_pb_runtime.current.call("request_cancelled", *self._origin))

    def set_release_flags(self, flags: int) -> None:
        """``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``: once ``execute`` returns, run this request
        again in a later ``execute`` (an iterative sequence: ``sequence_batching { iterative_sequence:
        true }``); ``execute`` returns None in its place. ``TRITONSERVER_REQUEST_RELEASE_ALL`` (the
        default): it is done."""
        if type(flags) is not int:
            raise TritonModelException(f"release flags must be an int, got {type(flags).__name__}")
        self._release_flags = flags

    def _rescheduled(self) -> bool:
        return self._release_flags == TRITONSERVER_REQUEST_RELEASE_RESCHEDULE  # Triton's test: equal

    def exec(self, decoupled: bool = False) -> Any:
        """Business logic scripting: run this request on another model of the server; its response,
        or with ``decoupled=True`` a ``ResponseIterator`` over its responses."""
        return trt_pb_runtime.current.bls(self, decoupled)

    async def async_exec(self, decoupled: bool = False) -> Any:
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(
            None, trt_pb_runtime.current.bls, self, decoupled
        )


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
