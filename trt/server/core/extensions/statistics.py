"""Per model-version counters with Triton's statistics-extension semantics.

One request counts once in ``inference_stats`` whatever its batch size; ``inference_count`` adds the
batch size; ``execution_count`` and ``batch_stats`` count executions of the model (several requests
batched together are one execution). Durations are cumulative nanoseconds, as Triton reports them.
Updates happen on the event loop thread only, so plain integers need no lock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from trt.server.core.extensions.latency_distributions import LatencyDistributions

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass(slots=True)
class BatchStatistics:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ModelStatistics:
    name: str
    version: str
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    batch_stats: dict[int, BatchStatistics] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    # Requests accepted but not yet executing (Triton's nv_inference_pending_request_count).
    pending: int = 0
    # Summaries and the first-response histogram, where --metrics-config asks for them.
    latencies: LatencyDistributions | None = None

    def record_execution(self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        self.execution_count += 1
        self.inference_count += batch_size
        stats = self.batch_stats.get(batch_size)
        if stats is None:
            stats = self.batch_stats[batch_size] = BatchStatistics()
        # Plain attribute updates rather than Duration.add: this runs for every execution.
        duration = stats.compute_input
        duration.count += 1
        duration.ns += input_ns
        duration = stats.compute_infer
        duration.count += 1
        duration.ns += infer_ns
        duration = stats.compute_output
        duration.count += 1
        duration.ns += output_ns

    def record_success(
        self, request_ns: int, queue_ns: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        # Plain attribute updates rather than Duration.add: this runs for every request.
        duration = self.success
        duration.count += 1
        duration.ns += request_ns
        duration = self.queue
        duration.count += 1
        duration.ns += queue_ns
        duration = self.compute_input
        duration.count += 1
        duration.ns += input_ns
        duration = self.compute_infer
        duration.count += 1
        duration.ns += infer_ns
        duration = self.compute_output
        duration.count += 1
        duration.ns += output_ns
        now_ns = time.time_ns()
        self.last_inference_ms = now_ns // 1_000_000
        if self.latencies is not None:
            self.latencies.success(now_ns / 1e9, request_ns, queue_ns, input_ns, infer_ns, output_ns)

    def record_cache_hit(self, request_ns: int, lookup_ns: int) -> None:
        """Answered from the response cache: a success, never an execution (Triton's counting)."""
        self.success.add(request_ns)
        self.queue.add(0)
        self.cache_hit.add(lookup_ns)
        now_ns = time.time_ns()
        self.last_inference_ms = now_ns // 1_000_000
        if self.latencies is not None:
            self.latencies.cache_hit(now_ns / 1e9, lookup_ns)

    def record_cache_miss(self, insert_ns: int) -> None:
        """The time a response took to go into the cache (after the request was answered)."""
        self.cache_miss.add(insert_ns)
        if self.latencies is not None:
            self.latencies.cache_miss(time.time_ns() / 1e9, insert_ns)

    def record_first_response(self, ns: int) -> None:
        if self.latencies is not None:
            self.latencies.responded(ns)

    def record_failure(self, request_ns: int, reason: str) -> None:
        self.fail.add(request_ns)
        self.failures[reason] = self.failures.get(reason, 0) + 1
        self.last_inference_ms = time.time_ns() // 1_000_000
