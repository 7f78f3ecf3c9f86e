"""What a Python model's instance does when its process dies: every execution it held or was
handed is answered (the running one with Triton's "Stub process is not healthy", the others run
again on a new process), a restart that fails is retried with backoff, and the instance says it is
not ready while it has no process."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path

import pytest

from tests.server.backends.python.instances import model_instance
from trt.server.backends.python import instance as instance_module
from trt.server.backends.python.instance import ModelProcessDied, PythonModelInstance, State
from trt.server.core.backends.base import BackendRequest, BackendResponse
from trt.server.core.extensions.statistics import ModelStatistics
from trt.server.core.scheduling.request_scheduler import RequestScheduler

# Answers its pid ("slow": after 0.3 s); "die" exits the process at once.
# initialize() fails while a file "broken" is in the model's folder.
PID_MODEL = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if os.path.exists(os.path.join(args["model_repository"], "broken")):
            raise RuntimeError("the model is broken")

    def execute(self, requests):
        for request in requests:
            if request.request_id() == "die":
                os._exit(3)
        if requests[0].request_id() == "slow":
            time.sleep(0.3)
        pid = pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))
        return [pb_utils.InferenceResponse([pid]) for _ in requests]
"""

# Returns at once, then its process exits 0.2 s later, from another thread: its result is in the
# ring when the server sees it go.
RETURNS_THEN_EXITS = """
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _exit_soon():
    time.sleep(0.2)
    os._exit(0)


class TritonPythonModel:
    def execute(self, requests):
        if requests[0].request_id() == "first":
            threading.Thread(target=_exit_soon).start()
        pid = pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))
        return [pb_utils.InferenceResponse([pid]) for _ in requests]
"""

# Asks the server about a request that is not in its execution, and with arguments of the wrong shape.
ASKS_BADLY = """
import numpy as np
import triton_python_backend_utils as pb_utils
import trt_pb_runtime


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for arguments in ((0, 99), ("x",), ([], 0)):
            try:
                trt_pb_runtime.current.call("request_cancelled", *arguments)
                answers.append("no error")
            except pb_utils.TritonModelException as exc:
                answers.append(str(exc))
        out = pb_utils.Tensor("OUT", np.array(answers, dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""


def _request(request_id: str = "") -> BackendRequest:
    return BackendRequest(request_id, {}, ("PID",), {})


def _segments(instance: PythonModelInstance) -> list[str]:
    return [name for name in os.listdir("/dev/shm") if name.startswith(instance._tag)]


async def _serving(instance: PythonModelInstance, within_s: float) -> float:
    """Seconds until the instance serves again."""
    started = time.monotonic()
    while instance.state is not State.SERVING:
        assert time.monotonic() - started < within_s, f"still {instance.state} after {within_s} s"
        await asyncio.sleep(0.02)
    return time.monotonic() - started


def test_a_process_killed_with_a_request_running_one_held_and_one_queued_answers_all_three(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The running request fails with Triton's text; the one held in the dead process's ring and
    the one the scheduler hands over while the failure is reported run on the new process. (Before,
    the scheduler's next execution went to the dead process with file descriptors of -1: it hung.)"""
    instance = model_instance(tmp_path, PID_MODEL)
    scheduler = RequestScheduler([instance], ModelStatistics("m", "1"))
    first = instance.pid

    async def scenario() -> list[tuple[BackendResponse, object] | BaseException]:
        try:
            calls = [
                asyncio.ensure_future(scheduler.schedule(_request(name), 1))
                for name in ("slow", "held", "queued")
            ]
            await asyncio.sleep(0.15)
            os.kill(first, signal.SIGKILL)
            return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)
        finally:
            await instance.aclose()

    with caplog.at_level(logging.ERROR, logger="trt.backends.python"):
        running, held, queued = asyncio.run(scenario())
    assert isinstance(running, ModelProcessDied)
    assert str(running).startswith(
        "Failed to process the request(s) for model instance 'm_0', message: Stub process is not healthy."
    )
    for answer in (held, queued):
        assert not isinstance(answer, BaseException)
        pid = int(answer[0].outputs["PID"][0])
        assert pid != first
    assert f"process {first} of m" in caplog.text and "exited with signal 9" in caplog.text
    assert instance.state is State.CLOSED and _segments(instance) == []


