"""Custom metrics from Python models (``pb_utils.MetricFamily``) on the metrics endpoint, as Triton."""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess
from trt.server.core.errors import InvalidArgument
from trt.server.core.extensions.custom_metrics import CustomMetricsRegistry, MetricKind

METERED = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils

Family = pb_utils.MetricFamily


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "route": "main"}
        self.seen_family = Family(name="metered_requests", description="Requests seen", kind=Family.COUNTER)
        self.seen = self.seen_family.Metric(labels=labels)
        self.last_family = Family(name="metered_last_value", description="Last value", kind=Family.GAUGE)
        self.last = self.last_family.Metric(labels=labels)
        self.values_family = Family(name="metered_values", description="Values seen", kind=Family.HISTOGRAM)
        self.values = self.values_family.Metric(labels=labels, buckets=[1.0, 2.5, 10.0])
        refusals = [
            lambda: self.seen.increment(-1),
            lambda: self.seen.set(3),
            lambda: self.last.observe(1),
            lambda: self.values.value(),
            lambda: self.values.increment(1),
            lambda: self.values_family.Metric(labels=labels),
            lambda: self.values_family.Metric(labels={}, buckets=[2.0, 1.0]),
            lambda: Family(name="metered_requests", description="Requests seen", kind=Family.GAUGE),
            lambda: Family(name="not a name", description="", kind=Family.GAUGE),
        ]
        self.refused = 0
        for attempt in refusals:
            try:
                attempt()
            except pb_utils.TritonModelException:
                self.refused += 1

    def execute(self, requests):
        responses = []
        for request in requests:
            value = float(pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()[0])
            self.seen.increment(1)
            self.values.observe(value)
            if value < 0 and self.last is not None:  # let the gauge go: its family leaves /metrics
                self.last = self.last_family = None
            elif self.last is not None:
                self.last.set(value)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SEEN", np.array([self.seen.value()], np.float64)),
                pb_utils.Tensor("REFUSED", np.array([self.refused], np.int32)),
                pb_utils.Tensor("PID", np.array([os.getpid()], np.int64)),
            ]))
        return responses
"""

METERED_CONFIG = """
name: "metered"
backend: "python"
input [ { name: "VALUE" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [
  { name: "SEEN" data_type: TYPE_FP64 dims: [ 1 ] },
  { name: "REFUSED" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""

LABELS = 'model="metered",route="main"'


def _metrics(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def _infer(client: httpclient.InferenceServerClient, value: float) -> dict[str, float]:
    tensor = httpclient.InferInput("VALUE", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], np.float32))
    result = client.infer("metered", [tensor])
    return {name: float(result.as_numpy(name)[0]) for name in ("SEEN", "REFUSED", "PID")}


def test_a_model_s_counter_gauge_and_histogram_reach_the_metrics_endpoint(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "metered" / "1").mkdir(parents=True)
    (repo / "metered" / "1" / "model.py").write_text(METERED)
    (repo / "metered" / "config.pbtxt").write_text(METERED_CONFIG)
    server = ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=metered"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        # Before any request: every series is there at zero, the histogram with all its buckets.
        text = _metrics(server)
        assert "# HELP metered_requests Requests seen\n# TYPE metered_requests counter\n" in text
        assert f"metered_requests{{{LABELS}}} 0\n" in text
        assert f'metered_values_bucket{{{LABELS},le="+Inf"}} 0\n' in text

        answers = [_infer(client, value) for value in (0.5, 2.0, 6.0, 20.0)]
        # Triton's refusals, each raised in the model as TritonModelException.
        assert {a["REFUSED"] for a in answers} == {9}
        # Both instances (two processes) count into one series, and value() reads it back.
        assert [a["SEEN"] for a in answers] == [1, 2, 3, 4]
        text = _metrics(server)
        assert f"metered_requests{{{LABELS}}} 4\n" in text
        assert f"metered_last_value{{{LABELS}}} 20\n" in text
        assert "# TYPE metered_values histogram\n" in text
        for bound, count in (("1", 1), ("2.5", 2), ("10", 3), ("+Inf", 4)):
            assert f'metered_values_bucket{{{LABELS},le="{bound}"}} {count}\n' in text
        assert f"metered_values_sum{{{LABELS}}} 28.5\n" in text
        assert f"metered_values_count{{{LABELS}}} 4\n" in text

        # A process that dies gives back what it held; its replacement takes the same series again,
        # which the other instance kept alive, so the count goes on.
        pid = int(answers[0]["PID"])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if _infer(client, 1.0)["PID"] != pid:
                    break
            except InferenceServerException:  # sent before the server saw the process go
                time.sleep(0.1)
        seen = _infer(client, 1.0)["SEEN"]
        assert seen > 4
        assert f"metered_requests{{{LABELS}}} {int(seen)}\n" in _metrics(server)

        # A model that lets go of a metric and its family: the family leaves the exposition once
        # every instance has let go.
        while "metered_last_value" in _metrics(server) and time.monotonic() < deadline:
            _infer(client, -1.0)
        assert "metered_last_value" not in _metrics(server)

        client.unload_model("metered")
        deadline = time.monotonic() + 30
        while "metered_requests" in _metrics(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "metered_" not in _metrics(server)
    finally:
        server.stop()


def test_one_family_per_name_and_one_series_per_label_set() -> None:
    registry = CustomMetricsRegistry()
    first = registry.new_family("jobs", "first description", MetricKind.COUNTER)
    second = registry.new_family("jobs", "second description", MetricKind.COUNTER)
    with pytest.raises(InvalidArgument, match="already exists as a counter"):
        registry.new_family("jobs", "", MetricKind.GAUGE)
    a = registry.new_series(first, {"queue": "x"}, None)
    b = registry.new_series(second, {"queue": "x"}, None)
    registry.increment(a, 2.5)
    assert registry.value(b) == 2.5
    with pytest.raises(InvalidArgument, match="negative"):
        registry.increment(a, -1)
    [family] = registry.snapshot()
    assert family.description == "first description"
    registry.release_series(a)
    assert registry.value(b) == 2.5  # still held through the other handle
    registry.release_series(b)
    assert registry.snapshot() == []  # a family without series is not exposed


def test_histogram_buckets_are_required_ascending_and_may_be_empty() -> None:
    registry = CustomMetricsRegistry()
    family = registry.new_family("latency", "", MetricKind.HISTOGRAM)
    for bad in (None, [2.0, 1.0], [1.0, 1.0]):
        with pytest.raises(InvalidArgument, match="buckets"):
            registry.new_series(family, {}, bad)
    only_inf = registry.new_series(family, {"kind": "none"}, [])
    registry.observe(only_inf, 7.0)
    [snapshot] = registry.snapshot()
    assert snapshot.series[0].cumulative_counts == (1,)
    assert snapshot.series[0].total == 7.0


def test_an_owner_gives_back_everything_its_process_held() -> None:
    registry = CustomMetricsRegistry()
    survivor, leaver = registry.owner(), registry.owner()
    for owner in (survivor, leaver):
        family = owner.new_family("shared", "", MetricKind.GAUGE)
        owner.new_series(family, {"a": "1"}, None)
    only_leaver = leaver.new_series(leaver.new_family("solo", "", MetricKind.GAUGE), {}, None)
    registry.set(only_leaver, 3)
    leaver.release_all()
    assert [family.name for family in registry.snapshot()] == ["shared"]
    survivor.release_all()
    assert registry.snapshot() == []
