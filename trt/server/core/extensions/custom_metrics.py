"""Metrics that models define themselves (``pb_utils.MetricFamily`` in a Python model).

Triton's rules, which dashboards and model code rely on:

- a family is known by its name; asking again for the same name and kind gives the same family
  (the first description stays), the same name with another kind is refused;
- a metric is known by its family and labels; asking again gives the same series;
- counters only go up, gauges go anywhere, histograms take observations into fixed buckets;
- a series lives while something holds it: when the last holder lets go (the model deletes it,
  or its process exits) it leaves the exposition, and a family goes with its last holder.

Every holder gets its own handle, so references are counted per handle; an ``Owner`` (one per model
process) gives back whatever handles its process still held when it went away. Thread-safe: a
model's ``initialize`` runs on a loader thread while the event loop serves ``/metrics``.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from trt.server.core.errors import InvalidArgument

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

Labels = tuple[tuple[str, str], ...]  # sorted by name


class MetricKind(IntEnum):
    """The values of ``pb_utils.MetricFamily.COUNTER/GAUGE/HISTOGRAM``."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


@dataclass
class Series:
    """One labelled series of a family, with its value (or histogram counts)."""

    labels: Labels
    buckets: tuple[float, ...] = ()  # upper bounds, ascending; histograms only
    value: float = 0.0
    bucket_counts: list[int] = field(default_factory=list)  # per bucket, not cumulative
    count: int = 0  # histograms: observations
    total: float = 0.0  # histograms: their sum
    holders: int = 0


@dataclass
class Family:
    name: str
    description: str
    kind: MetricKind
    series: dict[Labels, Series] = field(default_factory=dict)
    holders: int = 0


@dataclass(frozen=True)
class SeriesSnapshot:
    labels: Labels
    value: float
    buckets: tuple[float, ...]
    cumulative_counts: tuple[int, ...]  # one per bucket, then +Inf
    count: int
    total: float


@dataclass(frozen=True)
class FamilySnapshot:
    name: str
    description: str
    kind: MetricKind
    series: tuple[SeriesSnapshot, ...]


class CustomMetricsRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, Family] = {}
        self._family_handles: dict[int, Family] = {}
        self._series_handles: dict[int, tuple[Family, Series]] = {}
        self._next_handle = 1

    def owner(self) -> Owner:
        return Owner(self)

    # -- holding and letting go ----------------------------------------------------------------

    def new_family(self, name: str, description: str, kind: int) -> int:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidArgument(f"invalid metric family name {name!r}: use letters, digits, '_' and ':'")
        try:
            metric_kind = MetricKind(kind)
        except ValueError:
            raise InvalidArgument(f"unknown metric kind {kind!r}: use COUNTER, GAUGE or HISTOGRAM") from None
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = Family(name, str(description), metric_kind)
            elif family.kind != metric_kind:
                raise InvalidArgument(
                    f"metric family '{name}' already exists as a {family.kind.name.lower()}, "
                    f"not a {metric_kind.name.lower()}"
                )
            family.holders += 1
            self._family_handles[self._next_handle] = family
            return self._take_handle()

    def new_series(
        self, family_handle: int, labels: Mapping[str, str] | None, buckets: Sequence[float] | None
    ) -> int:
        label_items = _labels(labels)
        with self._lock:
            family = self._family_handles.get(family_handle)
            if family is None:
                raise InvalidArgument("the metric family was deleted")
            bounds: tuple[float, ...] = ()
            if family.kind is MetricKind.HISTOGRAM:
                bounds = _bucket_bounds(buckets)
            series = family.series.get(label_items)
            if series is None:
                series = Series(label_items, bounds, bucket_counts=[0] * len(bounds))
                family.series[label_items] = series
            series.holders += 1
            self._series_handles[self._next_handle] = (family, series)
            return self._take_handle()

    def release_family(self, handle: int) -> None:
        with self._lock:
            family = self._family_handles.pop(handle, None)
            if family is not None:
                family.holders -= 1
                if family.holders == 0 and self._families.get(family.name) is family:
                    del self._families[family.name]

    def release_series(self, handle: int) -> None:
        with self._lock:
            held = self._series_handles.pop(handle, None)
            if held is not None:
                family, series = held
                series.holders -= 1
                if series.holders == 0 and family.series.get(series.labels) is series:
                    del family.series[series.labels]

    # -- values --------------------------------------------------------------------------------
    # The model process checks kinds and signs before it sends an update (it answers those errors
    # without a round trip); these check again, since a wrong update must not corrupt a series.

    def increment(self, handle: int, amount: float) -> None:
        with self._lock:
            family, series = self._series(handle)
            if family.kind is MetricKind.HISTOGRAM:
                raise InvalidArgument("a histogram cannot be incremented: use observe()")
            if family.kind is MetricKind.COUNTER and amount < 0:
                raise InvalidArgument("a counter cannot be incremented by a negative value")
            series.value += amount

    def set(self, handle: int, value: float) -> None:
        with self._lock:
            family, series = self._series(handle)
            if family.kind is not MetricKind.GAUGE:
                raise InvalidArgument(f"a {family.kind.name.lower()} cannot be set: only a gauge can")
            series.value = value

    def observe(self, handle: int, value: float) -> None:
        with self._lock:
            family, series = self._series(handle)
            if family.kind is not MetricKind.HISTOGRAM:
                raise InvalidArgument(f"a {family.kind.name.lower()} cannot observe: only a histogram can")
            for index, bound in enumerate(series.buckets):
                if value <= bound:
                    series.bucket_counts[index] += 1
                    break
            series.count += 1
            series.total += value

    def value(self, handle: int) -> float:
        with self._lock:
            family, series = self._series(handle)
            if family.kind is MetricKind.HISTOGRAM:
                raise InvalidArgument("a histogram has no single value")
            return series.value

    def snapshot(self) -> list[FamilySnapshot]:
        """The families that hold at least one series, in the order they were created."""
        with self._lock:
            return [
                FamilySnapshot(
                    family.name,
                    family.description,
                    family.kind,
                    tuple(_series_snapshot(s) for s in family.series.values()),
                )
                for family in self._families.values()
                if family.series
            ]

    # -- internals -----------------------------------------------------------------------------

    def _take_handle(self) -> int:
        handle = self._next_handle
        self._next_handle += 1
        return handle

    def _series(self, handle: int) -> tuple[Family, Series]:
        held = self._series_handles.get(handle)
        if held is None:
            raise InvalidArgument("the metric was deleted")
        return held


