"""While the load is light, the event loop and the Python model processes share one CPU; they spread
again when they wait for each other."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.server.backends.python import python_models as models
from tests.support import ServerProcess, write_python_model
from trt.server.core.scheduling.cpu_colocation import (
    ColocationPolicy,
    ColocationState,
    CpuColocation,
    LoadSample,
    decide,
)

POLICY = ColocationPolicy(try_below=1.2, spread_when_waiting=0.3, first_retry_s=1.0, last_retry_s=8.0)
ALLOWED = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
needs_two_cpus = pytest.mark.skipif(
    len(ALLOWED) < 2 or not os.path.exists("/proc/thread-self/schedstat"),
    reason="needs Linux and at least two CPUs this process may use",
)


def _together(state: ColocationState) -> None:
    state.cpu = 0


def test_a_light_load_joins_and_stays_while_they_take_turns() -> None:
    state = ColocationState()
    assert decide(POLICY, state, LoadSample(used=0.9, waiting=0.05), now=10.0) == "join"
    _together(state)
    assert decide(POLICY, state, LoadSample(used=1.0, waiting=0.23), now=10.2) is None


def test_a_load_that_runs_side_by_side_is_not_tried_on_one_cpu() -> None:
    assert decide(POLICY, ColocationState(), LoadSample(used=1.4, waiting=0.0), now=10.0) is None


def test_waiting_for_each_other_spreads_and_each_failed_trial_doubles_the_wait_for_the_next() -> None:
    state = ColocationState()
    now = 0.0
    retries = []
    for _ in range(6):
        assert decide(POLICY, state, LoadSample(0.5, 0.0), now) == "join"
        _together(state)
        assert decide(POLICY, state, LoadSample(1.0, 0.6), now + 0.2) == "spread"
        state.cpu = None
        retries.append(state.retry_s)
        assert decide(POLICY, state, LoadSample(0.5, 0.0), state.next_trial - 0.01) is None  # too early
        now = state.next_trial
    assert retries == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]  # capped at last_retry_s


def test_staying_together_long_enough_forgets_the_failed_trials() -> None:
    state = ColocationState(retry_s=8.0)
    assert decide(POLICY, state, LoadSample(0.5, 0.0), now=100.0) == "join"
    _together(state)
    assert decide(POLICY, state, LoadSample(0.9, 0.1), now=109.0) is None
    assert state.retry_s == 0.0
    assert decide(POLICY, state, LoadSample(1.0, 0.6), now=110.0) == "spread"
    assert state.next_trial == 111.0  # the back-off starts afresh


@needs_two_cpus
def test_the_loop_and_a_process_share_a_cpu_and_get_every_cpu_back_at_stop() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    seen: dict[str, object] = {}

    async def main() -> None:
        colocation = CpuColocation(ColocationPolicy(interval_s=0.05))
        colocation.add(child.pid, asyncio.get_running_loop())
        for _ in range(100):  # idle: the first sample with a previous one joins
            await asyncio.sleep(0.05)
            if colocation.together:
                break
        assert colocation.together
        cpu = colocation.state.cpu
        seen["loop"] = os.sched_getaffinity(0)
        seen["child"] = os.sched_getaffinity(child.pid)
        inherited: dict[str, set[int]] = {}
        started = threading.Event()
        release = threading.Event()

        def worker() -> None:
            inherited["at start"] = os.sched_getaffinity(0)
            started.set()
            release.wait(10)
            inherited["later"] = os.sched_getaffinity(0)

        thread = threading.Thread(target=worker)  # started by the pinned loop thread
        thread.start()
        started.wait(10)
        await asyncio.sleep(0.2)  # a few samples
        release.set()
        thread.join(10)
        seen["inherited"] = inherited
        colocation.stop()
        seen["loop after"] = os.sched_getaffinity(0)
        seen["child after"] = os.sched_getaffinity(child.pid)
        seen["cpu"] = cpu

    try:
        asyncio.run(main())
    finally:
        child.kill()
        child.wait()
    cpu = seen["cpu"]
    assert seen["loop"] == {cpu} and seen["child"] == {cpu}
    assert seen["inherited"] == {"at start": {cpu}, "later": ALLOWED}
    assert seen["loop after"] == ALLOWED and seen["child after"] == ALLOWED


# add_sub that also answers the pid of the process that ran it.
_APPEND = "responses.append(pb_utils.InferenceResponse(output_tensors=[out_tensor_0, out_tensor_1]))"
_PID = "pid = pb_utils.Tensor('PID', np.array([os.getpid()], dtype=np.int64))"
ADD_SUB_WITH_PID = models.ADD_SUB.replace(
    _APPEND, _PID + "\n            " + _APPEND.replace("out_tensor_1]", "out_tensor_1, pid]")
).replace("import json", "import json\nimport os", 1)
_LAST_OUTPUT = '{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }'
ADD_SUB_WITH_PID_CONFIG = models.ADD_SUB_CONFIG.replace(
    _LAST_OUTPUT, _LAST_OUTPUT + ', { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }'
)


def _serve(tmp_path: Path, *flags: str) -> ServerProcess:
    write_python_model(tmp_path / "repo", "add_sub", ADD_SUB_WITH_PID, ADD_SUB_WITH_PID_CONFIG)
    (tmp_path / "logs").mkdir()
    return ServerProcess([tmp_path / "repo"], list(flags)).start(tmp_path / "logs")


def _model_pid(client: httpclient.InferenceServerClient) -> int:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
        inputs.append(tensor)
    result = client.infer("add_sub", inputs)
    assert result.as_numpy("OUTPUT0").tolist() == [2.0] * 4
    return int(result.as_numpy("PID")[0])


def _affinities_after_light_load(server: ServerProcess) -> tuple[set[int], set[int]]:
    client = httpclient.InferenceServerClient(server.http_url)
    pid = _model_pid(client)
    assert server.process is not None
    for _ in range(40):  # a few samples of 0.2 s
        _model_pid(client)
        threading.Event().wait(0.05)
        loop_cpus, model_cpus = os.sched_getaffinity(server.process.pid), os.sched_getaffinity(pid)
        if len(model_cpus) == 1:
            break
    return loop_cpus, model_cpus


@needs_two_cpus
def test_trt_serve_puts_a_lightly_loaded_python_model_on_the_loops_cpu(tmp_path: Path) -> None:
    server = _serve(tmp_path)
    try:
        loop_cpus, model_cpus = _affinities_after_light_load(server)
        assert len(model_cpus) == 1 and loop_cpus == model_cpus
    finally:
        server.stop()


@needs_two_cpus
def test_cpu_colocation_can_be_turned_off_per_backend_config(tmp_path: Path) -> None:
    server = _serve(tmp_path, "--backend-config=python,cpu-colocation=false")
    try:
        loop_cpus, model_cpus = _affinities_after_light_load(server)
        assert loop_cpus == ALLOWED and model_cpus == ALLOWED
    finally:
        server.stop()
