"""Prometheus metrics on the metrics port, with Triton's names, types, labels and counting rules.

Names are checked on the raw text: ``prometheus_client``'s parser strips a ``_total`` suffix from
counter families and appends one to their samples, so it would hide the very renaming these tests
guard against. Values are read with it, by family name.
"""

from __future__ import annotations

import re
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, int_inputs, write_simple

FAMILIES = {
    "nv_inference_request_success": "counter",
    "nv_inference_request_failure": "counter",
    "nv_inference_count": "counter",
    "nv_inference_exec_count": "counter",
    "nv_inference_request_duration_us": "counter",
    "nv_inference_queue_duration_us": "counter",
    "nv_inference_compute_input_duration_us": "counter",
    "nv_inference_compute_infer_duration_us": "counter",
    "nv_inference_compute_output_duration_us": "counter",
    "nv_inference_pending_request_count": "gauge",
}
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
SIMPLE = {"model": "simple", "version": "1"}


def _scrape(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        return reply.read().decode()


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample by (family name, labels); the parser names counter samples ``*_total``."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(family.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def _has_sample(text: str, name: str, **labels: str) -> bool:
    return (name, frozenset({**SIMPLE, **labels}.items())) in _samples(text)


def _value(text: str, name: str, **labels: str) -> float:
    key = (name, frozenset({**SIMPLE, **labels}.items()))
    samples = _samples(text)
    assert key in samples, f"no sample {name}{dict(key[1])} in:\n{text}"
    return samples[key]


def test_the_endpoint_serves_only_metrics(server: ServerProcess) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/nope", timeout=10)
    assert caught.value.code == 404


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_has_tritons_name_type_and_labels(server: ServerProcess, family: str) -> None:
    text = _scrape(server)
    lines = text.splitlines()
    assert f"# TYPE {family} {FAMILIES[family]}" in lines
    assert any(line.startswith(f"# HELP {family} ") for line in lines)
    expected_labels = {"model", "version", "reason"} if family.endswith("_failure") else {"model", "version"}
    for line in lines:
        if line.startswith(family + "{"):
            assert set(re.findall(r'(\w+)="', line)) == expected_labels, line
    labels = {"reason": "REJECTED"} if family.endswith("_failure") else {}
    assert _has_sample(text, family, **labels), f"no sample {family}{labels} for the model in:\n{text}"


def test_no_name_has_a_suffix_triton_does_not_use(server: ServerProcess) -> None:
    text = _scrape(server)
    # Triton's counters have no suffix; dashboards match the names exactly.
    assert not re.findall(r"^\w+_total[{ ]", text, re.M)
    assert "_created" not in text


def test_failures_are_counted_by_reason(server: ServerProcess) -> None:
    text = _scrape(server)
    missing = [r for r in FAILURE_REASONS if not _has_sample(text, "nv_inference_request_failure", reason=r)]
    assert missing == []


def test_the_idle_server_has_no_pending_requests(server: ServerProcess) -> None:
    assert _value(_scrape(server), "nv_inference_pending_request_count") == 0


def test_gpu_metrics_are_absent_without_a_gpu(server: ServerProcess) -> None:
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("this machine has a GPU: nv_gpu_* may rightly be there")
    text = _scrape(server)
    assert "nv_gpu_utilization" not in text
    assert "nv_gpu_memory_used_bytes" not in text


def test_cpu_metrics_report_utilization_and_memory(server: ServerProcess) -> None:
    text = _scrape(server)
    assert "# TYPE nv_cpu_utilization gauge" in text
    values = {name: float(value) for name, value in re.findall(r"^(nv_cpu_\w+) (\S+)$", text, re.M)}
    assert 0.0 <= values["nv_cpu_utilization"] <= 1.0
    assert 0 < values["nv_cpu_memory_used_bytes"] < values["nv_cpu_memory_total_bytes"]


def test_allow_cpu_metrics_false_leaves_them_out(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    quiet = ServerProcess([repo], ["--allow-cpu-metrics=false"]).start(tmp_path)
    try:
        text = _scrape(quiet)
        assert "nv_cpu_" not in text and "nv_inference_count" in text
    finally:
        quiet.stop()


def _simple_inputs(batch: int) -> list[httpclient.InferInput]:
    first, second = int_inputs(batch)
    inputs = [
        httpclient.InferInput("INPUT0", [batch, 16], "INT32"),
        httpclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(first)
    inputs[1].set_data_from_numpy(second)
    return inputs


def test_counts_follow_requests_batches_and_failures(server: ServerProcess) -> None:
    requests = 5
    client = httpclient.InferenceServerClient(server.http_url)
    before = _scrape(server)
    inputs = _simple_inputs(batch=2)
    for _ in range(requests):
        result = client.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), sum(int_inputs(2)))
    wrong = httpclient.InferInput("INPUT0", [2, 16], "FP32")
    wrong.set_data_from_numpy(int_inputs(2)[0].astype(np.float32))
    with pytest.raises(InferenceServerException, match="expects 'INT32'"):
        client.infer("simple", [wrong, inputs[1]])
    after = _scrape(server)

    def delta(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert delta("nv_inference_request_success") == requests  # a request counts 1 whatever its batch
    assert delta("nv_inference_count") == 2 * requests  # a batch of 2 counts 2
    assert delta("nv_inference_exec_count") == requests  # no dynamic batcher: one execution each
    assert delta("nv_inference_request_failure", reason="REJECTED") == 1
    for reason in ("CANCELED", "BACKEND", "OTHER"):
        assert delta("nv_inference_request_failure", reason=reason) == 0
    assert delta("nv_inference_request_duration_us") > 0
    assert delta("nv_inference_compute_infer_duration_us") > 0
    for name in (
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_output_duration_us",
    ):
        assert delta(name) >= 0  # counters never go back (a sub-microsecond total may still round to 0)
    assert _value(after, "nv_inference_pending_request_count") == 0


def test_a_failed_request_adds_no_duration_as_in_triton(server: ServerProcess) -> None:
    """Triton adds to nv_inference_request_duration_us for successes only (infer_stats.cc)."""
    client = httpclient.InferenceServerClient(server.http_url)
    wrong = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    wrong.set_data_from_numpy(int_inputs(1)[0].astype(np.float32))
    before = _scrape(server)
    with pytest.raises(InferenceServerException, match="expects 'INT32'"):
        client.infer("simple", [wrong, _simple_inputs(batch=1)[1]])
    after = _scrape(server)
    failed = _value(after, "nv_inference_request_failure", reason="REJECTED")
    assert failed == _value(before, "nv_inference_request_failure", reason="REJECTED") + 1
    assert _value(after, "nv_inference_request_duration_us") == _value(
        before, "nv_inference_request_duration_us"
    )
