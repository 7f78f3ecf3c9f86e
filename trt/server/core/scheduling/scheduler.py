"""The one interface every scheduler implements, and the choice of scheduler for a model version.

A model version hands every request to its scheduler the same way, whatever the scheduler does with
it: run it on the next idle instance (``DirectScheduler``), batch it with others (``DynamicBatcher``),
keep a sequence on one slot (``SequenceBatcher``), or pass whole requests to request-level instances
such as Python models (``RequestScheduler``, ``SequenceRouter``). The answer always comes back as a
``BackendResponse`` with the request's ``ExecutionTimes``; an error the model gave for this request
alone comes back in the response, and an error of the whole execution is raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, cast

from trt.protos import model_config_pb2
from trt.server.core.backends.base import BackendRequest, BackendResponse, ModelInstance, RequestLevelInstance
from trt.server.core.errors import Unavailable
from trt.server.core.extensions.statistics import ModelStatistics
from trt.server.core.scheduling.direct import DirectScheduler
from trt.server.core.scheduling.dynamic_batcher import DynamicBatcher
from trt.server.core.scheduling.instance_pool import InstancePool
from trt.server.core.scheduling.ragged import RaggedBatching
from trt.server.core.scheduling.rate_limiter import Needs, RateLimiter
from trt.server.core.scheduling.request_scheduler import RequestScheduler
from trt.server.core.scheduling.sequence_batcher import SequenceBatcher
from trt.server.core.scheduling.sequence_router import SequenceRouter
from trt.server.core.scheduling.timing import ExecutionTimes


class Scheduler(Protocol):
    async def schedule(
        self, request: BackendRequest, batch_size: int
    ) -> tuple[BackendResponse, ExecutionTimes]:
        """Run ``request`` (``batch_size`` rows; 0 when the model does not batch) as this scheduler
        runs requests, and return its answer and where its time went."""
        ...

    async def close(self) -> None:
        """Stop timers and worker threads; called once no request is in flight."""
        ...


class NoInstanceScheduler:
    """For a model whose every instance is passive: nothing would ever run a request, so each is
    refused at once rather than queued for good."""

    def __init__(self, model_name: str) -> None:
        self._name = model_name

    async def schedule(
        self, request: BackendRequest, batch_size: int
    ) -> tuple[BackendResponse, ExecutionTimes]:
        raise Unavailable(
            f"model '{self._name}' has no instance that takes requests: every instance group is passive"
        )

    async def close(self) -> None:
        pass


def create_scheduler(
    name: str,
    version: int,
    config: model_config_pb2.ModelConfig,
    instances: Sequence[ModelInstance | RequestLevelInstance],
    stats: ModelStatistics,
    model_dir: Path | None = None,
    limiter: RateLimiter | None = None,
    needs: Sequence[tuple[Needs, int]] = (),
) -> Scheduler:
    """The scheduler a config asks for, over instances of one kind (all tensor or all request-level)."""
    if not instances:
        return NoInstanceScheduler(name)
    batches = config.HasField("dynamic_batching") and config.max_batch_size > 0
    if instances and hasattr(instances[0], "execute_requests"):
        request_instances = cast(list[RequestLevelInstance], list(instances))
        if config.HasField("sequence_batching"):  # a sequence stays on its instance
            return SequenceRouter(name, request_instances, stats, config, model_dir, limiter, needs)
        return RequestScheduler(request_instances, stats, config.max_batch_size, batches, limiter, needs)
    ragged = RaggedBatching.from_config(config)  # config_rules checked it with sequence_batching too
    tensor_instances = cast(list[ModelInstance], list(instances))
    pool = InstancePool(f"{name}-{version}", tensor_instances, limiter, needs)
    if config.HasField("sequence_batching"):
        return SequenceBatcher(name, pool, tensor_instances, stats, config, model_dir)
    if batches:
        return DynamicBatcher.from_config(pool, stats, config)
    return DirectScheduler(pool, stats, ragged)
