"""Canary routing (an extension Triton lacks): requests naming no version split by ``canary_weights``,
visible per version in statistics and metrics, changed by a reload without a restart."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import SIMPLE_CONFIG, ServerProcess, collect_stream, simple_inputs, write_simple

CANARY = (
    SIMPLE_CONFIG
    + """
version_policy: { all { } }
parameters { key: "canary_weights" value { string_value: "1:90,2:10" } }
"""
)


def _successes(client: httpclient.InferenceServerClient) -> dict[str, int]:
    stats = client.get_inference_statistics("simple")["model_stats"]
    return {s["version"]: int(s["inference_stats"]["success"]["count"]) for s in stats}


def _send(client: httpclient.InferenceServerClient, count: int, version: str = "") -> None:
    data = np.ones((1, 16), np.int32)
    inputs = simple_inputs(httpclient, data)
    for _ in range(count):
        client.infer("simple", inputs, model_version=version)


def test_requests_split_by_weight_and_the_split_follows_a_reload(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, config=CANARY, versions=(1, 2))
    server = ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=simple"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        _send(client, 1000)
        split = _successes(client)
        assert abs(split["1"] - 900) <= 30 and abs(split["2"] - 100) <= 30, split
        assert split["1"] + split["2"] == 1000

        _send(client, 20, version="2")  # a request naming a version goes there, whatever the weights
        assert _successes(client)["2"] == split["2"] + 20

        metrics = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read().decode()
        counted = re.search(r'nv_inference_request_success\{model="simple",version="2"\} (\d+)', metrics)
        assert counted is not None and int(counted.group(1)) == split["2"] + 20

        config = client.get_model_config("simple")
        config["parameters"]["canary_weights"] = {"string_value": "1:50,2:50"}
        grpcclient.InferenceServerClient(server.grpc_url).load_model("simple", config=json.dumps(config))
        before = _successes(client)
        _send(client, 1000)
        after = _successes(client)
        assert abs((after["1"] - before["1"]) - 500) <= 30, (before, after)
        assert abs((after["2"] - before["2"]) - 500) <= 30, (before, after)
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ("1:90,3:10", "names version(s) 3, which are not loaded"),
        ("1=90", "expected VERSION:WEIGHT pairs"),
        # str.isdigit() takes a superscript two and thousands of digits; int() reads neither
        ("1:90,\xb2:10", "expected VERSION:WEIGHT pairs"),
        ("1:90,2:" + "1" * 5000, "expected VERSION:WEIGHT pairs"),
    ],
    ids=["unloaded version", "no colon", "superscript", "5000 digits"],
)
def test_bad_weights_are_refused_at_load_and_the_old_config_keeps_serving(
    tmp_path: Path, weights: str, message: str
) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, config=CANARY, versions=(1, 2))
    server = ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=simple"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        config = client.get_model_config("simple")
        config["parameters"]["canary_weights"] = {"string_value": weights}
        with pytest.raises(InferenceServerException, match=re.escape(message)):
            client.load_model("simple", config=json.dumps(config))
        _send(client, 100)
        split = _successes(client)
        assert split["1"] == 90 and split["2"] == 10, split
    finally:
        server.stop()


def test_streamed_requests_split_by_weight_too(tmp_path: Path) -> None:
    """A ModelStreamInfer request picked its version twice (the stream's lookup, then infer's), so at
    50:50 every streamed request landed on the same version."""
    repo = tmp_path / "repo"
    write_simple(repo, config=CANARY.replace("1:90,2:10", "1:50,2:50"), versions=(1, 2))
    server = ServerProcess([repo]).start(tmp_path)
    try:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        received = collect_stream(client)
        inputs = simple_inputs(grpcclient, np.ones((1, 16), np.int32))
        for index in range(100):
            client.async_stream_infer("simple", inputs, request_id=str(index))
        versions = []
        for _ in range(100):
            result, error = received.get(timeout=30)
            assert error is None, error
            versions.append(result.get_response().model_version)
        client.stop_stream()
        assert versions.count("1") == 50 and versions.count("2") == 50, versions
        assert _successes(httpclient.InferenceServerClient(server.http_url)) == {"1": 50, "2": 50}
    finally:
        server.stop()
