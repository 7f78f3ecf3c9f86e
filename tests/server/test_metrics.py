"""Prometheus metrics on the metrics port, with Triton's names, labels and counting rules."""

from __future__ import annotations

import re
import shutil
import urllib.request

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, int_inputs

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


def _scrape(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics") as reply:
        assert reply.headers["Content-Type"].startswith("text/plain")
        return reply.read().decode()


def _value(text: str, family: str, **labels: str) -> float:
    for line in text.splitlines():
        if not line.startswith(family + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{family} {labels} not in metrics")


def test_families_have_tritons_names_types_and_labels(server: ServerProcess) -> None:
    text = _scrape(server)
    for family, kind in FAMILIES.items():
        assert f"# TYPE {family} {kind}\n" in text
        assert _value(text, family, model="simple", version="1") >= 0
    assert "_total" not in text  # Triton's names carry no suffix; dashboards match them exactly
    assert _value(text, "nv_inference_request_failure", model="simple", version="1", reason="REJECTED") >= 0
    if shutil.which("nvidia-smi") is None:
        assert "nv_gpu_utilization" not in text


def test_counts_follow_requests_batches_and_failures(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before = _scrape(server)
    first, second = int_inputs(batch=2)
    inputs = [
        httpclient.InferInput("INPUT0", [2, 16], "INT32"),
        httpclient.InferInput("INPUT1", [2, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(first)
    inputs[1].set_data_from_numpy(second)
    for _ in range(5):
        client.infer("simple", inputs)
    wrong = httpclient.InferInput("INPUT0", [2, 16], "FP32")
    wrong.set_data_from_numpy(first.astype(np.float32))
    try:
        client.infer("simple", [wrong, inputs[1]])
    except InferenceServerException:
        pass
    after = _scrape(server)

    def delta(family: str, **labels: str) -> float:
        labels = {"model": "simple", "version": "1", **labels}
        return _value(after, family, **labels) - _value(before, family, **labels)

    assert delta("nv_inference_request_success") == 5
    assert delta("nv_inference_count") == 10  # a batch of 2 counts 2
    assert delta("nv_inference_exec_count") == 5
    assert delta("nv_inference_request_failure", reason="REJECTED") == 1
    assert delta("nv_inference_request_duration_us") > 0
    assert delta("nv_inference_compute_infer_duration_us") >= 0