def test_a_result_still_in_the_ring_when_the_process_dies_is_delivered_and_the_next_execution_runs_again(
    tmp_path: Path,
) -> None:
    """With one slot, the next execution is sent when the first's result is read. If that result
    is read only once the process has died, the next execution waits for the new process; before,
    it went to the dead one and failed as if it had run."""
    instance = model_instance(tmp_path, RETURNS_THEN_EXITS)
    instance.execution_slots = 1
    scheduler = RequestScheduler([instance], ModelStatistics("m", "1"))
    first = instance.pid

    async def scenario() -> list[tuple[BackendResponse, object]]:
        try:
            calls = [asyncio.ensure_future(scheduler.schedule(_request(n), 1)) for n in ("first", "next")]
            await asyncio.sleep(0)  # both scheduled: "first" is sent, "next" waits in the scheduler
            time.sleep(0.6)  # the loop is busy while the process answers and exits
            return await asyncio.wait_for(asyncio.gather(*calls), 10)
        finally:
            await instance.aclose()

    answered, ran_again = asyncio.run(scenario())
    assert int(answered[0].outputs["PID"][0]) == first
    assert int(ran_again[0].outputs["PID"][0]) not in (first, 0)


def test_a_restart_that_fails_is_retried_and_the_instance_is_not_ready_until_it_serves(
    tmp_path: Path,
) -> None:
    instance = model_instance(tmp_path, PID_MODEL)
    first = instance.pid

    async def scenario() -> tuple[list[State], BaseException, float, int]:
        try:
            (tmp_path / "broken").touch()
            with pytest.raises(ModelProcessDied) as died:
                await instance.execute_requests([_request("die")])
            states = [instance.state]
            while instance.state is not State.BACKING_OFF:  # the first attempt fails
                await asyncio.sleep(0.02)
            with pytest.raises(ModelProcessDied) as refused:  # answered at once, not held
                await asyncio.wait_for(instance.execute_requests([_request()]), 0.5)
            states.append(instance.state)
            assert "the model is broken" in str(refused.value)
            (tmp_path / "broken").unlink()  # the cause goes away: the next attempt works
            recovered_in = await _serving(instance, within_s=5)
            [answer] = await instance.execute_requests([_request()])
            states.append(instance.state)
            return states, died.value, recovered_in, int(answer.outputs["PID"][0])
        finally:
            await instance.aclose()

    states, died, recovered_in, pid = asyncio.run(scenario())
    assert "Stub process is not healthy" in str(died)
    assert states == [State.RESTARTING, State.BACKING_OFF, State.SERVING]
    assert recovered_in < 5  # the second attempt follows 0.5 s after the first
    assert pid not in (first, 0)
    assert _segments(instance) == []


def test_after_the_restarts_give_up_a_request_sets_off_one_more_attempt_and_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(instance_module, "RESTART_BACKOFF_S", ())  # one attempt, then FAILED
    monkeypatch.setattr(instance_module, "ON_DEMAND_INTERVAL_S", 0.3)
    instance = model_instance(tmp_path, PID_MODEL)

    async def scenario() -> tuple[str, int, bool]:
        try:
            (tmp_path / "broken").touch()
            with pytest.raises(ModelProcessDied):
                await instance.execute_requests([_request("die")])
            while instance.state is not State.FAILED:
                await asyncio.sleep(0.02)
            assert not instance.ready
            with pytest.raises(ModelProcessDied) as refused:  # too soon after the last attempt
                await asyncio.wait_for(instance.execute_requests([_request()]), 0.5)
            (tmp_path / "broken").unlink()
            await asyncio.sleep(0.3)
            [answer] = await asyncio.wait_for(instance.execute_requests([_request()]), 10)
            return str(refused.value), int(answer.outputs["PID"][0]), instance.ready
        finally:
            await instance.aclose()

    refused, pid, ready = asyncio.run(scenario())
    assert "could not be restarted" in refused and "the model is broken" in refused
    assert pid > 0 and ready
    assert _segments(instance) == []


