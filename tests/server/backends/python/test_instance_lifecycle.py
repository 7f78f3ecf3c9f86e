"""How a Python model's instance answers executions it cannot start: once it is closed, and while
its process restarts when the restart fails."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from trt.server.backends.python.instance import ModelProcessDied, PythonModelInstance
from trt.server.core.backends.base import BackendRequest, BackendResponse
from trt.server.core.errors import Unavailable

ECHO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        tensors = [pb_utils.Tensor("Y", request.inputs()[0].as_numpy()) for request in requests]
        return [pb_utils.InferenceResponse([tensor]) for tensor in tensors]
"""

# Starts once: its first execute() kills its process, and initialize() refuses a second start.
STARTS_ONCE = """
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        marker = os.path.join(args["model_repository"], "started")
        if os.path.exists(marker):
            raise RuntimeError("started once already")
        open(marker, "w").close()

    def execute(self, requests):
        os._exit(3)
"""


def _instance(tmp_path: Path, source: str) -> PythonModelInstance:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.py").write_text(source)
    args = {
        "model_config": json.dumps({"name": "m"}),
        "model_instance_kind": "CPU",
        "model_instance_name": "m_0",
        "model_instance_device_id": "0",
        "model_repository": str(tmp_path),
        "model_version": "1",
        "model_name": "m",
    }
    return PythonModelInstance(sys.executable, tmp_path / "1" / "model.py", args, None)


def _request() -> BackendRequest:
    return BackendRequest("", {"X": np.arange(3, dtype=np.int32)}, ("Y",), {})


def test_a_closed_instance_answers_new_executions_unavailable_from_the_event_loop(tmp_path: Path) -> None:
    instance = _instance(tmp_path, ECHO)
    outcomes: list[tuple[list[BackendResponse] | None, BaseException | None]] = []

    def done(answers: list[BackendResponse] | None, error: BaseException | None, _: int | None) -> None:
        outcomes.append((answers, error))

    async def scenario() -> tuple[int, list[BackendResponse]]:
        answers = await instance.execute_requests([_request()])
        await instance.aclose()
        instance.start_requests([_request()], done)
        called_at_once = len(outcomes)  # a scheduler may start another from done(): not re-entered
        await asyncio.sleep(0)
        return called_at_once, answers

    called_at_once, answers = asyncio.run(scenario())
    assert list(answers[0].outputs["Y"]) == [0, 1, 2]
    assert called_at_once == 0
    [(none, error)] = outcomes
    assert none is None and isinstance(error, Unavailable) and "unloading" in str(error)


def test_executions_waiting_for_a_restart_that_fails_are_answered_unavailable(tmp_path: Path) -> None:
    instance = _instance(tmp_path, STARTS_ONCE)

    async def scenario() -> tuple[BaseException, BaseException]:
        try:
            with pytest.raises(ModelProcessDied) as died:
                await instance.execute_requests([_request()])
            with pytest.raises(Unavailable) as waited:  # sent while the new process starts
                await instance.execute_requests([_request()])
            return died.value, waited.value
        finally:
            await instance.aclose()

    died, waited = asyncio.run(scenario())
    assert "exited" in str(died)
    assert "could not be restarted" in str(waited) and "started once already" in str(waited)
