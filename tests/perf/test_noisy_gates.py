"""Gates that hold on a noisy machine: a real 20% slowdown of a served model fails the baseline gate; a
burst of CPU load from another process, while the same model runs unchanged, does not.

The model sleeps ``pace_ms`` per request, longer by its config's ``slowdown_percent``: the slowdown is
deployed the way a regression would be, as a new config loaded through the repository extension."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.perf.perf_support import run_perf
from tests.support import ServerProcess, write_python_model

PACED = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json
        parameters = json.loads(args["model_config"]).get("parameters", {})
        pace_ms = float(parameters["pace_ms"]["string_value"])
        slowdown = float(parameters["slowdown_percent"]["string_value"])
        self.seconds = pace_ms * (1 + slowdown / 100) / 1000

    def execute(self, requests):
        time.sleep(self.seconds)  # once per batch, as a compute-bound batched model would take
        outputs = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", o)]) for o in outputs]
"""


# A batch of up to 8 requests sleeps 50 ms: the serving path's CPU (which another program's load slows)
# is a few percent of a request's time, as in a model whose compute dominates. (At 20 ms, the baseline
# taken while other suites loaded both cores once came out as slow as the 20% slowdown measured in a
# quieter moment: +5.2% and +8.9% in two full runs.)
PACE_MS = 50


def _config(slowdown_percent: int) -> str:
    return (
        'name: "paced"\nbackend: "python"\nmax_batch_size: 8\ndynamic_batching { }\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        f'parameters {{ key: "pace_ms" value: {{ string_value: "{PACE_MS}" }} }}\n'
        f'parameters {{ key: "slowdown_percent" value: {{ string_value: "{slowdown_percent}" }} }}\n'
    )


# Windows of ~120 requests each; the tests pin verdicts, not figures. The serving path's share of a
# request's time (more of it on a loaded machine) dilutes the model's 20% end to end: the limit sits
# below that, as a CI gate's limit sits below the change it is there to catch.
MEASURE = ["-m", "paced", "--concurrency", "8", "-p", "800", "--warmup", "200", "-s", "10", "-r", "6"]
GATE = ["--max-regression", "5%"]

# Two processes that keep both cores busy for a bounded time: another program's load on the machine.
SPIN = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end: pass\n"


@pytest.fixture(scope="module")
def paced_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("paced_repo")
    write_python_model(repo, "paced", PACED, _config(0))
    proc = ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=paced"])
    proc.start(tmp_path_factory.mktemp("paced_logs"))
    yield proc
    proc.stop()


def _deploy(server: ServerProcess, slowdown_percent: int) -> None:
    """Load ``paced`` again with another config, as a deployment of a new version would."""
    config = {
        "name": "paced",
        "backend": "python",
        "max_batch_size": 8,
        "dynamic_batching": {},
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}],
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
        "parameters": {
            "pace_ms": {"string_value": str(PACE_MS)},
            "slowdown_percent": {"string_value": str(slowdown_percent)},
        },
    }
    body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/repository/models/paced/load", data=body, method="POST"
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert reply.status == 200


@pytest.fixture(scope="module")
def baseline(paced_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    _deploy(paced_server, 0)
    run = run_perf(*MEASURE, "-u", paced_server.http_url, "--json")
    assert run.returncode == 0, run
    path = tmp_path_factory.mktemp("baseline") / "baseline.json"
    path.write_text(run.stdout)
    windows = run.report["results"][0]["windows"]
    assert len(windows) >= 3 and all(w["count"] > 0 and w["p99_us"] > 0 for w in windows)
    return path


def test_a_real_20_percent_slowdown_fails_the_gate(paced_server: ServerProcess, baseline: Path) -> None:
    _deploy(paced_server, 20)
    try:
        run = run_perf(*MEASURE, "-u", paced_server.http_url, "--baseline", str(baseline), *GATE, "--json")
    finally:
        _deploy(paced_server, 0)
    assert run.returncode == 1, run
    failed = {g["gate"]: g for g in run.report["gates"] if not g["passed"]}
    judged = {"baseline concurrency 8 throughput", "baseline concurrency 8 p99"}
    assert failed and set(failed) <= judged, failed
    for verdict in failed.values():  # beyond the 5% limit with 95% confidence, noise measured
        assert verdict["confidence"] == 0.95 and verdict["baseline_noise"] is not None, verdict
        assert abs(verdict["bound"]) > 0.05 and abs(verdict["change"]) >= abs(verdict["bound"]), verdict
    # 50 ms -> 60 ms a batch: throughput falls by about 1/6 (all of it in the model's own time).
    throughput = next(g for g in run.report["gates"] if g["gate"].endswith("throughput"))
    assert -0.30 < throughput["change"] < -0.08, throughput
    assert "REGRESSED" in run.stderr and "with 95% confidence; noise" in run.stderr
    # It failed on the re-measure too: a lasting slowdown is not taken for noise.
    assert "measured again (1 of 1) before failing the run" in run.stderr


def test_a_burst_of_cpu_load_from_another_process_passes(paced_server: ServerProcess, baseline: Path) -> None:
    _deploy(paced_server, 0)
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN, "4"]) for _ in range(2)]
    try:
        time.sleep(0.2)
        run = run_perf(*MEASURE, "-u", paced_server.http_url, "--baseline", str(baseline), *GATE, "--json")
    finally:
        for spinner in spinners:
            spinner.wait(30)
    assert run.returncode == 0, run
    assert all(g["passed"] for g in run.report["gates"]), run.report["gates"]
    assert "ok" in run.stderr and "REGRESSED" not in run.stderr.split("measured again")[-1]