def test_an_instance_unloaded_while_its_restart_backs_off_closes_cleanly(tmp_path: Path) -> None:
    """aclose() ends the backoff at once, starts nothing more and frees the shared memory; before,
    it raised and left three segments in /dev/shm."""
    instance = model_instance(tmp_path, PID_MODEL)

    async def scenario() -> float:
        (tmp_path / "broken").touch()
        with pytest.raises(ModelProcessDied):
            await instance.execute_requests([_request("die")])
        while instance.state is not State.BACKING_OFF:
            await asyncio.sleep(0.02)
        started = time.monotonic()
        await instance.aclose()
        return time.monotonic() - started

    took = asyncio.run(scenario())
    assert took < 0.4  # not the 0.5 s backoff
    assert instance.state is State.CLOSED and _segments(instance) == []


def test_malformed_request_cancelled_calls_from_the_model_are_answered_as_errors(tmp_path: Path) -> None:
    """Before, an index out of range or a wrong number of arguments escaped the message handler
    and the model waited for its answer for good."""
    instance = model_instance(tmp_path, ASKS_BADLY)

    async def scenario() -> list[str]:
        try:
            request = BackendRequest("", {}, ("OUT",), {})
            [answer] = await asyncio.wait_for(instance.execute_requests([request]), 10)
            return [
                value.decode() if isinstance(value, bytes) else str(value) for value in answer.outputs["OUT"]
            ]
        finally:
            await instance.aclose()

    out_of_range, too_few, unhashable = asyncio.run(scenario())
    assert "no request 99" in out_of_range
    assert out_of_range.startswith("request_cancelled:")
    assert too_few.startswith("request_cancelled:") and unhashable.startswith("request_cancelled:")


def test_executions_the_scheduler_hands_over_while_a_failed_restart_is_reported_are_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the last start attempt fails, answering the waiting executions lets the scheduler hand
    over its next one at once; it is answered too. (Before the state was set first, that one
    joined the waiting list just emptied, and waited for good.)"""
    monkeypatch.setattr(instance_module, "RESTART_BACKOFF_S", ())  # one attempt, then FAILED
    instance = model_instance(tmp_path, PID_MODEL)
    scheduler = RequestScheduler([instance], ModelStatistics("m", "1"))
    (tmp_path / "broken").touch()

    async def scenario() -> list[tuple[BackendResponse, object] | BaseException]:
        try:
            calls = [
                asyncio.ensure_future(scheduler.schedule(_request(name), 1))
                for name in ("die", "a", "b", "c")
            ]
            return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)
        finally:
            await instance.aclose()

    answers = asyncio.run(scenario())
    assert all(isinstance(answer, ModelProcessDied) for answer in answers), answers
    assert instance.state is State.CLOSED and _segments(instance) == []


# Answers its pid. A request whose id names a way of breaking the protocol writes that, as a
# hostile model could, straight into its ring to the server, then waits; "unsendable" returns a
# BYTES tensor holding an object whose pickle would create the marker file in the server.
HOSTILE_MODEL = """
import json
import os
import pathlib
import pickle
import struct
import time

import numpy as np
import _ipc
import triton_python_backend_utils as pb_utils
import trt_pb_runtime


class Planted:
    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(os.environ["TRT_TEST_MARKER"]),))


def write_raw(payload):
    runtime = trt_pb_runtime.current
    with runtime._send_lock:
        assert runtime._outbox._put(len(payload), payload)
        _ipc.wake(runtime._wake_fd)


class Bomb:
    def __reduce__(self):
        return (frozenset, (range(2**40),))


