"""Triton's optional latency metrics (``--metrics-config``): summaries of each request's durations
over the last minute, the time-to-first-response histogram with a model's own buckets, and the
duration counters turned off; read from a real server with prometheus_client's parser."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from tests.support import ROOT, ServerProcess, collect_stream, write_python_model
from trt.cli.flags import parse_metrics_config
from trt.server.core.extensions.latency_distributions import LatencyMetricsSettings

# Sleeps for the milliseconds it is given, so every duration below is known to within the overhead.
SLEEPER = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            ms = pb_utils.get_input_tensor_by_name(request, "MS").as_numpy()
            time.sleep(float(ms[0]) / 1000)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", ms)]))
        return responses
"""
SLEEPER_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "MS" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
model_metrics {
  metric_control [ {
    metric_identifier { family: "nv_inference_first_response_histogram_ms" }
    histogram_options { buckets: [ 50, 1000 ] }
  } ]
}
"""
# Decoupled: its first response comes after MS milliseconds, its last one MS later again.
STREAMER = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            ms = pb_utils.get_input_tensor_by_name(request, "MS").as_numpy()
            sender = request.get_response_sender()
            for _ in range(2):
                time.sleep(float(ms[0]) / 1000)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", ms)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
STREAMER_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "MS" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
SUMMARIES = (
    "nv_inference_request_summary_us",
    "nv_inference_queue_summary_us",
    "nv_inference_compute_input_summary_us",
    "nv_inference_compute_infer_summary_us",
    "nv_inference_compute_output_summary_us",
)
FAST_MS, SLOW_MS = 5.0, 150.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("latency_repo")
    write_python_model(repo, "sleeper", SLEEPER, SLEEPER_CONFIG)
    write_python_model(repo, "streamer", STREAMER, STREAMER_CONFIG)
    flags = [
        "--metrics-config=summary_latencies=true",
        "--metrics-config", "histogram_latencies=true",
        "--metrics-config=counter_latencies=false",
        "--metrics-config=summary_quantiles=0.5:0.05,0.9:0.01",
    ]  # fmt: skip
    process = ServerProcess([repo], flags).start(tmp_path_factory.mktemp("latency_logs"))
    yield process
    assert process.alive(), process.log()
    process.stop()


def _scrape(server: ServerProcess) -> tuple[str, dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return text, samples


def _of(model: str, **labels: str) -> frozenset[tuple[str, str]]:
    return frozenset({"model": model, "version": "1", **labels}.items())


def _sleep(client: httpclient.InferenceServerClient, ms: float) -> None:
    tensor = httpclient.InferInput("MS", [1], "FP32")
    tensor.set_data_from_numpy(np.array([ms], dtype=np.float32))
    client.infer("sleeper", [tensor])


def test_summaries_and_the_histogram_follow_the_requests_durations(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    for _ in range(6):
        _sleep(client, FAST_MS)
    for _ in range(4):
        _sleep(client, SLOW_MS)
    text, samples = _scrape(server)
    sleeper = _of("sleeper")
    for name in SUMMARIES:
        assert f"# TYPE {name} summary" in text
        assert samples[(f"{name}_count", sleeper)] == 10
    infer = "nv_inference_compute_infer_summary_us"
    # 6 of 10 took 5 ms: the median is one of them; 0.9 is a 150 ms one (a bin is within 1%).
    median = samples[(infer, _of("sleeper", quantile="0.5"))]
    ninetieth = samples[(infer, _of("sleeper", quantile="0.9"))]
    assert FAST_MS * 1000 * 0.99 <= median < SLOW_MS * 1000 * 0.5
    assert SLOW_MS * 1000 * 0.99 <= ninetieth < SLOW_MS * 1000 * 1.5
    assert samples[(f"{infer}_sum", sleeper)] >= (6 * FAST_MS + 4 * SLOW_MS) * 1000
    request_median = samples[("nv_inference_request_summary_us", _of("sleeper", quantile="0.5"))]
    assert request_median >= median * 0.99  # a request's time holds its compute time
    # Only the quantiles asked for.
    assert not any(("quantile", "0.99") in labels for _, labels in samples)
    # The model's own buckets: the fast ones under 50 ms, every one under 1 s.
    histogram = "nv_inference_first_response_histogram_ms"
    assert f"# TYPE {histogram} histogram" in text
    assert samples[(f"{histogram}_bucket", _of("sleeper", le="50"))] == 6
    assert samples[(f"{histogram}_bucket", _of("sleeper", le="1000"))] == 10
    assert samples[(f"{histogram}_bucket", _of("sleeper", le="+Inf"))] == 10
    assert samples[(f"{histogram}_count", sleeper)] == 10
    # counter_latencies=false: the duration counters are gone, the counts stay.
    assert "nv_inference_request_duration_us" not in text
    assert "nv_inference_compute_infer_duration_us" not in text
    assert samples[("nv_inference_request_success_total", sleeper)] == 10


def test_a_decoupled_request_is_timed_at_its_first_answer_and_counted_with_its_execution(
    server: ServerProcess,
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    try:
        tensor = grpcclient.InferInput("MS", [1], "FP32")
        tensor.set_data_from_numpy(np.array([600.0], dtype=np.float32))
        client.async_stream_infer("streamer", [tensor])
        for _ in range(2):
            _, error = received.get(timeout=30)
            assert error is None
    finally:
        client.stop_stream()
    # The request is counted once its execute() has returned, which may be just after the last answer.
    statistics = httpclient.InferenceServerClient(server.http_url)
    deadline = time.monotonic() + 10
    while True:
        stats = statistics.get_inference_statistics("streamer")["model_stats"][0]["inference_stats"]
        if stats["success"]["count"] == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    _, samples = _scrape(server)
    histogram = "nv_inference_first_response_histogram_ms"
    # Triton's default buckets: the first answer came after ~600 ms (<= 2000), the last after ~1.2 s.
    assert samples[(f"{histogram}_bucket", _of("streamer", le="500"))] == 0
    assert samples[(f"{histogram}_bucket", _of("streamer", le="2000"))] == 1
    assert samples[(f"{histogram}_sum", _of("streamer"))] < 1200
    # A decoupled request's queue and compute times are its execution's, as for any other model:
    # execute() sent both answers, so it computed for ~1.2 s.
    assert stats["success"]["count"] == 1 and stats["queue"]["count"] == 1
    assert stats["compute_infer"]["ns"] >= 1.1e9
    assert samples[("nv_inference_compute_infer_summary_us_sum", _of("streamer"))] >= 1.1e6


def test_an_empty_window_reports_nan_as_prometheus_does(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "sleeper", SLEEPER, SLEEPER_CONFIG)
    process = ServerProcess([repo], ["--metrics-config=summary_latencies=true"]).start(tmp_path)
    try:
        _, samples = _scrape(process)
        assert math.isnan(samples[("nv_inference_queue_summary_us", _of("sleeper", quantile="0.999"))])
        assert samples[("nv_inference_queue_summary_us_count", _of("sleeper"))] == 0
        # Without histogram_latencies there is no histogram; the counters stay by default.
        assert not any(name.startswith("nv_inference_first_response") for name, _ in samples)
        assert ("nv_inference_request_duration_us_total", _of("sleeper")) in samples
    finally:
        process.stop()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("summary_latencies", "--metrics-config option format is <setting>=<value>. Got summary_latencies"),
        ("x,summary_latencies=true", "--metrics-config option format is"),
        ("summary_latencies=", "--metrics-config option format is"),
        ("summary_latencies=yes", "summary_latencies takes true or false, got 'yes'"),
        ("summary_quantiles=0.5:0.05,1.5:0.01", "both between 0 and 1, got '1.5:0.01'"),
        ("summary_quantiles=0.5", "got '0.5'"),
    ],
)
def test_a_malformed_setting_is_refused_with_its_reason(setting: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_metrics_config([setting])


def test_settings_parse_as_triton_reads_them(caplog: pytest.LogCaptureFixture) -> None:
    settings = parse_metrics_config(
        ["summary_latencies=true", "summary_quantiles=0.5:0.05, 0.99:0.001", "counter_latencies=false",
         "some_future_setting=1"]
    )  # fmt: skip
    assert settings == LatencyMetricsSettings(
        counters=False, summaries=True, quantiles=((0.5, 0.05), (0.99, 0.001)), histograms=False
    )
    assert "unknown setting 'some_future_setting' ignored" in caplog.text
    assert parse_metrics_config([]) == LatencyMetricsSettings()


def test_the_server_stops_at_a_malformed_setting_before_serving() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trt", "serve", "--metrics-config=histogram_latencies=on"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 2
    assert "histogram_latencies takes true or false, got 'on'" in result.stderr
