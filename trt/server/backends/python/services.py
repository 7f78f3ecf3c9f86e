"""What a Python model's process asks of the server, and the answers it gets back.

Business logic scripting (``InferenceRequest.exec()``, one response or a stream of them), model
control (``pb_utils.load_model`` / ``unload_model`` / ``is_model_ready``), custom metrics
(``pb_utils.MetricFamily``: families and series made and read with an answer, updates and releases
without one) and ``is_cancelled()``. Calls the model waits on are answered with an ``answer``
message carrying its call number; a BLS stream's responses go as ``bls_stream`` messages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from trt.server.backends.python.error_codes import CANCELLED, INTERNAL, INVALID_ARG, error_answer
from trt.server.backends.python.executions import Executions
from trt.server.backends.python.process import Message
from trt.server.backends.python.stub import _ipc
from trt.server.core.backends.base import SEQUENCE_END, SEQUENCE_START, ServerServices
from trt.server.core.errors import (
    DecoupledModelNeedsStream,
    InvalidArgument,
    ServerError,
    Unavailable,
    Unsupported,
)
from trt.server.core.extensions.custom_metrics import Owner
from trt.server.core.extensions.tracing import Trace
from trt.server.core.types import InferenceRequest, InferenceResponse, InputTensor, RequestedOutput

logger = logging.getLogger("trt.backends.python")

_MODEL_CONTROL = ("load_model", "unload_model")  # calls answered once the server has done them


class ModelServices:
    """The server's services as one model process uses them. ``server`` is None where a model runs
    outside a server (tests): its calls are then answered with UNAVAILABLE. ``stop`` is called when
    the model unloads: from then on nothing more is sent to its process."""

    def __init__(
        self,
        server: ServerServices | None,
        model_name: str,
        model_py: Path,
        post: Callable[[Message], None],
        executions: Executions,
        room: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.server = server
        registry = getattr(server, "custom_metrics", None)
        # The metric families and series this model's process holds (pb_utils.MetricFamily).
        self._metrics: Owner | None = registry.owner() if registry is not None else None
        self._model_name = model_name
        self._model_py = model_py
        self._post = post
        self._room = room  # until the process has taken what was posted (None: no waiting)
        self._executions = executions
        self._stopped = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._bls_streams: dict[int, asyncio.Task[Any]] = {}  # exec(decoupled=True) calls by number

    def stop(self) -> None:
        """The model is unloading: answers and stream responses still to come are dropped."""
        self._stopped = True

    def release_metrics(self) -> None:
        """Give back every metric family and series the process held (it exited, or unloads)."""
        if self._metrics is not None:
            self._metrics.release_all()

    def _track(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- business logic scripting ----------------------------------------------------------------

    def start_bls(self, call: int, payload: dict[str, Any]) -> None:
        """A ``bls`` message: run the model's request on another model, in a task of its own."""
        task = asyncio.get_running_loop().create_task(self._bls(call, payload))
        self._track(task)
        if payload.get("decoupled"):  # ResponseIterator.cancel() may stop it
            self._bls_streams[call] = task
            task.add_done_callback(partial(self._forget_bls_stream, call))

    def cancel_bls(self, call: int) -> None:
        """A ``bls_cancel`` message: the model cancelled its ``exec(decoupled=True)`` call."""
        stream_task = self._bls_streams.get(call)
        if stream_task is not None:
            stream_task.cancel()

    async def _bls(self, call: int, payload: dict[str, Any]) -> None:
        """A request from the model to another model, through the server's own scheduler."""
        answer: dict[str, Any]
        try:
            if self.server is None:
                raise Unavailable("BLS is not available in this context")
            request = _bls_request(payload)
            if payload.get("decoupled"):
                await self._bls_stream(call, request)
                return
            request.trace = self._bls_trace(payload.get("trace_origin"), request)
            try:
                answer = _bls_answer(await self.server.infer(request))
            finally:
                if request.trace is not None:
                    self.server.tracer.finish(request.trace)
        except DecoupledModelNeedsStream as exc:
            message = f"model '{exc.model_name}' is decoupled: call exec(decoupled=True) for its responses"
            answer = error_answer(Unsupported(message))
        except Exception as exc:
            answer = self._bls_failure(exc)
        if not self._stopped:
            self._post(("answer", call, answer))

    def _bls_trace(self, origin: tuple[int, int] | None, request: InferenceRequest) -> Trace | None:
        """A trace for a BLS call made with ``trace=request.trace()`` of a request being traced:
        a child of that request's trace, as in Triton (other BLS calls are not traced)."""
        if origin is None or self.server is None:
            return None
        parent = self._executions.trace_of(origin[0], origin[1])
        if parent is None:
            return None
        return self.server.tracer.child(parent, request.model_name, request.model_version, request.id)

    async def _bls_stream(self, call: int, request: InferenceRequest) -> None:
        """``exec(decoupled=True)``: each response goes to the model as it comes (an LLM-style model
        forwards them while the called model still works), the last one marked final."""
        assert self.server is not None
        final = False
        try:
            async for item in self.server.infer_stream(request):
                if self._stopped:
                    return
                if item.error is not None:
                    answer: dict[str, Any] | None = self._bls_failure(item.error)
                else:
                    answer = _bls_answer(item.response) if item.response is not None else None
                final = item.final
                self._post(("bls_stream", call, answer, final))
                if self._room is not None:
                    # Take the next response only once the model process has room for this one:
                    # the responses its model does not read yet then wait, bounded, in the stream.
                    await self._room()
        except asyncio.CancelledError:  # the model cancelled the call (ResponseIterator.cancel())
            if not self._stopped:
                self._post(("bls_stream", call, {"error": ("the request was cancelled", CANCELLED)}, True))
            return
        except Exception as exc:
            if not self._stopped:
                self._post(("bls_stream", call, self._bls_failure(exc), True))
            return
        if not final and not self._stopped:
            self._post(("bls_stream", call, None, True))

    def _forget_bls_stream(self, call: int, _task: asyncio.Task[Any]) -> None:
        self._bls_streams.pop(call, None)

    def _bls_failure(self, exc: BaseException) -> dict[str, Any]:
        if isinstance(exc, ServerError):
            return error_answer(exc)
        logger.error("BLS call from %s failed", self._model_py, exc_info=exc)
        return {"error": (f"{type(exc).__name__}: {exc}", INTERNAL)}

    # -- calls the model waits on ------------------------------------------------------------------

    def answer(self, call: int, operation: str, arguments: tuple[Any, ...]) -> None:
        """A ``call`` message; model control is answered once the server has done it."""
        if operation in _MODEL_CONTROL:
            task = asyncio.get_running_loop().create_task(self._answer_later(call, operation, arguments))
            self._track(task)
        else:
            self._post(("answer", call, self._call(operation, arguments)))

    async def _answer_later(self, call: int, operation: str, arguments: tuple[Any, ...]) -> None:
        answer = await self._model_control(operation, arguments)
        if not self._stopped:
            self._post(("answer", call, answer))

    def answer_during_start(self, operation: str, arguments: tuple[Any, ...]) -> dict[str, Any]:
        """A call from ``initialize()``, which runs on a loader thread: model control goes to the
        event loop and this thread waits for it."""
        if operation not in _MODEL_CONTROL:
            return self._call(operation, arguments)
        loop = getattr(self.server, "event_loop", None)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            return error_answer(Unavailable(f"{operation} is not available in this context"))
        return asyncio.run_coroutine_threadsafe(self._model_control(operation, arguments), loop).result()

    def _call(self, operation: str, arguments: tuple[Any, ...]) -> dict[str, Any]:
        """Creating a metric family or series, reading a metric, asking if a model is ready."""
        try:
            if operation == "request_cancelled":
                number, index = arguments
                return {"value": self._executions.request_cancelled(number, index)}
            if operation == "model_ready":
                if self.server is None:
                    raise Unavailable("is_model_ready is not available in this context")
                return {"value": self.server.model_ready(*arguments)}
            if self._metrics is None:
                raise Unavailable("custom metrics are not available in this context")
            if operation == "metric_family":
                return {"value": self._metrics.new_family(*arguments)}
            if operation == "metric_series":
                return {"value": self._metrics.new_series(*arguments)}
            if operation == "metric_value":
                return {"value": self._metrics.registry.value(*arguments)}
            raise InvalidArgument(f"unknown operation '{operation}'")
        except ServerError as exc:
            return error_answer(exc)
        except (TypeError, ValueError, IndexError, KeyError) as exc:  # wrong arguments from the model
            return {"error": (f"{operation}: {exc}", INVALID_ARG)}

    async def _model_control(self, operation: str, arguments: tuple[Any, ...]) -> dict[str, Any]:
        """``pb_utils.load_model`` and ``unload_model``, through the server as its API would."""
        try:
            if self.server is None:
                raise Unavailable(f"{operation} is not available in this context")
            if operation == "load_model":
                name, config, files = arguments
                if name == self._model_name:
                    raise InvalidArgument(f"model '{name}' cannot load itself")
                await self.server.load_model(name, config or None, files or None)
                return {"value": True}
            name, unload_dependents = arguments
            # As Triton, the model is no longer ready when the call returns, but the requests it
            # holds (maybe the caller's own) still finish: answer once the unload has begun.
            unload = asyncio.get_running_loop().create_task(
                self.server.unload_model(name, bool(unload_dependents))
            )
            self._track(unload)
            await asyncio.sleep(0)
            if unload.done():
                unload.result()
            return {"value": True}
        except ServerError as exc:
            return error_answer(exc)
        except (TypeError, ValueError) as exc:
            return {"error": (f"{operation}: {exc}", INVALID_ARG)}

    # -- custom metrics the model does not wait on --------------------------------------------------

    def update_metric(self, operation: str, handle: int, value: float) -> None:
        """A metric operation the model does not wait on (it checked kinds and signs itself)."""
        metrics = self._metrics
        if metrics is None:
            return
        try:
            if operation == "increment":
                metrics.registry.increment(handle, value)
            elif operation == "set":
                metrics.registry.set(handle, value)
            elif operation == "observe":
                metrics.registry.observe(handle, value)
            elif operation == "release_series":
                metrics.release_series(handle)
            elif operation == "release_family":
                metrics.release_family(handle)
        except ServerError as exc:
            logger.warning("%s: metric %s refused: %s", self._model_name, operation, exc.message)


