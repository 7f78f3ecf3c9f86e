"""Large tensors are copied into and out of a Python model's arenas on a thread: the event loop goes on
serving everyone else meanwhile (on the loop, a 64 MB input and output held it for 40 ms and more),
executions still reach the model process in the order they were started, and every request gets its
own tensors back."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from tests.server.backends.python.instances import model_instance
from tests.support import longest_loop_gap_while
from trt.server.backends.python.executions import OFF_LOOP_BYTES, Executions
from trt.server.backends.python.process import EXECUTION_SLOTS
from trt.server.backends.python.stub import _ipc
from trt.server.core.backends.base import BackendRequest
from trt.server.core.extensions.statistics import ModelStatistics
from trt.server.core.scheduling.request_scheduler import RequestScheduler

COUNTING = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    seen = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            order = pb_utils.Tensor("ORDER", np.array([self.seen], dtype=np.int64))
            self.seen += 1
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x), order]))
        return responses
"""

ELEMENTS = 16_000_000  # 64 MB of FP32 in, 64 MB out


def _request(data: np.ndarray) -> BackendRequest:
    return BackendRequest("", {"X": data}, ("Y", "ORDER"), {})


def test_a_64_mb_tensor_in_and_out_leaves_the_loop_free(tmp_path: Path) -> None:
    instance = model_instance(tmp_path, COUNTING)
    scheduler = RequestScheduler([instance], ModelStatistics("m", "1"))
    data = np.random.default_rng(3).random(ELEMENTS, dtype=np.float32)

    async def scenario() -> tuple[float, float, np.ndarray]:
        try:
            await scheduler.schedule(_request(data), 1)  # the arenas' pages made once
            started = time.perf_counter()
            work = asyncio.ensure_future(scheduler.schedule(_request(data), 1))
            stall = await longest_loop_gap_while(work)
            response, _ = await work
            return stall, time.perf_counter() - started, response.outputs["Y"]
        finally:
            await instance.aclose()

    stall, took, answer = asyncio.run(scenario())
    np.testing.assert_array_equal(answer, data)
    assert stall < max(0.25 * took, 0.01), (
        f"the loop stalled {stall * 1e3:.1f} ms of a {took * 1e3:.0f} ms request"
    )


def test_executions_around_large_ones_keep_their_order_and_their_own_tensors(tmp_path: Path) -> None:
    """Small requests started while a large one's tensors are copied wait behind it: the model runs
    them in the order they were started, and each gets its own tensor back."""
    instance = model_instance(tmp_path, COUNTING)
    scheduler = RequestScheduler([instance], ModelStatistics("m", "1"))
    large = 2 * OFF_LOOP_BYTES  # FP32 elements: 8 MB, copied on a thread
    tensors = [np.full(large if i % 3 == 0 else 4, i, dtype=np.float32) for i in range(9)]

    async def scenario() -> list[dict[str, np.ndarray]]:
        try:
            started = [asyncio.ensure_future(scheduler.schedule(_request(t), 1)) for t in tensors]
            return [response.outputs for response, _ in await asyncio.gather(*started)]
        finally:
            await instance.aclose()

    answers = asyncio.run(scenario())
    assert [int(a["ORDER"][0]) for a in answers] == list(range(9))
    for sent, answer in zip(tensors, answers, strict=True):
        np.testing.assert_array_equal(answer["Y"], sent)


def test_an_execution_behind_a_copy_that_never_finished_is_still_sent() -> None:
    """The executions sent behind a large one wait for its copy, however it ends: one whose copying
    task was cancelled (as at a loop's shutdown) left every later execution unsent for good."""
    size = 4 * OFF_LOOP_BYTES
    fds = [_ipc.new_segment(f"test_copies_{kind}", size * EXECUTION_SLOTS) for kind in ("in", "out")]
    posted: list[Any] = []
    executions = Executions(
        "m", Path("model.py"), *(_ipc.slot_arenas(fd, size, EXECUTION_SLOTS) for fd in fds),
        posted.append, lambda requests, done: None,
    )  # fmt: skip
    executions.open = True

    async def scenario() -> None:
        executions.start_requests([_request(np.ones(OFF_LOOP_BYTES, np.float32))], lambda *_: None)
        copying = executions._copying  # the large one's copy, on its way
        assert copying is not None
        copying.cancel()
        executions.start_requests([_request(np.ones(4, np.float32))], lambda *_: None)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if posted:
                return

    try:
        asyncio.run(scenario())
    finally:
        for fd in fds:
            os.close(fd)
    assert [message[:2] for message in posted] == [("execute", 1)]
