"""How a Python model's instance answers executions it cannot start: once it is closed, and while
its process restarts when the restart fails."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from tests.server.backends.python.instances import model_instance
from trt.server.backends.python.instance import ModelProcessDied
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


def _request() -> BackendRequest:
    return BackendRequest("", {"X": np.arange(3, dtype=np.int32)}, ("Y",), {})


def test_a_closed_instance_answers_new_executions_unavailable_from_the_event_loop(tmp_path: Path) -> None:
    instance = model_instance(tmp_path, ECHO)
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


def test_executions_waiting_for_a_restart_that_fails_are_answered_that_the_process_is_not_healthy(
    tmp_path: Path,
) -> None:
    """As Triton: HTTP 500 "Stub process is not healthy", with why the restart failed."""
    instance = model_instance(tmp_path, STARTS_ONCE)

    async def scenario() -> tuple[BaseException, BaseException]:
        try:
            with pytest.raises(ModelProcessDied) as died:
                await instance.execute_requests([_request()])
            with pytest.raises(ModelProcessDied) as waited:  # sent while the new process starts
                await instance.execute_requests([_request()])
            return died.value, waited.value
        finally:
            await instance.aclose()

    died, waited = asyncio.run(scenario())
    assert "Stub process is not healthy" in str(died) and "exited" in str(died)
    assert "could not be restarted" in str(waited) and "started once already" in str(waited)
    assert isinstance(waited, ModelProcessDied) and waited.http_status == 500
