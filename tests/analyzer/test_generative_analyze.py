"""``trt analyze`` on a generative model: the scheduler batch size that gives the most output tokens/s
within an inter-token latency target is found, and written into the recommended config.

The model is a continuous-batching engine in miniature: up to ``max_batch`` requests advance one token a
step, a step takes ``step_ms * (1 + 0.25 * (batch - 1))``, and requests beyond the batch wait. With a
20 ms step, batches of 1, 4 and 8 give ITLs of 20, 35 and 55 ms (plus the serving path's few ms per
response) and, at full batch, 50, 114 and 145 tokens/s: under an 80 ms ITL target, max_batch 8 wins."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.perf.genai.genai_support import write_tokenizer
from tests.support import ROOT, write_python_model

BATCHER = """
import collections
import csv
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.max_batch = int(parameters["max_batch"]["string_value"])
        self.step = float(parameters["step_ms"]["string_value"]) / 1000
        self.waiting = collections.deque()
        self.ready = threading.Condition()
        threading.Thread(target=self.loop, daemon=True).start()

    def execute(self, requests):
        with self.ready:
            for request in requests:
                sampling = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
                parameters = json.loads(sampling.as_numpy().reshape(-1)[0]) if sampling is not None else {}
                self.waiting.append([request.get_response_sender(), int(parameters.get("max_tokens", 16)), 0])
            self.ready.notify()
        return None

    def loop(self):
        active = []
        while True:
            with self.ready:
                while not active and not self.waiting:
                    self.ready.wait()
                while self.waiting and len(active) < self.max_batch:
                    active.append(self.waiting.popleft())
            time.sleep(self.step * (1 + 0.25 * (len(active) - 1)))
            for entry in active:
                entry[2] += 1
                out = pb_utils.Tensor("text_output", np.array([b" the"], dtype=np.object_))
                entry[0].send(pb_utils.InferenceResponse([out]))
                if entry[2] == entry[1]:
                    entry[0].send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            active = [entry for entry in active if entry[2] < entry[1]]
"""

CONFIG = """name: "batcher"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "max_batch" value: { string_value: "2" } }
parameters { key: "step_ms" value: { string_value: "20" } }
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("generative_repo")
    write_python_model(repo, "batcher", BATCHER, CONFIG)
    write_tokenizer(repo / "batcher")  # where trt analyze looks without --tokenizer
    return repo


def _analyze(repo: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "trt", "analyze", "batcher", "--model-repository", str(repo),
        "--output-dir", str(out), "--synthetic-input-tokens-mean", "16", "--output-tokens-mean", "8",
        "--request-count", "8", "--json", *args,
    ]  # fmt: skip
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_batch_size_with_most_tokens_within_the_itl_target_is_recommended(
    repository: Path, tmp_path: Path
) -> None:
    run = _analyze(
        repository, tmp_path, "--target-itl", "80ms", "--target-ttft", "2s", "--parameter", "max_batch=1,4,8",
        "--concurrency", "1:8",
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    summary = json.loads(run.stdout)
    assert summary["met"] and summary["kind"] == "generative"
    chosen = summary["recommended"]
    assert chosen["parameters"] == {"max_batch": "8"} and chosen["instances"] == 1, summary
    assert chosen["concurrency"] == 8 and chosen["itl_ms"] < 80
    # 8 requests a step of 55 ms: about 145 tokens/s (less the serving path's share); max_batch 4 tops
    # out near 114.
    assert 90 < chosen["output_token_throughput"] < 150, chosen
    config = (tmp_path / "config.pbtxt").read_text()
    assert 'key: "max_batch"' in config and 'string_value: "8"' in config and "count: 1" in config
    rows = list(csv.DictReader((tmp_path / "measurements.csv").open()))
    assert {row["parameters"] for row in rows} == {"max_batch=1", "max_batch=4", "max_batch=8"}
    assert all(float(row["output_token_throughput"]) > 0 for row in rows)
    assert "Recommended: **1 instance, max_batch=8**" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "tokens_vs_latency.png").stat().st_size > 10_000


def test_an_unreachable_target_names_the_closest_config(repository: Path, tmp_path: Path) -> None:
    run = _analyze(
        repository, tmp_path, "--target-itl", "2ms", "--parameter", "max_batch=1", "--concurrency", "1",
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    summary = json.loads(run.stdout)
    assert not summary["met"] and summary["recommended"] is None
    assert summary["closest"]["candidate"] == "1 instance, max_batch=1"
    assert summary["closest"]["misses"][0].startswith("ITL p99 ")
    assert "no config meets ITL p99 <= 2 ms" in run.stderr
    assert not (tmp_path / "config.pbtxt").exists()


def test_a_classic_model_is_refused_for_generative_targets(repository: Path, tmp_path: Path) -> None:
    source = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    write_python_model(
        repository, "plain", source,
        'backend: "python"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n',
    )  # fmt: skip
    (repository / "plain" / "tokenizer.json").write_bytes(
        (repository / "batcher" / "tokenizer.json").read_bytes()
    )
    command = [sys.executable, "-m", "trt", "analyze", "plain", "--model-repository", str(repository),
               "--output-dir", str(tmp_path), "--target-ttft", "1s"]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "is not a generative model" in run.stderr, run.stdout + run.stderr


def test_without_generative_targets_a_generative_model_is_pointed_to_them(
    repository: Path, tmp_path: Path
) -> None:
    command = [sys.executable, "-m", "trt", "analyze", "batcher", "--model-repository", str(repository),
               "--output-dir", str(tmp_path), "--target-p99", "1s"]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "is a generative model" in run.stderr and "--target-ttft" in run.stderr