def _bls_request(payload: dict[str, Any]) -> InferenceRequest:
    """The core's request for a model's ``pb_utils.InferenceRequest``: its sequence id and START /
    END flags (BLS with stateful models, as in Triton) and its ``timeout`` travel as the request
    parameters a client's would."""
    parameters = dict(payload["parameters"])
    if payload["correlation_id"]:
        parameters["sequence_id"] = payload["correlation_id"]
    flags = payload.get("flags") or 0
    if flags & SEQUENCE_START:
        parameters["sequence_start"] = True
    if flags & SEQUENCE_END:
        parameters["sequence_end"] = True
    if payload.get("timeout"):
        parameters["timeout"] = payload["timeout"]
    return InferenceRequest(
        model_name=payload["model_name"],
        model_version="" if payload["model_version"] in (-1, None) else str(payload["model_version"]),
        id=payload["id"],
        inputs=[
            InputTensor(name, _ipc.wire_datatype(array), tuple(array.shape), array)
            for name, array in payload["inputs"].items()
        ],
        outputs=[RequestedOutput(name) for name in payload["outputs"]] or None,
        parameters=parameters,
    )


def _bls_answer(response: InferenceResponse) -> dict[str, Any]:
    outputs = {output.name: output.data for output in response.outputs}
    return {"error": None, "outputs": outputs, "parameters": response.parameters}
