"""Custom metrics: ``pb_utils.MetricFamily`` and its labelled series (``Metric``), held by the server
and given back when the model lets go of them (or its process exits)."""

from __future__ import annotations

import weakref

import trt_pb_runtime
from trt_pb_errors import TritonModelException
from trt_pb_runtime import release as _release

_LIFETIME_ERROR = "Invalid metric operation as the corresponding 'MetricFamily' has been deleted."


class MetricFamily:
    """A family of metrics the model reports on the server's metrics endpoint."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        if kind not in (MetricFamily.COUNTER, MetricFamily.GAUGE, MetricFamily.HISTOGRAM):
            raise TritonModelException(f"unknown metric kind {kind!r}")
        self._kind = kind
        self._metrics: weakref.WeakSet[Metric] = weakref.WeakSet()
        self._handle = 0  # set once the server has it: a failed constructor must release nothing
        self._handle = trt_pb_runtime.current.call("metric_family", name, description, kind)

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:
        handle = trt_pb_runtime.current.call("metric_series", self._handle, labels, buckets)
        metric = Metric._held(handle, self._kind)
        self._metrics.add(metric)
        return metric

    def __del__(self) -> None:
        if self._handle:
            for metric in list(self._metrics):
                metric._release()
            _release(("metric", "release_family", self._handle, 0.0))
            self._handle = 0


class Metric:
    """One labelled series of a ``MetricFamily``; made by ``MetricFamily.Metric``."""

    _handle: int  # 0 once released
    _kind: int

    def __init__(self) -> None:
        raise TritonModelException("create metrics with MetricFamily.Metric(labels=..., buckets=...)")

    @classmethod
    def _held(cls, handle: int, kind: int) -> Metric:
        metric = cls.__new__(cls)
        metric._handle = handle
        metric._kind = kind
        return metric

    def increment(self, value: float) -> None:
        self._check("increment", MetricFamily.COUNTER, MetricFamily.GAUGE)
        if self._kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("Failed to increment metric value: a counter cannot decrease")
        trt_pb_runtime.current.metric_update("increment", self._handle, float(value))

    def set(self, value: float) -> None:
        self._check("set", MetricFamily.GAUGE)
        trt_pb_runtime.current.metric_update("set", self._handle, float(value))

    def observe(self, value: float) -> None:
        self._check("observe", MetricFamily.HISTOGRAM)
        trt_pb_runtime.current.metric_update("observe", self._handle, float(value))

    def value(self) -> float:
        self._check("value", MetricFamily.COUNTER, MetricFamily.GAUGE)
        return float(trt_pb_runtime.current.call("metric_value", self._handle))

    def _check(self, operation: str, *kinds: int) -> None:
        if not self._handle:
            raise TritonModelException(_LIFETIME_ERROR)
        if self._kind not in kinds:
            kind = ("counter", "gauge", "histogram")[self._kind]
            raise TritonModelException(f"a {kind} metric does not support {operation}()")

    def _release(self) -> None:
        if self._handle:
            _release(("metric", "release_series", self._handle, 0.0))
            self._handle = 0

    def __del__(self) -> None:
        self._release()
