"""Open-loop arrival times: constant rate, Poisson, or the intervals of a ``--request-intervals`` file.

A worker process ``w`` of ``W`` sends every W-th arrival of the global schedule (constant, file), or
an independent Poisson stream of rate/W (the sum of Poisson streams is a Poisson stream)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from trt.perf.errors import OptionError
from trt.perf.options import Distribution


@dataclass(frozen=True)
class ScheduleSpec:
    rate: float  # total requests per second over all workers (0 with intervals)
    distribution: Distribution = Distribution.CONSTANT
    intervals_us: tuple[int, ...] = ()
    worker_index: int = 0
    worker_count: int = 1
    seed: int = 0


def arrivals(spec: ScheduleSpec) -> Iterator[float]:
    """Send times of this worker, in seconds from the start of the level."""
    w, count = spec.worker_index, spec.worker_count
    if spec.intervals_us:
        total, index = 0.0, 0
        while True:
            for interval in spec.intervals_us:
                total += interval / 1e6
                if index % count == w:
                    yield total
                index += 1
    elif spec.distribution is Distribution.POISSON:
        rng = random.Random(spec.seed * 1000 + w)
        share, at = spec.rate / count, 0.0
        while True:
            at += rng.expovariate(share)
            yield at
    else:
        index = w
        while True:
            yield index / spec.rate
            index += count


def read_intervals(path: Path) -> tuple[int, ...]:
    """perf_analyzer's ``--request-intervals`` file: one interval in microseconds per line."""
    try:
        lines = path.read_text().split()
    except OSError as error:
        raise OptionError(f"--request-intervals {path}: {error}") from error
    try:
        values = tuple(int(float(line)) for line in lines)
    except ValueError:
        raise OptionError(
            f"--request-intervals {path}: expected one number of microseconds per line"
        ) from None
    if not values or any(v < 0 for v in values) or sum(values) == 0:
        raise OptionError(f"--request-intervals {path}: needs at least one positive interval")
    return values
