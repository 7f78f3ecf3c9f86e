"""Measurement windows and the statistics perf_analyzer reports from them.

Percentiles use perf_analyzer's index, ``sorted[int(p/100 * (n-1) + 0.5)]``, over every latency of the
windows merged, not an interpolation; averages are integer microseconds as it prints them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from trt.perf.server_stats import ServerBreakdown
from trt.perf.worker.records import WindowPart

PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class LatencyStats:
    count: int
    avg_us: float
    std_us: float
    min_us: int
    max_us: int
    percentiles: dict[int, int]  # p -> microseconds, perf_analyzer's index formula

    def get(self, p: int) -> int:
        return self.percentiles[p]


def percentile_index(p: float, n: int) -> int:
    return int(p / 100 * (n - 1) + 0.5)


def latency_stats(latencies_us: np.ndarray, extra_percentile: int | None = None) -> LatencyStats:
    values = np.sort(np.asarray(latencies_us, dtype=np.int64))
    n = len(values)
    wanted = sorted({*PERCENTILES, *([extra_percentile] if extra_percentile else [])})
    if n == 0:
        return LatencyStats(0, math.nan, math.nan, 0, 0, dict.fromkeys(wanted, 0))
    return LatencyStats(
        count=n,
        avg_us=float(values.mean()),
        std_us=float(values.std(ddof=1)) if n > 1 else math.inf,
        min_us=int(values[0]),
        max_us=int(values[-1]),
        percentiles={p: int(values[percentile_index(p, n)]) for p in wanted},
    )


@dataclass(frozen=True)
class ClientUsage:
    """What the load generator itself used: CPU per worker process (1.0 = one core busy)."""

    cpu_cores: float  # all workers together, in cores
    busiest_worker: float  # the most loaded worker, fraction of one core
    cpu_us_per_request: float
    machine_percent: float  # whole machine (server included when it runs here), 0-100

    @property
    def saturated(self) -> bool:
        return self.busiest_worker >= 0.9


@dataclass(frozen=True)
class Window:
    duration_s: float
    latencies_us: np.ndarray
    errors: int
    responses: int
    send_ns: int
    recv_ns: int
    delayed: int
    sequences_ended: int
    cpu_by_worker: tuple[float, ...]  # CPU seconds each worker used in the window
    error_samples: tuple[str, ...]
    machine_percent: float = 0.0
    server: ServerBreakdown | None = None

    @property
    def count(self) -> int:
        return len(self.latencies_us)

    def throughput(self, batch_size: int) -> float:
        return self.count * batch_size / self.duration_s if self.duration_s > 0 else 0.0


def window_from_parts(previous: list[WindowPart], current: list[WindowPart]) -> Window:
    """Combine the workers' parts; each worker's window runs from its previous flush to this one."""
    durations = [(c.flushed_ns - p.flushed_ns) / 1e9 for p, c in zip(previous, current, strict=True)]
    latencies = np.concatenate([np.frombuffer(c.latencies_us, dtype=np.int64) for c in current])
    samples: list[str] = []
    for part in current:
        samples.extend(s for s in part.error_samples if s not in samples)
    return Window(
        duration_s=sum(durations) / len(durations),
        latencies_us=latencies,
        errors=sum(c.errors for c in current),
        responses=sum(c.responses for c in current),
        send_ns=sum(c.send_ns for c in current),
        recv_ns=sum(c.recv_ns for c in current),
        delayed=sum(c.delayed for c in current),
        sequences_ended=sum(c.sequences_ended for c in current),
        cpu_by_worker=tuple(c.cpu_s - p.cpu_s for p, c in zip(previous, current, strict=True)),
        error_samples=tuple(samples[:3]),
    )


@dataclass(frozen=True)
class WindowFigures:
    """One measurement window's own figures: what a baseline comparison tests the noise of."""

    throughput: float
    count: int
    avg_us: float
    percentiles_us: dict[int, int]


def window_figures(window: Window, batch_size: int, percentile: int | None = None) -> WindowFigures:
    stats = latency_stats(window.latencies_us, percentile)
    return WindowFigures(window.throughput(batch_size), stats.count, stats.avg_us, stats.percentiles)


