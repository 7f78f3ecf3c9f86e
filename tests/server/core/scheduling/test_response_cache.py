"""The response cache: identical requests are answered without running the model."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support import SIMPLE_CONFIG, ServerProcess, int_inputs, write_simple


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("cache_repo")
    write_simple(repo, "cached", SIMPLE_CONFIG + "response_cache { enable: true }\n")
    write_simple(repo, "uncached")
    proc = ServerProcess([repo], ["--cache-config=local,size=1048576"]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _infer(client: httpclient.InferenceServerClient, model: str, offset: int = 0) -> np.ndarray:
    first, second = int_inputs()
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(first + offset)
    inputs[1].set_data_from_numpy(second)
    return client.infer(model, inputs).as_numpy("OUTPUT0")


def test_a_repeated_request_is_a_cache_hit_and_skips_execution(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    first = _infer(client, "cached", offset=100)
    before = client.get_inference_statistics("cached")["model_stats"][0]
    again = _infer(client, "cached", offset=100)
    after = client.get_inference_statistics("cached")["model_stats"][0]
    np.testing.assert_array_equal(first, again)
    assert (
        after["inference_stats"]["cache_hit"]["count"] - before["inference_stats"]["cache_hit"]["count"] == 1
    )
    assert after["execution_count"] == before["execution_count"]  # the model did not run
    assert after["inference_count"] == before["inference_count"]  # cache hits are not inferences
    assert after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 1

    different = _infer(client, "cached", offset=7)  # other inputs: a miss, and the right answer
    np.testing.assert_array_equal(different, int_inputs()[0] + 7 + int_inputs()[1])
    final = client.get_inference_statistics("cached")["model_stats"][0]
    assert (
        final["inference_stats"]["cache_miss"]["count"]
        == before["inference_stats"]["cache_miss"]["count"] + 1
    )
    assert final["execution_count"] == after["execution_count"] + 1


def test_models_without_response_cache_always_run(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    for _ in range(3):
        _infer(client, "uncached")
    stats = client.get_inference_statistics("uncached")["model_stats"][0]
    assert stats["execution_count"] == 3 and stats["inference_stats"]["cache_hit"]["count"] == 0


def test_cache_metrics_exist_for_caching_models(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    _infer(client, "cached", offset=55)
    _infer(client, "cached", offset=55)
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics") as reply:
        text = reply.read().decode()
    hits = [
        line for line in text.splitlines() if line.startswith('nv_cache_num_hits_per_model{model="cached"')
    ]
    assert hits and int(hits[0].rsplit(" ", 1)[1]) >= 1
    assert 'nv_cache_num_hits_per_model{model="uncached"' not in text


def test_a_malformed_cache_config_is_refused(tmp_path: Path) -> None:
    proc = ServerProcess([tmp_path], ["--cache-config=redis,host=x"]).start(tmp_path, wait=False)
    assert proc.process is not None
    assert proc.process.wait(60) != 0
    assert "local,size=BYTES" in proc.log()
