"""Triton's model_warmup: run on every instance before the version goes ready; a failing warm-up fails
the load with a message, and the other models keep loading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.support import SIMPLE_CONFIG, ServerProcess, simple_inputs, write_simple

WARMUP = """
instance_group [ { kind: KIND_CPU count: 2 } ]
model_warmup [ {
  name: "first_request"
  batch_size: 4
  count: 3
  inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
  inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] INPUT1_DATA } }
} ]
"""


def _config(input1_data: str, input0: str = "INPUT0") -> str:
    base = SIMPLE_CONFIG.replace("instance_group [ { kind: KIND_CPU count: 1 } ]", "")
    return base + WARMUP.replace("INPUT1_DATA", input1_data).replace('key: "INPUT0"', f'key: "{input0}"')


def test_warmups_run_on_every_instance_and_broken_ones_fail_only_their_model(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "random_warm", _config("random_data: true"))
    file_warm = write_simple(repo, "file_warm", _config('input_data_file: "input1.bin"'))
    (file_warm / "warmup").mkdir()
    (file_warm / "warmup" / "input1.bin").write_bytes(np.arange(64, dtype=np.int32).tobytes())
    write_simple(repo, "wrong_name", _config("zero_data: true", input0="NOPE"))
    escape = write_simple(repo, "escaping_file", _config('input_data_file: "../../secret.bin"'))
    (escape.parent / "secret.bin").write_bytes(np.zeros(64, np.int32).tobytes())
    short = write_simple(repo, "short_file", _config('input_data_file: "input1.bin"'))
    (short / "warmup").mkdir()
    (short / "warmup" / "input1.bin").write_bytes(b"\x00" * 10)
    # INPUT0 as 4 GiB of zeros: calloc would hand it over untouched, and the model would then fill it.
    huge = _config("random_data: true").replace("dims: [ 16 ] zero", "dims: [ 268435456 ] zero")
    write_simple(repo, "huge_input", huge)

    server = ServerProcess([repo], ["--exit-on-error=false"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        for model in ("random_warm", "file_warm"):
            assert client.is_model_ready(model)
            data = np.arange(16, dtype=np.int32).reshape(1, 16)
            assert (
                client.infer(model, simple_inputs(httpclient, data)).as_numpy("OUTPUT0") == 2 * data
            ).all()
        index = {row["name"]: row for row in client.get_model_repository_index()}
        assert "model_warmup 'first_request' failed" in index["wrong_name"]["reason"]
        assert "must be inside warmup/" in index["escaping_file"]["reason"]
        assert "holds 10 bytes" in index["short_file"]["reason"]
        assert (
            "model_warmup input 'INPUT0': shape [4, 268435456] of INT32 takes 4,294,967,296 bytes, "
            "more than a tensor a config supplies may (1,073,741,824)"
        ) in index["huge_input"]["reason"]
        log = server.log()
        assert "'random_warm' version 1: warm-up 'first_request' ran 3 time(s) on 2 instance(s)" in log
        assert "'file_warm' version 1: warm-up 'first_request' ran 3 time(s) on 2 instance(s)" in log
    finally:
        server.stop()


COUNTER_PY = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.calls += 1
            if REFUSE:
                error = pb_utils.TritonError("refusing warm-up data")
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                calls = np.array([self.calls], dtype=np.int32)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("CALLS", calls)]))
        return responses
"""

COUNTER_CONFIG = """backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "CALLS" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
model_warmup [ { name: "w" count: 3
  inputs { key: "X" value { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } } ]
"""

ENSEMBLE_CONFIG = """platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [ { model_name: "simple" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" } } ] }
model_warmup [ { name: "through_steps" batch_size: 2 count: 2
  inputs { key: "A" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
  inputs { key: "B" value { data_type: TYPE_INT32 dims: [ 16 ] random_data: true } } } ]
"""


def _python_model(repo: Path, name: str, refuse: bool) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(COUNTER_PY.replace("REFUSE", str(refuse)))
    (repo / name / "config.pbtxt").write_text(COUNTER_CONFIG)


def test_python_models_and_ensembles_are_warmed_before_they_serve(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _python_model(repo, "counter", refuse=False)
    _python_model(repo, "refuses_warmup", refuse=True)
    write_simple(repo, "simple", SIMPLE_CONFIG)
    (repo / "pipeline" / "1").mkdir(parents=True)
    (repo / "pipeline" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    server = ServerProcess([repo], ["--exit-on-error=false"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        x = httpclient.InferInput("X", [1], "FP32")
        x.set_data_from_numpy(np.ones(1, np.float32))
        assert client.infer("counter", [x]).as_numpy("CALLS").tolist() == [4]  # three warm-ups came first
        index = {row["name"]: row for row in client.get_model_repository_index()}
        assert index["refuses_warmup"]["state"] == "UNAVAILABLE"
        assert "model_warmup 'w' failed: refusing warm-up data" in index["refuses_warmup"]["reason"]
        assert client.is_model_ready("pipeline")
        stats = client.get_inference_statistics("simple")["model_stats"][0]
        assert stats["inference_count"] == 4  # the ensemble's two warm-ups of batch 2 ran through its step
        assert "'pipeline' version 1: warm-up 'through_steps' ran 2 time(s) on 1 instance(s)" in server.log()
    finally:
        server.stop()
