"""The analyzer's hold on the server it measures candidates on: an unload returns before the model's
instances are released (as in Triton), so ``Deployment.unload`` waits for that before the next
candidate is measured beside them. The scratch folders of runs killed outright are removed by the
next run, never those of a run still going."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ServerProcess, write_python_model
from trt.analyzer.deployment import SCRATCH_PREFIX, Deployment, remove_abandoned_scratch

# finalize() takes 1 s: the model is listed UNLOADING that long after the unload call returns.
SLOW_FINALIZE = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "X")]) for r in requests]

    def finalize(self):
        time.sleep(1)
"""

CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    write_python_model(tmp_path / "repo", "slow_finalize", SLOW_FINALIZE, CONFIG)
    flags = ["--model-control-mode=explicit", "--load-model=slow_finalize"]
    server = ServerProcess([tmp_path / "repo"], flags).start(tmp_path)
    yield Deployment(server.http_url, server.grpc_url)
    server.stop()


def _states(deployment: Deployment) -> list[str]:
    rows = deployment._post("/v2/repository/index", {})
    return [row.get("state", "") for row in rows if row["name"] == "slow_finalize"]


def test_unload_returns_once_the_model_is_released(deployment: Deployment) -> None:
    assert _states(deployment) == ["READY"]
    deployment.unload("slow_finalize")
    assert _states(deployment) == ["UNAVAILABLE"]


def test_the_unload_call_alone_returns_while_the_model_is_still_unloading(deployment: Deployment) -> None:
    deployment._post("/v2/repository/models/slow_finalize/unload", {})
    assert _states(deployment) == ["UNLOADING"]  # what the wait above is for


def _scratch(folder: Path, name: str, age_s: float) -> tuple[Path, Path]:
    """A scratch repository as ``ScratchServer`` leaves one, its log last written ``age_s`` ago."""
    repository = folder / f"{SCRATCH_PREFIX}{name}"
    (repository / "mlp" / "1").mkdir(parents=True)
    log = folder / f"{repository.name}.log"
    log.write_text("served\n")
    os.utime(log, (time.time() - age_s, time.time() - age_s))
    return repository, log


def test_only_the_scratch_folders_of_runs_that_ended_are_removed(tmp_path: Path) -> None:
    abandoned, abandoned_log = _scratch(tmp_path, "killed", age_s=3600)
    in_use, in_use_log = _scratch(tmp_path, "running", age_s=3600)
    fresh, _ = _scratch(tmp_path, "starting", age_s=0)
    # A live run's server holds the lock through the log it writes to: another process here.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         f"log = open({str(in_use_log)!r}, 'ab'); fcntl.flock(log, fcntl.LOCK_EX)\n"
         "print('locked', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        assert remove_abandoned_scratch(tmp_path) == [abandoned]
        assert not abandoned.exists() and not abandoned_log.exists()
        assert in_use.exists() and fresh.exists()
    finally:
        holder.kill()
        holder.wait()
    # Its holder gone (killed outright), the lock goes with it.
    assert remove_abandoned_scratch(tmp_path) == [in_use]
    assert fresh.exists()
