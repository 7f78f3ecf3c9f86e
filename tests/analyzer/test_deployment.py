"""The analyzer's hold on the server it measures candidates on: an unload returns before the model's
instances are released (as in Triton), so ``Deployment.unload`` waits for that before the next
candidate is measured beside them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ServerProcess, write_python_model
from trt.analyzer.deployment import Deployment

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