class Owner:
    """The handles one model process holds, given back together when it goes away."""

    def __init__(self, registry: CustomMetricsRegistry) -> None:
        self.registry = registry
        self._families: set[int] = set()
        self._series: set[int] = set()

    def new_family(self, name: str, description: str, kind: int) -> int:
        handle = self.registry.new_family(name, description, kind)
        self._families.add(handle)
        return handle

    def new_series(
        self, family: int, labels: Mapping[str, str] | None, buckets: Sequence[float] | None
    ) -> int:
        if family not in self._families:
            raise InvalidArgument("the metric family was deleted")
        handle = self.registry.new_series(family, labels, buckets)
        self._series.add(handle)
        return handle

    def release_family(self, handle: int) -> None:
        if handle in self._families:
            self._families.discard(handle)
            self.registry.release_family(handle)

    def release_series(self, handle: int) -> None:
        if handle in self._series:
            self._series.discard(handle)
            self.registry.release_series(handle)

    def release_all(self) -> None:
        for handle in list(self._series):
            self.release_series(handle)
        for handle in list(self._families):
            self.release_family(handle)


def _labels(labels: Mapping[str, str] | None) -> Labels:
    if labels is None:
        return ()
    if not isinstance(labels, Mapping):
        raise InvalidArgument("metric labels must be a dict of strings")
    for name, value in labels.items():
        if not isinstance(name, str) or not _LABEL.fullmatch(name) or name.startswith("__"):
            raise InvalidArgument(f"invalid metric label name {name!r}")
        if name == "le":
            raise InvalidArgument("'le' is reserved for histogram buckets")
        if not isinstance(value, str):
            raise InvalidArgument(f"metric label '{name}' must be a string, not {type(value).__name__}")
    return tuple(sorted(labels.items()))


def _bucket_bounds(buckets: Sequence[float] | None) -> tuple[float, ...]:
    if buckets is None:
        raise InvalidArgument("a histogram metric needs buckets (a list of ascending upper bounds)")
    try:
        bounds = tuple(float(b) for b in buckets)
    except (TypeError, ValueError):
        raise InvalidArgument("histogram buckets must be numbers") from None
    if any(math.isnan(b) for b in bounds) or any(a >= b for a, b in itertools.pairwise(bounds)):
        raise InvalidArgument(f"histogram buckets must be strictly ascending, got {list(buckets)}")
    return bounds


def _series_snapshot(series: Series) -> SeriesSnapshot:
    cumulative, running = [], 0
    for count in series.bucket_counts:
        running += count
        cumulative.append(running)
    cumulative.append(series.count)
    return SeriesSnapshot(
        series.labels, series.value, series.buckets, tuple(cumulative), series.count, series.total
    )
