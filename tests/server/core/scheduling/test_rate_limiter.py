"""The rate limiter: instances of different models share what the machine has."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.support import SIMPLE_CONFIG, ServerProcess, int_inputs, write_simple
from trt.server.core.scheduling.instance_pool import InstancePool
from trt.server.core.scheduling.rate_limiter import RateLimiter


class _Overlap:
    """Counts how many executions run at once across instances."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0


class _SlowInstance:
    def __init__(self, overlap: _Overlap) -> None:
        self.overlap = overlap

    def execute(self, inputs: dict, output_names: list) -> dict:
        with self.overlap.lock:
            self.overlap.running += 1
            self.overlap.most = max(self.overlap.most, self.overlap.running)
        time.sleep(0.05)
        with self.overlap.lock:
            self.overlap.running -= 1
        return {"Y": inputs["X"]}

    def close(self) -> None:
        pass


def _most_at_once(limiter: RateLimiter | None) -> int:
    overlap = _Overlap()
    needs = [((("R", 1),), 0)]

    async def scenario() -> None:
        pools = [InstancePool(f"m{i}", [_SlowInstance(overlap)], limiter, needs) for i in range(2)]
        if limiter is not None:
            limiter.register(needs[0][0])

        async def run(pool: InstancePool) -> None:
            instance = await pool.acquire()
            await pool.run(instance, {"X": np.zeros((1, 1))}, ["Y"])

        await asyncio.gather(*(run(pool) for pool in pools for _ in range(3)))
        for pool in pools:
            pool.shutdown()

    asyncio.run(scenario())
    return overlap.most


def test_instances_needing_the_same_resource_never_overlap() -> None:
    assert _most_at_once(None) == 2  # two models, one instance each: they overlap freely
    assert _most_at_once(RateLimiter({"R": 1})) == 1
    assert _most_at_once(RateLimiter({})) == 1  # no count given: the largest single need (1)


def test_models_serve_under_the_rate_limiter(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    limiter = 'rate_limiter { resources [ { name: "R" count: 1 } ] }'
    limited = SIMPLE_CONFIG.replace("{ kind: KIND_CPU count: 1 }", f"{{ kind: KIND_CPU count: 1 {limiter} }}")
    write_simple(repo, "first", limited)
    write_simple(repo, "second", limited)
    proc = ServerProcess([repo], ["--rate-limit=execution_count", "--rate-limit-resource=R:1"]).start(
        tmp_path
    )
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        first, second = int_inputs()
        for model in ("first", "second"):
            inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
            inputs[0].set_data_from_numpy(first)
            inputs[1].set_data_from_numpy(second)
            np.testing.assert_array_equal(client.infer(model, inputs).as_numpy("OUTPUT0"), first + second)
    finally:
        proc.stop()
    refused = ServerProcess([repo], ["--rate-limit=sometimes"]).start(tmp_path, wait=False)
    assert refused.process is not None and refused.process.wait(60) != 0
    assert "off or execution_count" in refused.log()


SLOW_PYTHON = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        started = time.time()
        time.sleep(0.3)
        span = np.array([[started, time.time()]], dtype=np.float64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SPAN", span)]) for _ in requests]
"""


def _slow_python_config(name: str) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 1
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "SPAN" data_type: TYPE_FP64 dims: [ 2 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 rate_limiter {{ resources [ {{ name: "R" count: 1 }} ] }} }} ]
"""


def test_python_model_instances_share_the_rate_limiter(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for name in ("slow_a", "slow_b"):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(SLOW_PYTHON)
        (repo / name / "config.pbtxt").write_text(_slow_python_config(name))
    proc = ServerProcess([repo], ["--rate-limit=execution_count", "--rate-limit-resource=R:1"]).start(
        tmp_path
    )
    try:
        spans: list[tuple[float, float]] = []

        def call(model: str) -> None:
            client = httpclient.InferenceServerClient(proc.http_url)
            tensor = httpclient.InferInput("X", [1, 1], "FP32")
            tensor.set_data_from_numpy(np.zeros((1, 1), np.float32))
            started, ended = client.infer(model, [tensor]).as_numpy("SPAN")[0]
            spans.append((float(started), float(ended)))

        threads = [threading.Thread(target=call, args=(model,)) for model in ("slow_a", "slow_b") * 2]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(spans) == 4
        spans.sort()
        # One resource R between the two models' instances: their executions follow one another.
        assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))
    finally:
        proc.stop()
