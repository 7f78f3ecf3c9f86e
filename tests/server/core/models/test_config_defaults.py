"""The served config holds the defaults Triton writes into every config (core ``NormalizeModelConfig``
and ``AutoCompleteBackendFields``), and only where the config leaves them unset."""

from __future__ import annotations

from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support import SIMPLE_CONFIG, ServerProcess, write_python_model, write_simple
from trt.server.core import devices
from trt.server.core.models.config import config_to_dict
from trt.server.core.models.loader import effective_config
from trt.server.core.options import CoreOptions

ECHO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "X")]) for r in requests]
"""
ECHO_CONFIG = """
backend: "python"
max_batch_size: 4
input [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]
output [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]
sequence_batching { oldest { max_candidate_sequences: 2 } }
"""


def _config(repo: Path, name: str) -> dict[str, object]:
    config, _, _ = effective_config(name, repo / name, CoreOptions(model_repositories=(repo,)))
    return config_to_dict(config)


def test_a_config_that_leaves_them_unset_gets_tritons_defaults(tmp_path: Path) -> None:
    write_simple(tmp_path, "batched", SIMPLE_CONFIG + "dynamic_batching { }\n")
    write_python_model(tmp_path, "echo", ECHO, ECHO_CONFIG)
    batched, echo = _config(tmp_path, "batched"), _config(tmp_path, "echo")
    assert batched["default_model_filename"] == "model.onnx" and echo["default_model_filename"] == "model.py"
    for config in (batched, echo):
        assert config["version_policy"] == {"latest": {"num_versions": 1}}
        optimization = config["optimization"]
        assert isinstance(optimization, dict)
        assert optimization["input_pinned_memory"] == {"enable": True}
        assert optimization["output_pinned_memory"] == {"enable": True}
    assert batched["dynamic_batching"]["preferred_batch_size"] == [8]  # type: ignore[index]
    sequence = echo["sequence_batching"]
    assert sequence["max_sequence_idle_microseconds"] == 1_000_000  # type: ignore[index]
    assert sequence["oldest"]["preferred_batch_size"] == [4]  # type: ignore[index]


def test_what_a_config_sets_is_kept(tmp_path: Path) -> None:
    written = SIMPLE_CONFIG + (
        'default_model_filename: "model.onnx"\n'
        "version_policy { all { } }\n"
        "dynamic_batching { preferred_batch_size: [ 2, 4 ] }\n"
        "optimization { input_pinned_memory { enable: false } }\n"
    )
    write_simple(tmp_path, "batched", written)
    config = _config(tmp_path, "batched")
    assert config["version_policy"] == {"all": {}}
    assert config["dynamic_batching"]["preferred_batch_size"] == [2, 4]  # type: ignore[index]
    assert config["optimization"]["input_pinned_memory"] == {"enable": False}  # type: ignore[index]
    assert config["optimization"]["output_pinned_memory"] == {"enable": True}  # type: ignore[index]


def test_tritonclient_reads_the_defaults_over_both_protocols(tmp_path: Path) -> None:
    write_python_model(tmp_path / "repo", "echo", ECHO, ECHO_CONFIG)
    server = ServerProcess([tmp_path / "repo"]).start(tmp_path)
    try:
        http = httpclient.InferenceServerClient(server.http_url).get_model_config("echo")
        grpc = grpcclient.InferenceServerClient(server.grpc_url).get_model_config("echo", as_json=True)[
            "config"
        ]
        for config in (http, grpc):
            assert config["default_model_filename"] == "model.py"
            assert config["version_policy"] == {"latest": {"num_versions": 1}}
    finally:
        server.stop()


def test_a_python_model_with_a_batch_input_loads_and_serves_its_config(tmp_path: Path) -> None:
    """Its config crosses to the model process as JSON, which failed on the batch input's tensor names
    (the model was UNAVAILABLE); as in Triton, a Python model is given no batch input tensors."""
    config = ECHO_CONFIG.replace("sequence_batching { oldest { max_candidate_sequences: 2 } }", "") + (
        'batch_input [{ kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_FP32\n'
        '               source_input: "X" }]\n'
        "dynamic_batching { }\n"
    )
    write_python_model(tmp_path / "repo", "echo", ECHO, config)
    server = ServerProcess([tmp_path / "repo"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_model_ready("echo"), server.log()
        assert client.get_model_config("echo")["batch_input"][0]["source_input"] == ["X"]
    finally:
        server.stop()


def test_kind_auto_stays_on_the_cpu_where_the_backends_library_cannot_use_the_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU machine with the CPU build of onnxruntime (what `pip install onnxruntime` gives): as a Triton
    whose backend was built without GPUs, KIND_AUTO runs on the CPU; before, every such model failed to
    load ("asks for KIND_GPU but this onnxruntime has no CUDAExecutionProvider")."""
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime runs on GPUs")
    monkeypatch.setattr(devices, "gpu_count", lambda: 1)  # the machine's NVML sees a GPU
    write_simple(
        tmp_path, "auto", SIMPLE_CONFIG.replace("instance_group [ { kind: KIND_CPU count: 1 } ]", "")
    )
    write_simple(tmp_path, "asked", SIMPLE_CONFIG.replace("KIND_CPU", "KIND_GPU"))
    (auto_group,) = _config(tmp_path, "auto")["instance_group"]  # type: ignore[misc]
    assert auto_group["kind"] == "KIND_CPU"
    (asked_group,) = _config(tmp_path, "asked")["instance_group"]  # type: ignore[misc]
    assert asked_group["kind"] == "KIND_GPU"  # asked for: the load then says what to install
