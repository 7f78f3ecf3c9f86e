"""Ensembles: pipelines of models run inside the server, equal to calling the steps one by one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.server.backends.python.python_models import DOUBLES, ONE_NUMBER
from tests.support import ROOT, ServerProcess, int_inputs, write_python_model, write_simple


def _ensemble(repo: Path, name: str, body: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n{body}'
    )


TENSORS = """
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""

# Two chained steps: (a + b) and (a - b), fed again into add/sub: 2a and 2b.
CHAINED = (
    TENSORS
    + """
output [ { name: "TWICE_A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "TWICE_B" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "simple" model_version: -1 input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "sum" } output_map { key: "OUTPUT1" value: "difference" } },
  { model_name: "simple" model_version: 1 input_map { key: "INPUT0" value: "sum" } input_map { key: "INPUT1" value: "difference" }
    output_map { key: "OUTPUT0" value: "TWICE_A" } output_map { key: "OUTPUT1" value: "TWICE_B" } }
] }
"""
)

# Two independent steps on the same inputs.
PARALLEL = (
    TENSORS
    + """
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "REVERSED" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "simple" input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "SUM" } },
  { model_name: "other" input_map { key: "INPUT0" value: "B" } input_map { key: "INPUT1" value: "A" }
    output_map { key: "OUTPUT1" value: "REVERSED" } }
] }
"""
)

DISCONNECTED = (
    TENSORS
    + """
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "simple" input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "nowhere" }
    output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""
)

MISSING_STEP_MODEL = (
    TENSORS
    + """
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "not_in_repository" input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("ensemble_repo")
    write_simple(repo)
    write_simple(repo, "other")
    _ensemble(repo, "chained", CHAINED)
    _ensemble(repo, "parallel", PARALLEL)
    _ensemble(repo, "disconnected", DISCONNECTED)
    _ensemble(repo, "missing_step_model", MISSING_STEP_MODEL)
    proc = ServerProcess([repo], ["--exit-on-error=false"]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _infer(server: ServerProcess, model: str) -> httpclient.InferResult:
    client = httpclient.InferenceServerClient(server.http_url)
    a, b = int_inputs(batch=2)
    inputs = [httpclient.InferInput("A", [2, 16], "INT32"), httpclient.InferInput("B", [2, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return client.infer(model, inputs)


def test_a_chained_ensemble_equals_the_steps_one_by_one(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before = client.get_inference_statistics("simple")["model_stats"][0]["inference_count"]
    result = _infer(server, "chained")
    a, b = int_inputs(batch=2)
    np.testing.assert_array_equal(result.as_numpy("TWICE_A"), 2 * a)
    np.testing.assert_array_equal(result.as_numpy("TWICE_B"), 2 * b)
    after = client.get_inference_statistics("simple")["model_stats"][0]["inference_count"]
    assert after - before == 4  # two steps through the real model, batch 2 each
    assert client.get_model_metadata("chained")["platform"] == "ensemble"
    ensemble_stats = client.get_inference_statistics("chained")["model_stats"][0]
    assert ensemble_stats["inference_stats"]["success"]["count"] >= 1


def test_independent_steps_both_run(server: ServerProcess) -> None:
    result = _infer(server, "parallel")
    a, b = int_inputs(batch=2)
    np.testing.assert_array_equal(result.as_numpy("SUM"), a + b)
    np.testing.assert_array_equal(result.as_numpy("REVERSED"), b - a)


def test_a_disconnected_ensemble_is_refused_at_load_naming_the_tensor(server: ServerProcess) -> None:
    index = {
        r["name"]: r for r in httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    }
    assert index["disconnected"]["state"] == "UNAVAILABLE"
    assert "'nowhere'" in index["disconnected"]["reason"]


def test_an_ensemble_over_a_missing_model_is_refused_at_load_and_the_others_serve(
    server: ServerProcess,
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    index = {r["name"]: r for r in client.get_model_repository_index()}
    assert index["missing_step_model"]["state"] == "UNAVAILABLE"
    assert "not available or ambiguous: not_in_repository" in index["missing_step_model"]["reason"]
    with pytest.raises(InferenceServerException, match="no available versions"):
        _infer(server, "missing_step_model")
    assert _infer(server, "chained").as_numpy("TWICE_A") is not None


def test_the_example_image_pipeline(tmp_path: Path) -> None:
    proc = ServerProcess(
        [ROOT / "model_repository"],
        ["--model-control-mode=explicit", "--load-model=preprocess_image", "--load-model=cnn_onnx",
         "--load-model=image_pipeline"],
    ).start(tmp_path)  # fmt: skip
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        image = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8).tobytes()
        tensor = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[image]], dtype=np.object_))
        through_pipeline = client.infer("image_pipeline", [tensor]).as_numpy("LOGITS")
        pixels = client.infer("preprocess_image", [tensor]).as_numpy("PIXELS")
        direct = httpclient.InferInput("input", [1, 3, 64, 64], "FP32")
        direct.set_data_from_numpy(pixels)
        np.testing.assert_allclose(
            through_pipeline, client.infer("cnn_onnx", [direct]).as_numpy("logits"), rtol=1e-6
        )
    finally:
        proc.stop()


def test_a_steps_error_is_the_ensembles_answer_in_tritons_words(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "plain", DOUBLES, 'backend: "python"\n' + ONE_NUMBER)
    (repo / "ens" / "1").mkdir(parents=True)
    (repo / "ens" / "config.pbtxt").write_text(
        'platform: "ensemble"\n' + ONE_NUMBER + 'ensemble_scheduling { step [ { model_name: "plain" '
        'model_version: -1 input_map { key: "N" value: "N" } output_map { key: "OUT" value: "OUT" } } ] }\n'
    )
    server = ServerProcess([repo]).start(tmp_path)
    try:
        for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
            tensor = module.InferInput("N", [1], "INT32")
            tensor.set_data_from_numpy(np.array([-1], np.int32))
            with pytest.raises(InferenceServerException) as info:
                module.InferenceServerClient(url).infer("ens", [tensor])
            assert info.value.message() == "in ensemble 'ens', negative input"  # Triton 2.51's
    finally:
        server.stop()