class TritonPythonModel:
    def execute(self, requests):
        how, execution = requests[0].request_id(), requests[0]._origin[0]
        if how == "pickle":
            write_raw(pickle.dumps(("result", execution, Planted())))
        elif how == "pickle bomb":  # what the old unpickler, which admitted plain data, built
            write_raw(pickle.dumps(("result", execution, Bomb())))
        elif how == "huge mark":
            tag = trt_pb_runtime.current.codec.tag
            outputs = [["inline", "PID", {tag: ["a", "<f8", [2**40], 0]}]]
            text = json.dumps(["result", execution, {"responses": [{"error": None, "outputs": outputs}]}])
            write_raw(struct.pack("<II", len(text), 1) + text.encode() + bytes(8))
        elif how == "not a result":
            trt_pb_runtime.current.send(("result", execution, "not a result"))
        elif how == "negative shape":  # numpy would read a count of -1 as the whole arena
            outputs = [["shm", "PID", "INT64", [-1], 0]]
            answer = {"responses": [{"error": None, "outputs": outputs, "parameters": {}}], "started_ns": 0}
            trt_pb_runtime.current.send(("result", execution, answer))
        if how:
            if how == "unsendable":
                values = np.array([Planted()], dtype=np.object_)
                return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", values)]) for _ in requests]
            time.sleep(60)  # the server stops this process; its death answers the request
        pid = pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))
        return [pb_utils.InferenceResponse([pid]) for _ in requests]
"""


@pytest.mark.parametrize(
    ("how", "logged"),
    [
        ("pickle", "sent a message that was refused (the message ends early)"),
        ("pickle bomb", "sent a message that was refused (the message ends early)"),
        ("huge mark", "sent a message that was refused (a blob mark past the message's end)"),
        ("not a result", "a message from the process of"),
        ("negative shape", "ValueError: a tensor of shape [-1]"),
    ],
)
def test_a_message_the_server_cannot_take_stops_its_process_and_its_request_is_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, how: str, logged: str
) -> None:
    """Whatever a model process writes into its ring, the server unpickles nothing, allocates
    nothing its bytes do not hold, and never leaves the request waiting: it stops that process,
    answers the request with Triton's "Stub process is not healthy", and serves the next one from a
    new process."""
    marker = tmp_path / "ran"
    monkeypatch.setenv("TRT_TEST_MARKER", str(marker))
    instance = model_instance(tmp_path, HOSTILE_MODEL)
    scheduler = RequestScheduler([instance], ModelStatistics("m", "1"))
    first = instance.pid

    async def scenario() -> tuple[
        BaseException | tuple[BackendResponse, object], tuple[BackendResponse, object]
    ]:
        try:
            planted = await asyncio.wait_for(
                asyncio.gather(scheduler.schedule(_request(how), 1), return_exceptions=True), 10
            )
            await _serving(instance, 5)
            after = await asyncio.wait_for(scheduler.schedule(_request(), 1), 10)
            return planted[0], after
        finally:
            await instance.aclose()

    with caplog.at_level(logging.ERROR, logger="trt.backends.python"):
        planted, after = asyncio.run(scenario())
    assert not marker.exists()
    assert isinstance(planted, ModelProcessDied), planted
    assert logged in caplog.text
    assert int(after[0].outputs["PID"][0]) not in (first, 0)


def test_a_response_holding_a_value_that_cannot_cross_is_an_error_and_the_process_serves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"
    monkeypatch.setenv("TRT_TEST_MARKER", str(marker))
    instance = model_instance(tmp_path, HOSTILE_MODEL)
    scheduler = RequestScheduler([instance], ModelStatistics("m", "1"))
    first = instance.pid

    async def scenario() -> tuple[tuple[BackendResponse, object], tuple[BackendResponse, object]]:
        try:
            refused = await asyncio.wait_for(scheduler.schedule(_request("unsendable"), 1), 10)
            after = await asyncio.wait_for(scheduler.schedule(_request(), 1), 10)
            return refused, after
        finally:
            await instance.aclose()

    refused, after = asyncio.run(scenario())
    assert refused[0].error is not None
    assert refused[0].error.message == (
        "Failed to process the request(s) for model 'm_0', message: "
        "execute() returned a response that cannot be sent to the server: "
        "a Planted cannot cross to or from a model process"
    )
    assert int(after[0].outputs["PID"][0]) == first
    assert not marker.exists()