@dataclass(frozen=True)
class LevelResult:
    """One concurrency or request-rate level, measured over its last (stable) windows."""

    level: float  # concurrency, or request rate (0 for a custom-interval run)
    batch_size: int
    throughput: float  # inferences per second (requests x batch size)
    request_throughput: float
    response_throughput: float
    request_count: int
    error_count: int
    latency: LatencyStats
    stabilizing_latency_us: float  # average, or the --percentile value
    client_send_us: float
    client_recv_us: float
    server: ServerBreakdown | None
    client: ClientUsage
    delayed_requests: int
    sequences_completed: int
    stable: bool
    trials: int
    window_throughputs: tuple[float, ...] = ()
    window_latencies_us: tuple[float, ...] = ()
    error_samples: tuple[str, ...] = field(default_factory=tuple)
    windows: tuple[WindowFigures, ...] = ()  # every window measured at this level, in order
    result_windows: int = 0  # how many of the last windows the level's figures come from

    @property
    def tested_windows(self) -> tuple[WindowFigures, ...]:
        """The windows a baseline comparison tests: those the figures come from when the level settled,
        every window when it did not (their spread is the noise it ran under)."""
        if self.stable and self.result_windows:
            return self.windows[-self.result_windows :]
        return self.windows

    @property
    def error_rate(self) -> float:
        total = self.request_count + self.error_count
        return self.error_count / total if total else 0.0


def summarize(
    level: float,
    windows: list[Window],
    batch_size: int,
    percentile: int | None,
    server: ServerBreakdown | None,
    stable: bool,
    trials: int,
    all_windows: list[Window],
) -> LevelResult:
    """Merge ``windows`` (the last stability-window's worth) into the level's figures."""
    duration = sum(w.duration_s for w in windows)
    latencies = np.concatenate([w.latencies_us for w in windows]) if windows else np.array([], np.int64)
    stats = latency_stats(latencies, percentile)
    count = stats.count
    cpu = [sum(w.cpu_by_worker[i] for w in windows) for i in range(len(windows[0].cpu_by_worker))]
    machine = [w.machine_percent for w in windows]
    usage = ClientUsage(
        cpu_cores=sum(cpu) / duration if duration else 0.0,
        busiest_worker=max(cpu) / duration if duration and cpu else 0.0,
        cpu_us_per_request=sum(cpu) / count * 1e6 if count else 0.0,
        machine_percent=sum(machine) / len(machine) if machine else 0.0,
    )
    samples: list[str] = []
    for window in windows:
        samples.extend(s for s in window.error_samples if s not in samples)
    return LevelResult(
        level=level,
        batch_size=batch_size,
        throughput=count * batch_size / duration if duration else 0.0,
        request_throughput=count / duration if duration else 0.0,
        response_throughput=sum(w.responses for w in windows) / duration if duration else 0.0,
        request_count=count,
        error_count=sum(w.errors for w in windows),
        latency=stats,
        stabilizing_latency_us=float(stats.get(percentile)) if percentile else stats.avg_us,
        client_send_us=sum(w.send_ns for w in windows) / count / 1000 if count else 0.0,
        client_recv_us=sum(w.recv_ns for w in windows) / count / 1000 if count else 0.0,
        server=server,
        client=usage,
        delayed_requests=sum(w.delayed for w in windows),
        sequences_completed=sum(w.sequences_ended for w in windows),
        stable=stable,
        trials=trials,
        window_throughputs=tuple(w.throughput(batch_size) for w in all_windows),
        window_latencies_us=tuple(_stabilizing(w, percentile) for w in all_windows),
        error_samples=tuple(samples[:3]),
        windows=tuple(window_figures(w, batch_size, percentile) for w in all_windows),
        result_windows=len(windows),
    )


def _stabilizing(window: Window, percentile: int | None) -> float:
    stats = latency_stats(window.latencies_us, percentile)
    return float(stats.get(percentile)) if percentile else stats.avg_us
