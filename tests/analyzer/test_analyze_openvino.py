"""``trt analyze`` on an OpenVINO model: the space sweeps OpenVINO's knobs (streams, performance hint,
the thread count shared by the compiled model, INT8 by NNCF), and the recommended config loads and
serves. The model is converted in the test from ONNX by OpenVINO's converter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from google.protobuf import text_format

from tests.analyzer.test_analyze import run_analyze, write_mlp
from tests.support import ServerProcess
from trt.analyzer.deployment import Deployment
from trt.analyzer.precision import PrecisionCheck
from trt.analyzer.session import AnalysisSession, Checkpoint, MeasureSettings
from trt.analyzer.space import Candidate, SpaceLimits, build_space
from trt.protos import model_config_pb2
from trt.server.core.models.config import parse_config_text

OPENVINO_CONFIG = """
name: "ir"
backend: "openvino"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def _config(text: str = OPENVINO_CONFIG) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_the_space_of_an_openvino_model_has_its_streams_and_hints() -> None:
    space = build_space(
        _config(), cores=2, gpus=0, limits=SpaceLimits(), precisions_available=("fp32", "int8")
    )
    assert space.streams == (0, 1, 2) and space.hints == ("", "LATENCY", "THROUGHPUT")
    assert space.threads == (1, 2) and space.precisions == ("fp32", "int8")
    # OpenVINO's thread count is the compiled model's, shared by the instances: 2 instances x 2 threads fit.
    assert space.allows(Candidate(instances=2, threads=2))
    assert not space.allows(Candidate(streams=2, hint="THROUGHPUT"))  # a hint picks the streams itself
    hints = space.neighbours(Candidate(streams=1), "hint")
    assert [(c.hint, c.streams) for c in hints] == [("LATENCY", 0), ("THROUGHPUT", 0)]
    assert {c.streams for c in space.all()} == {0, 1, 2}


def test_other_backends_keep_their_space_and_their_checkpoint_keys() -> None:
    onnx = _config('platform: "onnxruntime_onnx" max_batch_size: 8')
    space = build_space(
        onnx, cores=2, gpus=0, limits=SpaceLimits(streams=(1,)), precisions_available=("fp32",)
    )
    assert space.streams == (0,) and space.hints == ("",)
    assert "--streams/--hint ignored" in space.notes[-1]
    assert not space.allows(Candidate(instances=2, threads=2))
    assert Candidate(instances=2, threads=1).key == "fp32_nb0_cpux2_t1"  # as before the new knobs


def test_a_candidate_becomes_openvino_parameters(tmp_path: Path) -> None:
    session = AnalysisSession(
        "ir", Deployment("127.0.0.1:1", "127.0.0.1:2"), _config(),
        {"fp32": PrecisionCheck("fp32", None, 0.0, True)}, MeasureSettings(),
        Checkpoint(tmp_path / "checkpoint.json", "s"), None, {"fp32": "ir"},
    )  # fmt: skip
    config = session.config_for(Candidate(precision="fp16", max_batch_size=8, threads=1, streams=2))
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    assert parameters == {"INFERENCE_NUM_THREADS": "1", "NUM_STREAMS": "2", "INFERENCE_PRECISION_HINT": "f16"}
    config = session.config_for(Candidate(max_batch_size=8, hint="THROUGHPUT"))
    assert {key: value.string_value for key, value in config.parameters.items()} == {
        "PERFORMANCE_HINT": "THROUGHPUT"
    }


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    ov = pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    source = tmp_path_factory.mktemp("onnx")
    write_mlp(source)
    repo = tmp_path_factory.mktemp("ir_repo")
    (repo / "ir" / "1").mkdir(parents=True)
    model = ov.convert_model(str(source / "mlp" / "1" / "model.onnx"))
    ov.save_model(model, str(repo / "ir" / "1" / "model.xml"), compress_to_fp16=False)
    (repo / "ir" / "config.pbtxt").write_text(OPENVINO_CONFIG)
    out = tmp_path_factory.mktemp("ir_out")
    run = run_analyze(
        "ir", "-r", str(repo), "--target-p99", "250ms", "--output-dir", str(out), "--mode", "brute",
        "--instances", "1", "--dynamic-batching", "off", "--threads", "1", "--streams", "0,1",
        "--hint", "none,throughput", "--precision", "fp32,int8,fp16", "--max-rel-error", "0.5",
        "--concurrency", "1", "-p", "200", "--max-trials", "3", "-q", "--json",
        timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return out, json.loads(run.stdout)


def test_analyze_sweeps_openvinos_knobs_and_int8(analyzed: tuple[Path, dict[str, Any]]) -> None:
    _, summary = analyzed
    precisions = tuple(summary["space"]["precisions"])
    measured = {
        (r["candidate"]["precision"], r["candidate"]["streams"], r["candidate"]["hint"])
        for r in summary["readings"]
    }
    assert measured == {(p, s, h) for p in precisions for s, h in ((0, ""), (1, ""), (0, "THROUGHPUT"))}
    assert {"fp32", "int8"} <= set(precisions)
    assert all(not r["failure"] for r in summary["readings"]), [r["failure"] for r in summary["readings"]]
    checks = summary["precisions"]
    assert checks["int8"]["accepted"] is True and 0 < checks["int8"]["max_rel_error"] < 0.5
    # Where the CPU reports no FP16 the hint would change nothing, so FP16 is not offered, and says why.
    if "fp16" not in summary["space"]["precisions"]:
        assert checks["fp16"]["accepted"] is False
        assert "does not compute in FP16" in checks["fp16"]["reason"]


def test_the_recommended_openvino_config_loads_and_serves(
    analyzed: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    out, summary = analyzed
    assert summary["met"] is True
    candidate = summary["recommended"]["candidate"]
    config = parse_config_text((out / "config.pbtxt").read_text())
    assert config.backend == "openvino"
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    assert parameters.get("INFERENCE_NUM_THREADS") == "1"
    assert parameters.get("NUM_STREAMS", "0") == str(candidate["streams"])
    assert parameters.get("PERFORMANCE_HINT", "") == candidate["hint"]
    assert (out / "recommended" / "ir" / "1" / "model.bin").is_file()
    server = ServerProcess([out / "recommended"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        tensor = httpclient.InferInput("INPUT0", [2, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((2, 16), np.float32))
        assert client.infer("ir", [tensor]).as_numpy("OUTPUT0").shape == (2, 4)
    finally:
        assert server.stop() == 0
