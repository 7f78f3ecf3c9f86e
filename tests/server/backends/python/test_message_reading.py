"""The server reads what a model process sends a few dozen messages at a time, letting the rest of
the event loop run in between: a model that sent hundreds of answers from one ``execute()`` had the
loop decode them all in one callback (about 300 ms for 4,000 answers, every other client waiting)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from pathlib import Path

import pytest

from tests.server.backends.python.instances import model_instance
from trt.server.backends.python.process import MESSAGES_PER_TURN
from trt.server.core.backends.base import BackendRequest, BackendResponse

LINES = 600

# Logs LINES lines from execute() (each a message to the server), then answers.
CHATTY = f"""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        logger = pb_utils.Logger
        for index in range({LINES}):
            logger.log_info(f"line {{index}}")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([1], np.int32))]) for _ in requests]
"""


def test_a_burst_of_messages_is_read_in_turns_with_the_rest_of_the_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trt.backends.python")
    instance = model_instance(tmp_path, CHATTY)
    seen: list[int] = []  # the lines read so far, at each turn of the loop's other work

    def lines() -> list[str]:
        return [record.getMessage() for record in caplog.records if "line " in record.getMessage()]

    async def scenario() -> list[BackendResponse]:
        await instance.execute_requests([BackendRequest("", {}, ("Y",), {})])  # started and warm
        caplog.clear()
        answered: asyncio.Future[list[BackendResponse]] = asyncio.get_running_loop().create_future()

        def done(answers: list[BackendResponse] | None, error: BaseException | None, _: int | None) -> None:
            if error is not None:
                answered.set_exception(error)
            else:
                answered.set_result(answers or [])

        instance.start_requests([BackendRequest("", {}, ("Y",), {})], done)
        time.sleep(2)  # the loop held: every line and the result wait in the ring, unread
        while not answered.done():
            seen.append(len(lines()))
            await asyncio.sleep(0)
        return await answered

    try:
        answers = asyncio.run(scenario())
    finally:
        asyncio.run(instance.aclose())
    assert list(answers[0].outputs["Y"]) == [1]
    assert [line.rsplit(" ", 1)[-1] for line in lines()] == [str(i) for i in range(LINES)]  # all, in order
    between = [count for count in seen if 0 < count < LINES]
    assert between, seen  # the loop ran between reads of the burst, not once after all of it
    assert max(b - a for a, b in itertools.pairwise(seen)) <= MESSAGES_PER_TURN
