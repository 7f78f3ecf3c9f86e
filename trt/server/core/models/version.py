"""A loaded version of a model: its signature, its instances, and how a request runs on them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Collection, Sequence
from typing import Any, TypeAlias

import numpy as np

from trt.protos import model_config_pb2
from trt.server.core.backends.base import (
    SEQUENCE_END,
    SEQUENCE_START,
    BackendRequest,
    BackendResponse,
    ModelFiles,
    ModelInstance,
    RequestLevelInstance,
)
from trt.server.core.datatypes import FIXED_SIZE_DTYPES, numpy_to_wire
from trt.server.core.errors import InvalidInput, ModelNotReady, ServerError
from trt.server.core.extensions.classification import classify
from trt.server.core.extensions.latency_distributions import (
    LatencyDistributions,
    LatencyMetricsSettings,
    first_response_buckets,
)
from trt.server.core.extensions.statistics import ModelStatistics
from trt.server.core.extensions.tracing import Trace
from trt.server.core.models.answer_queue import DEFAULT_LIMIT as DEFAULT_UNREAD_LIMIT
from trt.server.core.models.answer_queue import EXECUTION_ENDED, AnswerQueue
from trt.server.core.models.signature import ModelSignature
from trt.server.core.scheduling.queued_bytes import QueuedBytes
from trt.server.core.scheduling.rate_limiter import Needs, RateLimiter
from trt.server.core.scheduling.response_cache import ResponseCache
from trt.server.core.scheduling.scheduler import create_scheduler
from trt.server.core.scheduling.timing import ExecutionTimes
from trt.server.core.types import (
    RESERVED_PARAMETERS,
    TRITON_CONTROL_PARAMETERS,
    InferenceRequest,
    InferenceResponse,
    InputTensor,
    OutputTensor,
    RequestedOutput,
    StreamItem,
)

logger = logging.getLogger("trt.model")

# A scheduled execution: the model's answer and where its time went.
_Execution: TypeAlias = "asyncio.Future[tuple[BackendResponse, ExecutionTimes]]"
_CHECKED_LAYOUTS = 64  # request layouts a version remembers having checked; a full memory starts over


class ModelVersion:
    """One version of one model, ready to serve."""

    def __init__(
        self,
        config: model_config_pb2.ModelConfig,
        files: ModelFiles,
        instances: Sequence[ModelInstance | RequestLevelInstance],
        labels: dict[str, tuple[str, ...]],
        cache: ResponseCache | None = None,
        limiter: RateLimiter | None = None,
        needs: Sequence[tuple[Needs, int]] = (),
        latency_metrics: LatencyMetricsSettings | None = None,
        passive: Collection[int] = (),
        max_unread_bytes: int = DEFAULT_UNREAD_LIMIT,
    ) -> None:
        self.name = files.model_name
        self.namespace = files.namespace  # "" unless --model-namespacing
        self.version = files.version
        self.version_str = str(files.version)
        self.config = config
        # Read on every request; a protobuf field read costs more than an attribute.
        self.decoupled = config.model_transaction_policy.decoupled
        self.files = files
        self.signature = ModelSignature.build(self.name, config, labels)
        self.stats = ModelStatistics(self.name, self.version_str)
        self.cache = cache if config.response_cache.enable else None
        if latency_metrics is not None and (latency_metrics.summaries or latency_metrics.histograms):
            buckets = first_response_buckets(config)
            self.stats.latencies = LatencyDistributions(latency_metrics, self.cache is not None, buckets)
        self._instances = list(instances)
        # Passive instances (``instance_group { passive: true }``) are loaded but never scheduled.
        scheduled = [i for i in range(len(instances)) if i not in passive]
        self._scheduler = create_scheduler(
            self.name, self.version, config, [self._instances[i] for i in scheduled], self.stats,
            files.model_dir, limiter, [needs[i] for i in scheduled] if needs else (),
        )  # fmt: skip
        # A decoupled request's answers its reader has not taken: past this many bytes it is cancelled.
        self._max_unread_bytes = max_unread_bytes
        self._in_flight = 0  # requests, and holds
        self._holds = 0  # ensemble requests that run steps on this version (``hold``)
        self._drained: asyncio.Event | None = None
        self._closing = False
        # What checking each request layout seen gave: its batch size and the outputs to answer.
        self._checked: dict[object, tuple[int, tuple[str, ...]]] = {}

    @property
    def ready(self) -> bool:
        """Every instance can take requests. An instance may say it cannot for a while (``ready``
        false: a Python model's process is restarting or failed to restart): the version is then
        not READY, though requests still go to it (they wait or are answered with an error)."""
        return all(getattr(instance, "ready", True) for instance in self._instances)

    @property
    def in_flight(self) -> int:
        """Requests not yet answered, and ensemble requests holding this version for their steps."""
        return self._in_flight

    @property
    def batching(self) -> bool:
        return self.signature.max_batch_size > 0

    def hold(self) -> None:
        """A request of an ensemble will run steps on this version: it takes them until ``let_go``,
        even once unloading (retiring waits for it as for a request in flight). Triton's ensemble
        holds its steps' models for the request's lifetime: a request finishes on the versions it
        started with when one of them is unloaded or reloaded meanwhile."""
        self._holds += 1
        self._in_flight += 1

    def let_go(self) -> None:
        self._holds -= 1
        self._in_flight -= 1
        if self._in_flight == 0 and self._drained is not None:
            self._drained.set()

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if self._closing and not self._holds:
            raise ModelNotReady(f"model '{self.name}' version {self.version} is unloading")
        received = time.perf_counter_ns()
        self._in_flight += 1
        # One coroutine for the whole request (its checks, scheduling and answer), not one within
        # another: each layer costs a frame and a step on every resumption.
        try:
            batch_size, output_names = self._check(request)
            cache_key = None
            if self.cache is not None:
                lookup_started = time.perf_counter_ns()
                cache_key = self.cache.key(self.namespace + "::" + self.name, self.version_str, request)
                cached = self.cache.get(cache_key, request.id)
                if cached is not None:
                    now = time.perf_counter_ns()
                    self.stats.record_cache_hit(now - received, now - lookup_started)
                    self.stats.record_first_response(now - received)
                    if request.trace is not None:
                        self._stamp(request.trace, (("REQUEST_START", received), ("REQUEST_END", now)))
                    return cached
            feeds = self._feeds(request.inputs)
            if request.trace is not None and request.trace.with_tensors:
                _trace_tensors(request.trace, "TENSOR_QUEUE_INPUT", request.inputs)
            input_done = time.perf_counter_ns()
            answer, times = await self._scheduler.schedule(
                _backend_request(request, feeds, output_names), batch_size
            )
            if answer.error is not None:
                answer.error.answered = True
                raise answer.error
            results = answer.outputs
            produced = output_names
            for name in output_names:
                if name not in results:
                    # Left out by the model (a Python model answers with the outputs it chose to
                    # give, vLLM's token counts only when asked): absent from the response, as in Triton.
                    produced = tuple(name for name in output_names if name in results)
                    break
            output_started = time.perf_counter_ns()
            outputs = self._build_outputs(request, results, produced)
            done = time.perf_counter_ns()
            # Executions (and batch sizes) are counted by the scheduler that ran them; this counts
            # the request.
            input_ns = input_done - received + times.input_ns
            output_ns = done - output_started + times.output_ns
            self.stats.record_success(done - received, times.queue_ns, input_ns, times.infer_ns, output_ns)
            self.stats.record_first_response(done - received)
            if request.trace is not None:
                self._stamp(request.trace, _trace_points(received, input_done, times, done))
                if request.trace.with_tensors:
                    _trace_tensors(request.trace, "TENSOR_BACKEND_OUTPUT", outputs)
            response = InferenceResponse(self.name, self.version_str, request.id, outputs, answer.parameters)
            if cache_key is not None and self.cache is not None:
                self.cache.put(cache_key, response)
                self.stats.record_cache_miss(time.perf_counter_ns() - done)
            return response
        except ServerError as exc:
            reason = "REJECTED" if isinstance(exc, InvalidInput) else "BACKEND"
            self.stats.record_failure(time.perf_counter_ns() - received, reason)
            raise
        except Exception as exc:
            self.stats.record_failure(time.perf_counter_ns() - received, "BACKEND")
            logger.exception("model '%s' failed", self.name)
            raise ServerError(f"model '{self.name}' failed to execute: {exc}") from exc
        except asyncio.CancelledError:  # the client cancelled (gRPC), as Triton counts it
            self.stats.record_failure(time.perf_counter_ns() - received, "CANCELED")
            raise
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._drained is not None:
                self._drained.set()

    def _stamp(self, trace: Trace, points: Sequence[tuple[str, int]]) -> None:
        trace.model_version = self.version_str
        for name, ns in points:
            trace.stamp(name, ns)

    async def infer_decoupled(
        self, request: InferenceRequest, budget: QueuedBytes | None = None
    ) -> AsyncGenerator[StreamItem, None]:
        """Every answer a decoupled model sends for ``request``, as it sends them; those not read
        yet count against ``budget`` (the server's ``--max-queued-bytes``) too."""
        if self._closing and not self._holds:
            raise ModelNotReady(f"model '{self.name}' version {self.version} is not serving")
        received = time.perf_counter_ns()
        batch_size, output_names = self._check(request)
        feeds = self._feeds(request.inputs)
        backend_request = _backend_request(request, feeds, output_names)
        answers = AnswerQueue(self._max_unread_bytes, self.name, backend_request.cancel, budget)
        backend_request.on_response = answers.put
        self._in_flight += 1
        input_done = time.perf_counter_ns()
        execution = asyncio.ensure_future(self._scheduler.schedule(backend_request, batch_size))
        execution.add_done_callback(answers.execution_ended)
        finished = False
        responded = False
        try:
            while True:
                answer, final = await answers.get()
                if answer is EXECUTION_ENDED:  # the answers go on arriving through the stream
                    ended, _ = execution.result()  # raises if the model process failed
                    if ended.error is not None:  # execute() raised: the request ends with it
                        yield StreamItem(None, ended.error, True)
                        break
                    continue
                if answer is not None and answer.error is not None:
                    yield StreamItem(None, answer.error, final)
                elif answer is not None:
                    if not responded:
                        responded = True
                        self.stats.record_first_response(time.perf_counter_ns() - received)
                    outputs = self._build_outputs(
                        request, answer.outputs, [n for n in output_names if n in answer.outputs]
                    )
                    yield StreamItem(
                        InferenceResponse(
                            self.name, self.version_str, request.id, outputs, answer.parameters
                        ),
                        None,
                        final,
                    )
                elif final:
                    yield StreamItem(None, None, True)
                if final:
                    break
            finished = True
            self._count_stream(execution, received, input_done)
        except ServerError:
            finished = True
            self.stats.record_failure(time.perf_counter_ns() - received, "BACKEND")
            raise
        finally:
            if not finished:  # the consumer went away (a cancelled stream): tell the model, if it asks
                backend_request.cancel()
                execution.cancel()
                self.stats.record_failure(time.perf_counter_ns() - received, "CANCELED")
            answers.close()
            self._in_flight -= 1
            if self._in_flight == 0 and self._drained is not None:
                self._drained.set()

    def _count_stream(
        self,
        execution: asyncio.Future[tuple[BackendResponse, ExecutionTimes]],
        received: int,
        input_done: int,
    ) -> None:
        """Count a decoupled request that ended well, with its execution's queue and compute times
        (as any request's), known once its ``execute()`` has returned: a model may send its last
        answer just before, so the count may come a moment after the stream's end."""

        def count(done: _Execution) -> None:
            request_ns, input_ns = time.perf_counter_ns() - received, input_done - received
            if done.cancelled() or done.exception() is not None:
                self.stats.record_success(request_ns, 0, input_ns, 0, 0)
                return
            times = done.result()[1]
            self.stats.record_success(
                request_ns, times.queue_ns, input_ns + times.input_ns, times.infer_ns, times.output_ns
            )

        if execution.done():
            count(execution)
        else:
            execution.add_done_callback(count)

    def _check(self, request: InferenceRequest) -> tuple[int, tuple[str, ...]]:
        """The request's batch size and the outputs to answer; InvalidInput if it does not fit the
        model. A layout seen before (``InferenceRequest.layout``) was checked then."""
        layout = request.layout
        if layout is not None:
            checked = self._checked.get(layout)
            if checked is not None:
                return checked
        signature = self.signature
        output_names = signature.check_outputs(request.outputs, request.id)  # first, as Triton
        checked = signature.check_inputs(request.inputs, request.id), output_names
        if layout is not None:
            if len(self._checked) >= _CHECKED_LAYOUTS:
                self._checked.clear()
            self._checked[layout] = checked
        return checked

    def _feeds(self, inputs: list[InputTensor]) -> dict[str, np.ndarray]:
        """Each input's data in the shape the model takes (its config's ``reshape``)."""
        feeds = {}
        specs = self.signature.inputs
        for tensor in inputs:
            data = tensor.data
            if data is None:
                raise InvalidInput(f"input '{tensor.name}' has no data")
            reshape = specs[tensor.name].reshape
            if reshape is not None:
                data = data.reshape(((data.shape[0],) if self.batching else ()) + reshape)
            feeds[tensor.name] = data
        return feeds

    def _build_outputs(
        self, request: InferenceRequest, results: dict[str, np.ndarray], output_names: Sequence[str]
    ) -> list[OutputTensor]:
        class_counts = None if request.outputs is None else _class_counts(request.outputs)
        outputs: list[OutputTensor] = []
        for name in output_names:
            spec = self.signature.outputs[name]
            data = results[name]
            if spec.reshape is not None:
                batch = (data.shape[0],) if self.batching else ()
                data = data.reshape(batch + spec.dims)
            datatype = spec.datatype
            if data.dtype != FIXED_SIZE_DTYPES.get(datatype):  # BYTES, or not the config's type: rare
                datatype = _answered_datatype(name, data)
            tensor = OutputTensor(name, datatype, tuple(data.shape), data)
            if class_counts and name in class_counts:
                tensor = classify(tensor, class_counts[name], self.batching, spec.labels)
            outputs.append(tensor)
        return outputs

    async def retire(self) -> None:
        """Stop taking requests, let in-flight ones finish, then release the instances, all at once: a
        Python instance stuck in ``execute()`` takes its process's grace before it is killed (10 s, or
        what is left of a stopping server's exit timeout), and one after another, a model's instances
        took that many times as long."""
        self._closing = True
        if self._in_flight:
            if self._drained is None:  # one event for every caller (an unload, and the server stopping)
                self._drained = asyncio.Event()
            await self._drained.wait()
        await self._scheduler.close()
        # An ensemble lists its one runner many times over: each instance is released once.
        distinct = {id(instance): instance for instance in self._instances}.values()
        await asyncio.gather(*(self._release(instance) for instance in distinct))

    async def _release(self, instance: ModelInstance | RequestLevelInstance) -> None:
        try:
            if hasattr(instance, "aclose"):
                await instance.aclose()
            else:
                instance.close()
        except Exception:
            logger.exception("closing an instance of '%s' failed", self.name)


def _answered_datatype(name: str, data: np.ndarray) -> str:
    """The datatype of an output as the model produced it. Triton hands a Python model's output on in
    the type the model gave it, not the config's (casting would truncate a float answered into an
    integer output without a word); backends whose models declare their types are checked at load."""
    try:
        return numpy_to_wire(data.dtype)
    except InvalidInput:
        raise ServerError(f"output '{name}' has numpy dtype {data.dtype}: no Triton type holds it") from None


def _trace_points(received: int, queued: int, times: ExecutionTimes, done: int) -> list[tuple[str, int]]:
    """Triton's timestamps for one request. The compute points follow from the durations its
    scheduler measured, laid end to end from the moment the request was queued."""
    compute_start = queued + times.queue_ns
    input_end = compute_start + times.input_ns
    output_start = input_end + times.infer_ns
    return [
        ("REQUEST_START", received),
        ("QUEUE_START", queued),
        ("COMPUTE_START", compute_start),
        ("COMPUTE_INPUT_END", input_end),
        ("COMPUTE_OUTPUT_START", output_start),
        ("COMPUTE_END", output_start + times.output_ns),
        ("INFER_RESPONSE_COMPLETE", done),
        ("REQUEST_END", done),
    ]


def _backend_request(
    request: InferenceRequest, feeds: dict[str, np.ndarray], output_names: Sequence[str]
) -> BackendRequest:
    parameters = request.parameters
    # Most requests have none, or only the control flag Triton's clients send on every gRPC request
    # (it is for the transport: the backend sees neither).
    if not parameters or parameters.keys() <= TRITON_CONTROL_PARAMETERS:
        return BackendRequest(request.id, feeds, tuple(output_names), {}, trace=request.trace)
    flags = 0
    if _sequence_flag(parameters, "sequence_start"):
        flags |= SEQUENCE_START
    if _sequence_flag(parameters, "sequence_end"):
        flags |= SEQUENCE_END
    priority, timeout_us = _schedule_parameters(parameters)
    return BackendRequest(
        request.id,
        feeds,
        tuple(output_names),
        {k: v for k, v in parameters.items() if k not in RESERVED_PARAMETERS},
        _sequence_id(parameters),
        flags,
        priority,
        timeout_us,
        trace=request.trace,
    )


def _trace_tensors(trace: Trace, activity: str, tensors: Sequence[InputTensor | OutputTensor]) -> None:
    for tensor in tensors:
        if tensor.data is not None:
            trace.tensor(activity, tensor.name, tensor.datatype, tensor.data)


def _class_counts(outputs: list[RequestedOutput] | None) -> dict[str, int] | None:
    """The outputs asked for as classifications, with their class counts (None: none is)."""
    counts = None
    for output in outputs or ():
        if output.class_count:
            counts = counts or {}
            counts[output.name] = output.class_count
    return counts


def _sequence_id(parameters: dict[str, Any]) -> int | str:
    """The ``sequence_id`` parameter: an unsigned 64-bit integer or a string, as Triton takes it (a
    negative or fractional JSON number was taken as an id of its own)."""
    value = parameters.get("sequence_id", 0)
    if isinstance(value, str) or (type(value) is int and 0 <= value < 1 << 64):
        return value or 0
    raise InvalidInput(
        f"request parameter 'sequence_id' must be an unsigned 64-bit integer or a string, got {value!r}"
    )


def _sequence_flag(parameters: dict[str, Any], name: str) -> bool:
    """``sequence_start`` / ``sequence_end``: true or false (Triton refuses any other JSON value)."""
    value = parameters.get(name, False)
    if not isinstance(value, bool):
        raise InvalidInput(f"request parameter '{name}' must be true or false, got {value!r}")
    return value


def _schedule_parameters(parameters: dict[str, Any]) -> tuple[int, int]:
    """The ``priority`` and ``timeout`` (microseconds) request parameters, checked."""
    priority, timeout = parameters.get("priority", 0), parameters.get("timeout", 0)
    for name, value in (("priority", priority), ("timeout", timeout)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInput(f"request parameter '{name}' must be a non-negative integer")
    return priority, timeout
