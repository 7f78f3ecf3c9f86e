"""Prometheus metrics with Triton's names and labels, served on the metrics port.

Counters are read from the core's statistics when Prometheus scrapes, so the inference path pays
nothing for them. The latency summaries and the first-response histogram that ``--metrics-config``
turns on are observed per request by the core (``LatencyDistributions``) and rendered here. GPU gauges
come from NVML (nvidia-ml-py) when a GPU and the library are there.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from trt.server.core.extensions.custom_metrics import FamilySnapshot, MetricKind
from trt.server.core.extensions.latency_distributions import FIRST_RESPONSE_FAMILY, LatencyDistributions
from trt.server.core.extensions.statistics import FAILURE_REASONS
from trt.server.core.models.version import ModelVersion
from trt.server.core.server import InferenceServer
from trt.server.http.messages import HttpRequest, HttpResponse

logger = logging.getLogger("trt.metrics")

_LABELS = ["model", "version"]


class MetricFamily:
    """One family in Prometheus' text format. Written by hand because prometheus_client renames
    counters to ``*_total``, and Triton's names (which dashboards use) have no suffix."""

    def __init__(self, name: str, documentation: str, kind: str, labels: list[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.kind = kind
        self.labels = labels
        self.samples: list[tuple[list[str], float]] = []

    def add_metric(self, values: list[str], value: float) -> None:
        self.samples.append((values, value))

    def render(self) -> str:
        lines = [f"# HELP {self.name} {self.documentation}", f"# TYPE {self.name} {self.kind}"]
        for values, value in self.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in zip(self.labels, values, strict=True))
            number = _number(value)
            lines.append(f"{self.name}{{{labels}}} {number}" if labels else f"{self.name} {number}")
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _render_custom(family: FamilySnapshot) -> str:
    """A family a model defined (``pb_utils.MetricFamily``), histograms as Prometheus spells them:
    cumulative ``_bucket`` series with ``le``, then ``_sum`` and ``_count``."""
    kind = family.kind.name.lower()
    help_text = family.description.replace("\\", "\\\\").replace("\n", "\\n")
    lines = [f"# HELP {family.name} {help_text}", f"# TYPE {family.name} {kind}"]
    for series in family.series:
        pairs = [f'{name}="{_escape(value)}"' for name, value in series.labels]
        labels = ",".join(pairs)
        if family.kind is not MetricKind.HISTOGRAM:
            lines.append(f"{family.name}{{{labels}}} {_number(series.value)}" if labels else
                         f"{family.name} {_number(series.value)}")  # fmt: skip
            continue
        for bound, count in zip((*series.buckets, math.inf), series.cumulative_counts, strict=True):
            bucket_labels = ",".join([*pairs, f'le="{_number(bound)}"'])
            lines.append(f"{family.name}_bucket{{{bucket_labels}}} {count}")
        suffix = f"{{{labels}}}" if labels else ""
        lines.append(f"{family.name}_sum{suffix} {_number(series.total)}")
        lines.append(f"{family.name}_count{suffix} {series.count}")
    return "\n".join(lines) + "\n"


# Triton's summary families (its metrics.cc), by the duration the core observes.
_SUMMARIES = (
    ("request", "nv_inference_request_summary_us",
     "Summary of inference request duration in microseconds (includes cached requests)"),
    ("queue", "nv_inference_queue_summary_us",
     "Summary of inference queuing duration in microseconds (includes cached requests)"),
    ("compute_input", "nv_inference_compute_input_summary_us",
     "Cumulative compute input duration in microseconds (does not include cached requests)"),
    ("compute_infer", "nv_inference_compute_infer_summary_us",
     "Cumulative compute inference duration in microseconds (does not include cached requests)"),
    ("compute_output", "nv_inference_compute_output_summary_us",
     "Cumulative inference compute output duration in microseconds (does not include cached requests)"),
    ("cache_hit", "nv_cache_hit_summary_per_model",
     "Summary of cache hit counts/durations per model, in microseconds."),
    ("cache_miss", "nv_cache_miss_summary_per_model",
     "Summary of cache miss counts/durations per model, in microseconds."),
)  # fmt: skip


def _render_latencies(
    label_names: list[str],
    models: list[tuple[list[str], LatencyDistributions]],
    quantiles: list[float],
    now_s: float,
) -> str:
    """Summaries (count, sum, then each quantile of the last minute) and the first-response
    histogram, for the models that observe them; a family no model has is left out."""
    lines: list[str] = []
    for key, name, documentation in _SUMMARIES:
        series = [
            (labels, latencies.summaries[key]) for labels, latencies in models if key in latencies.summaries
        ]
        if not series:
            continue
        lines += [f"# HELP {name} {documentation}", f"# TYPE {name} summary"]
        for labels, summary in series:
            pairs = [f'{k}="{_escape(v)}"' for k, v in zip(label_names, labels, strict=True)]
            joined = ",".join(pairs)
            lines.append(f"{name}_count{{{joined}}} {summary.count}")
            lines.append(f"{name}_sum{{{joined}}} {summary.total}")
            for q, value in zip(quantiles, summary.quantiles(quantiles, now_s), strict=True):
                lines.append(f'{name}{{{joined},quantile="{_number(q)}"}} {_number(value)}')
    histograms = [(labels, latencies.first_response) for labels, latencies in models]
    observed = [(labels, histogram) for labels, histogram in histograms if histogram is not None]
    if observed:
        name = FIRST_RESPONSE_FAMILY
        lines += [f"# HELP {name} Duration from request to first response in milliseconds"]
        lines += [f"# TYPE {name} histogram"]
        for labels, histogram in observed:
            pairs = [f'{k}="{_escape(v)}"' for k, v in zip(label_names, labels, strict=True)]
            joined = ",".join(pairs)
            lines.append(f"{name}_count{{{joined}}} {histogram.count}")
            lines.append(f"{name}_sum{{{joined}}} {histogram.total}")
            for bound, count in zip((*histogram.bounds, math.inf), histogram.cumulative(), strict=True):
                lines.append(f'{name}_bucket{{{joined},le="{_number(bound)}"}} {count}')
    return "\n".join(lines) + "\n" if lines else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _counter(name: str, documentation: str, labels: list[str]) -> MetricFamily:
    return MetricFamily(name, documentation, "counter", labels)


def _gauge(name: str, documentation: str, labels: list[str]) -> MetricFamily:
    return MetricFamily(name, documentation, "gauge", labels)


class TritonMetricsCollector:
    """A prometheus_client collector producing Triton's ``nv_*`` families."""

    def __init__(self, core: InferenceServer, gpu_metrics: bool = True, cpu_metrics: bool = True) -> None:
        self.core = core
        self.gpu = GpuMetrics() if gpu_metrics else None
        self.cpu = CpuMetrics() if cpu_metrics else None
        # Triton labels a model's series with its namespace too when models are namespaced.
        self.namespaced = core.options.model_namespacing
        self.label_names = ["namespace", *_LABELS] if self.namespaced else _LABELS

    def label_values(self, model: ModelVersion) -> list[str]:
        labels = [model.stats.name, model.stats.version]
        return [model.namespace, *labels] if self.namespaced else labels

    def collect(self) -> Iterator[MetricFamily]:
        models = self.core.models.table.loaded_models()
        names = self.label_names
        success = _counter(
            "nv_inference_request_success",
            "Number of successful inference requests, all batch sizes",
            labels=names,
        )
        failure = _counter(
            "nv_inference_request_failure",
            "Number of failed inference requests, all batch sizes",
            labels=[*names, "reason"],
        )
        count = _counter(
            "nv_inference_count",
            "Number of inferences performed (does not include cached requests)",
            labels=names,
        )
        exec_count = _counter(
            "nv_inference_exec_count",
            "Number of model executions performed (does not include cached requests)",
            labels=names,
        )
        request_duration = _counter(
            "nv_inference_request_duration_us",
            "Cumulative inference request duration in microseconds (includes cached requests)",
            labels=names,
        )
        queue = _counter(
            "nv_inference_queue_duration_us",
            "Cumulative inference queuing duration in microseconds (includes cached requests)",
            labels=names,
        )
        compute_input = _counter(
            "nv_inference_compute_input_duration_us",
            "Cumulative compute input duration in microseconds (does not include cached requests)",
            labels=names,
        )
        compute_infer = _counter(
            "nv_inference_compute_infer_duration_us",
            "Cumulative compute inference duration in microseconds (does not include cached requests)",
            labels=names,
        )
        compute_output = _counter(
            "nv_inference_compute_output_duration_us",
            "Cumulative inference compute output duration in microseconds (does not include cached requests)",
            labels=names,
        )
        pending = _gauge(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            labels=names,
        )
        cache_hits = _counter("nv_cache_num_hits_per_model", "Number of cache hits per model", names)
        cache_misses = _counter("nv_cache_num_misses_per_model", "Number of cache misses per model", names)
        cache_hit_us = _counter(
            "nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds", names
        )
        cache_miss_us = _counter(
            "nv_cache_miss_duration_per_model",
            "Total cache miss (insert) duration per model, in microseconds",
            names,
        )
        for model in models:
            stats = model.stats
            labels = self.label_values(model)
            success.add_metric(labels, stats.success.count)
            for reason in FAILURE_REASONS:
                failure.add_metric([*labels, reason], stats.failures.get(reason, 0))
            count.add_metric(labels, stats.inference_count)
            exec_count.add_metric(labels, stats.execution_count)
            request_duration.add_metric(labels, stats.success.ns // 1000)  # Triton counts successes only
            queue.add_metric(labels, stats.queue.ns // 1000)
            compute_input.add_metric(labels, stats.compute_input.ns // 1000)
            compute_infer.add_metric(labels, stats.compute_infer.ns // 1000)
            compute_output.add_metric(labels, stats.compute_output.ns // 1000)
            pending.add_metric(labels, stats.pending)
            if model.cache is not None:
                cache_hits.add_metric(labels, stats.cache_hit.count)
                cache_misses.add_metric(labels, stats.cache_miss.count)
                cache_hit_us.add_metric(labels, stats.cache_hit.ns // 1000)
                cache_miss_us.add_metric(labels, stats.cache_miss.ns // 1000)
        # --metrics-config counter_latencies=false leaves out the duration counters, as in Triton.
        durations = self.core.options.latency_metrics.counters
        yield from (success, failure, count, exec_count)
        if durations:
            yield from (request_duration, queue, compute_input, compute_infer, compute_output)
        yield pending
        yield from _queued_bytes(self.core)
        for family in (cache_hits, cache_misses, *((cache_hit_us, cache_miss_us) if durations else ())):
            if family.samples:  # only when some model uses the response cache, as Triton
                yield family
        if self.gpu is not None:
            yield from self.gpu.collect()
        if self.cpu is not None:
            yield from self.cpu.collect()


def _queued_bytes(core: InferenceServer) -> Iterator[MetricFamily]:
    """trt's own: what the server's one memory bound holds now, and the bound (not in Triton)."""
    held = _gauge(
        "trt_queued_bytes",
        "Bytes held by requests taken and not yet answered and by streamed responses not yet read",
        labels=[],
    )
    held.add_metric([], core.queued_bytes.held)
    limit = _gauge(
        "trt_queued_bytes_limit", "--max-queued-bytes: the bound on trt_queued_bytes (0: none)", labels=[]
    )
    limit.add_metric([], core.queued_bytes.limit)
    yield from (held, limit)


class CpuMetrics:
    """``nv_cpu_*`` gauges, as Triton reports them: utilization of all cores since the last scrape,
    and memory in use as total less available."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        psutil.cpu_percent(interval=None)  # the first reading starts the interval

    def collect(self) -> Iterator[MetricFamily]:
        utilization = _gauge("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", labels=[])
        total = _gauge("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", labels=[])
        used = _gauge("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", labels=[])
        memory = self._psutil.virtual_memory()
        utilization.add_metric([], self._psutil.cpu_percent(interval=None) / 100.0)
        total.add_metric([], memory.total)
        used.add_metric([], memory.total - memory.available)
        yield from (utilization, total, used)


class GpuMetrics:
    """``nv_gpu_*`` gauges from NVML; collects nothing when NVML is missing or finds no GPU."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._energy_at_start: list[int | None] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            if pynvml.nvmlDeviceGetCount() > 0:
                self._nvml = pynvml
                self._energy_at_start = [
                    self._energy_mj(pynvml.nvmlDeviceGetHandleByIndex(index))
                    for index in range(pynvml.nvmlDeviceGetCount())
                ]
        except Exception as exc:  # ImportError or NVMLError: no GPU metrics
            logger.debug("GPU metrics disabled: %s", exc)

    def _reading(self, read: Callable[[Any], Any], handle: Any) -> Any:
        try:
            return read(handle)
        except self._nvml.NVMLError:
            return None

    def _energy_mj(self, handle: Any) -> int | None:
        """The GPU's energy counter in millijoules (since the driver loaded); None where it has none."""
        energy = self._reading(self._nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        return None if energy is None else int(energy)

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def collect(self) -> Iterator[MetricFamily]:
        nvml = self._nvml
        if nvml is None:
            return
        utilization = _gauge("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", labels=["gpu_uuid"])
        memory_total = _gauge("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", labels=["gpu_uuid"])
        memory_used = _gauge("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", labels=["gpu_uuid"])
        power = _gauge("nv_gpu_power_usage", "GPU power usage in watts", labels=["gpu_uuid"])
        power_limit = _gauge("nv_gpu_power_limit", "GPU power management limit in watts", labels=["gpu_uuid"])
        energy = _counter(
            "nv_energy_consumption",
            "GPU energy consumption in joules since the Triton Server started",
            labels=["gpu_uuid"],
        )
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            # A reading this GPU (or a virtual machine's view of it) does not support leaves its gauge
            # out for this GPU; the others still come.
            memory = self._reading(nvml.nvmlDeviceGetMemoryInfo, handle)
            if memory is not None:
                memory_total.add_metric([uuid], memory.total)
                memory_used.add_metric([uuid], memory.used)
            rates = self._reading(nvml.nvmlDeviceGetUtilizationRates, handle)
            if rates is not None:
                utilization.add_metric([uuid], rates.gpu / 100.0)
            for family, read in (
                (power, nvml.nvmlDeviceGetPowerUsage),
                (power_limit, nvml.nvmlDeviceGetPowerManagementLimit),
            ):
                milliwatts = self._reading(read, handle)
                if milliwatts is not None:
                    family.add_metric([uuid], milliwatts / 1000.0)
            # Triton counts joules since the server started; NVML's counter runs since the driver loaded.
            now, start = self._energy_mj(handle), self._energy_at_start[index]
            if now is not None and start is not None:
                energy.add_metric([uuid], (now - start) / 1000.0)
        yield from (utilization, memory_total, memory_used, power, power_limit, energy)


class MetricsApp:
    """Handler answering ``GET /metrics`` in Prometheus' text format."""

    def __init__(self, core: InferenceServer, gpu_metrics: bool = True, cpu_metrics: bool = True) -> None:
        self.collector = TritonMetricsCollector(core, gpu_metrics, cpu_metrics)

    def render(self) -> bytes:
        core = self.collector.core
        parts = [family.render() for family in self.collector.collect()]
        observing = [
            (self.collector.label_values(model), model.stats.latencies)
            for model in core.models.table.loaded_models()
            if model.stats.latencies is not None
        ]
        if observing:
            quantiles = [q for q, _ in core.options.latency_metrics.quantiles]
            parts.append(_render_latencies(self.collector.label_names, observing, quantiles, time.time()))
        parts += [_render_custom(family) for family in core.custom_metrics.snapshot()]
        return "".join(parts).encode()

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path != "/metrics":
            return HttpResponse(404, b"Not Found", [(b"content-type", b"text/plain")])
        return HttpResponse(200, self.render(), [(b"content-type", b"text/plain; charset=utf-8")])
