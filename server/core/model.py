"""A loaded version of a model: its signature, its instances, and how a request runs on them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from protos import model_config_pb2
from server.backends.base import (
    BackendRequest,
    BackendResponse,
    ModelFiles,
    ModelInstance,
    RequestLevelInstance,
)
from server.core.classification import classify
from server.core.datatypes import numpy_to_wire, wire_to_numpy
from server.core.errors import InvalidInput, ModelNotReady, ServerError
from server.core.statistics import ModelStatistics
from server.core.tensors import ModelSignature, TensorSpec
from server.core.types import RESERVED_PARAMETERS, InferenceRequest, InferenceResponse, OutputTensor

logger = logging.getLogger("trt.model")


@dataclass(slots=True)
class _Waiting:
    request: BackendRequest
    batch_size: int
    future: asyncio.Future[tuple[BackendResponse, ExecutionTimes]]
    queued_ns: int


@dataclass(slots=True)
class ExecutionTimes:
    queue_ns: int
    input_ns: int
    infer_ns: int
    output_ns: int


# Handing a call to a worker thread and back costs ~140 us of CPU on these machines, several times
# what a tiny model computes. Models whose executions stay under this budget run on the event loop;
# slower ones go to the instance threads so they can overlap and never stall the loop for long.
INLINE_BUDGET_NS = 100_000
_WARMUP_EXECUTIONS = 20
_EWMA_WEIGHT = 0.05


def _timed(
    instance: ModelInstance, feeds: Mapping[str, np.ndarray], names: Sequence[str]
) -> tuple[dict[str, np.ndarray], int]:
    started = time.perf_counter_ns()
    outputs = instance.execute(feeds, names)
    return outputs, time.perf_counter_ns() - started


class DirectScheduler:
    """Runs each request on the next idle instance, one execution per request.

    Instances run in a thread pool with one thread per instance, so N instances execute
    concurrently (the backends release the GIL while computing), except for models cheap enough
    to run inline (see INLINE_BUDGET_NS). The choice follows a moving average of execution time,
    so a model that becomes slow (bigger inputs) moves back to the threads.
    """

    def __init__(
        self,
        name: str,
        instances: Sequence[ModelInstance | RequestLevelInstance],
        stats: ModelStatistics,
        max_batch_size: int = 0,
        gather_requests: bool = False,
    ) -> None:
        self._executor = ThreadPoolExecutor(max_workers=len(instances), thread_name_prefix=f"trt-{name}")
        self._idle: asyncio.Queue[Any] = asyncio.Queue()
        for instance in instances:
            self._idle.put_nowait(instance)
        self._stats = stats
        self._waiting: deque[_Waiting] = deque()
        self._running: set[asyncio.Task[None]] = set()
        self._gather = gather_requests
        self._max_batch = max(max_batch_size, 1)
        self._executions = 0
        self._average_ns = float(INLINE_BUDGET_NS * 10)

    @property
    def runs_inline(self) -> bool:
        return self._executions >= _WARMUP_EXECUTIONS and self._average_ns < INLINE_BUDGET_NS

    async def execute(
        self, feeds: Mapping[str, np.ndarray], output_names: Sequence[str], batch_size: int
    ) -> tuple[dict[str, np.ndarray], ExecutionTimes]:
        queued = time.perf_counter_ns()
        self._stats.pending += 1
        try:
            instance = self._idle.get_nowait() if not self._idle.empty() else await self._idle.get()
        finally:
            self._stats.pending -= 1
        started = time.perf_counter_ns()
        if self.runs_inline:
            try:
                outputs, compute_ns = _timed(instance, feeds, output_names)
            finally:
                self._idle.put_nowait(instance)
        else:
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(self._executor, _timed, instance, feeds, output_names)
            # The instance goes back only when its thread is done, even if the waiting request is
            # cancelled (client gone): otherwise two requests could run on one instance at once.
            future.add_done_callback(lambda _: self._idle.put_nowait(instance))
            outputs, compute_ns = await asyncio.shield(future)
        self._executions += 1
        self._average_ns += _EWMA_WEIGHT * (compute_ns - self._average_ns)
        times = ExecutionTimes(started - queued, 0, time.perf_counter_ns() - started, 0)
        return outputs, times

    async def submit_request(
        self, request: BackendRequest, batch_size: int
    ) -> tuple[BackendResponse, ExecutionTimes]:
        """For request-level instances (Python models): queue a whole request, get its response and
        its queue time. Requests waiting when an instance frees up go to it together, up to
        ``max_batch_size`` (the list a Python model's ``execute`` receives), when the model batches."""
        future: asyncio.Future[tuple[BackendResponse, ExecutionTimes]] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiting.append(_Waiting(request, max(batch_size, 1), future, time.perf_counter_ns()))
        self._stats.pending += 1
        self._dispatch()
        return await future

    def _dispatch(self) -> None:
        while self._waiting and not self._idle.empty():
            instance = self._idle.get_nowait()
            batch = [self._waiting.popleft()]
            total = batch[0].batch_size
            while self._gather and self._waiting and total + self._waiting[0].batch_size <= self._max_batch:
                item = self._waiting.popleft()
                batch.append(item)
                total += item.batch_size
            self._stats.pending -= len(batch)
            task = asyncio.ensure_future(self._run_batch(instance, batch, total))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run_batch(self, instance: Any, batch: list[_Waiting], total: int) -> None:
        started = time.perf_counter_ns()
        try:
            responses = await instance.execute_requests([item.request for item in batch])
        except BaseException as exc:
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(exc if isinstance(exc, Exception) else ServerError("cancelled"))
            raise
        finally:
            # The instance is busy until its execution ends, whoever stopped waiting for it.
            self._idle.put_nowait(instance)
            self._dispatch()
        elapsed = time.perf_counter_ns() - started
        self._stats.record_execution(total, 0, elapsed, 0)
        for item, response in zip(batch, responses, strict=True):
            if not item.future.done():
                item.future.set_result((response, ExecutionTimes(started - item.queued_ns, 0, elapsed, 0)))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


class ModelVersion:
    """One version of one model, ready to serve."""

    def __init__(
        self,
        config: model_config_pb2.ModelConfig,
        files: ModelFiles,
        instances: Sequence[ModelInstance | RequestLevelInstance],
        labels: dict[str, tuple[str, ...]],
    ) -> None:
        self.name = files.model_name
        self.version = files.version
        self.version_str = str(files.version)
        self.config = config
        self.files = files
        self.signature = ModelSignature.build(self.name, config, labels)
        self.stats = ModelStatistics(self.name, self.version_str)
        self._instances = list(instances)
        self._request_level = bool(instances) and hasattr(instances[0], "execute_requests")
        self._scheduler = DirectScheduler(
            f"{self.name}-{self.version}",
            self._instances,
            self.stats,
            config.max_batch_size,
            gather_requests=config.HasField("dynamic_batching") and config.max_batch_size > 0,
        )
        self._in_flight = 0
        self._drained: asyncio.Event | None = None
        self._closing = False

    @property
    def batching(self) -> bool:
        return self.signature.max_batch_size > 0

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if self._closing:
            raise ModelNotReady(f"model '{self.name}' version {self.version} is unloading")
        received = time.perf_counter_ns()
        self._in_flight += 1
        try:
            response = await self._infer(request)
        except ServerError as exc:
            reason = "REJECTED" if isinstance(exc, InvalidInput) else "BACKEND"
            self.stats.record_failure(time.perf_counter_ns() - received, reason)
            raise
        except Exception as exc:
            self.stats.record_failure(time.perf_counter_ns() - received, "BACKEND")
            logger.exception("model '%s' failed", self.name)
            raise ServerError(f"model '{self.name}' failed to execute: {exc}") from exc
        finally:
            self._in_flight -= 1
            if self._in_flight == 0 and self._drained is not None:
                self._drained.set()
        return response

    async def _infer(self, request: InferenceRequest) -> InferenceResponse:
        received = time.perf_counter_ns()
        signature = self.signature
        batch_size = signature.check_inputs(request.inputs)
        output_names = signature.check_outputs(request.outputs)
        feeds = {t.name: self._to_model_shape(t.data, signature.inputs[t.name]) for t in request.inputs}
        input_done = time.perf_counter_ns()
        parameters: dict[str, Any] = {}
        if self._request_level:
            answer, times = await self._scheduler.submit_request(
                _backend_request(request, feeds, output_names), batch_size
            )
            if answer.error is not None:
                raise answer.error
            results = answer.outputs
            parameters = answer.parameters
            missing = [name for name in output_names if name not in results]
            if missing:
                raise ServerError(f"model '{self.name}' did not produce output(s) {', '.join(missing)}")
        else:
            results, times = await self._scheduler.execute(feeds, output_names, batch_size)
        output_started = time.perf_counter_ns()
        outputs = self._build_outputs(request, results, output_names)
        done = time.perf_counter_ns()
        input_ns = input_done - received
        output_ns = done - output_started
        if not self._request_level:  # request-level executions are counted by the scheduler
            self.stats.record_execution(max(batch_size, 1), input_ns, times.infer_ns, output_ns)
        self.stats.record_success(done - received, times.queue_ns, input_ns, times.infer_ns, output_ns)
        return InferenceResponse(self.name, self.version_str, request.id, outputs, parameters)

    def _to_model_shape(self, data: np.ndarray, spec: TensorSpec) -> np.ndarray:
        if spec.reshape is None:
            return data
        batch = (data.shape[0],) if self.batching else ()
        return data.reshape(batch + spec.reshape)

    def _build_outputs(
        self, request: InferenceRequest, results: dict[str, np.ndarray], output_names: Sequence[str]
    ) -> list[OutputTensor]:
        class_counts = {o.name: o.class_count for o in request.outputs or () if o.class_count}
        outputs: list[OutputTensor] = []
        for name in output_names:
            spec = self.signature.outputs[name]
            data = results[name]
            if spec.reshape is not None:
                batch = (data.shape[0],) if self.batching else ()
                data = data.reshape(batch + spec.dims)
            datatype = spec.datatype
            if datatype != "BYTES" and numpy_to_wire(data.dtype) != datatype:
                data = data.astype(wire_to_numpy(datatype))
            tensor = OutputTensor(name, datatype, tuple(data.shape), data)
            if name in class_counts:
                tensor = classify(tensor, class_counts[name], self.batching, spec.labels)
            outputs.append(tensor)
        return outputs

    async def retire(self) -> None:
        """Stop taking requests, let in-flight ones finish, then release the instances."""
        self._closing = True
        if self._in_flight:
            self._drained = asyncio.Event()
            await self._drained.wait()
        await asyncio.to_thread(self._scheduler.shutdown)
        for instance in self._instances:
            try:
                if hasattr(instance, "aclose"):
                    await instance.aclose()
                else:
                    instance.close()
            except Exception:
                logger.exception("closing an instance of '%s' failed", self.name)


def _backend_request(
    request: InferenceRequest, feeds: dict[str, np.ndarray], output_names: Sequence[str]
) -> BackendRequest:
    parameters = request.parameters
    flags = 0
    if parameters.get("sequence_start"):
        flags |= 1
    if parameters.get("sequence_end"):
        flags |= 2
    custom = {k: v for k, v in parameters.items() if k not in RESERVED_PARAMETERS}
    return BackendRequest(
        request.id, feeds, tuple(output_names), custom, parameters.get("sequence_id", 0) or 0, flags
    )
