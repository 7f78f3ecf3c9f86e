"""The dynamic batcher: concurrent requests become few executions, as Triton's config says."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from tests.support import SIMPLE_CONFIG, ServerProcess, save_onnx, write_simple

VARIABLE_WIDTH = """
name: "variable"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 300000 }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("batching_repo")
    write_simple(
        repo, "delayed", SIMPLE_CONFIG + "dynamic_batching { max_queue_delay_microseconds: 300000 }\n"
    )
    write_simple(
        repo,
        "preferred",
        SIMPLE_CONFIG
        + "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 5000000 }\n",
    )
    graph = helper.make_graph(
        [helper.make_node("Neg", ["X"], ["Y"])],
        "negate",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", "n"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", "n"])],
    )
    save_onnx(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
        repo / "variable" / "1" / "model.onnx",
    )
    (repo / "variable" / "config.pbtxt").write_text(VARIABLE_WIDTH)
    proc = ServerProcess([repo]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _post(server: ServerProcess, model: str, document: dict) -> tuple[dict, float]:
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/{model}/infer", json.dumps(document).encode()
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read()), time.monotonic() - started


def _add_sub(value: int) -> dict:
    return {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [value] * 16},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }


def _stats(server: ServerProcess, model: str) -> dict:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats") as reply:
        return json.loads(reply.read())["model_stats"][0]


def test_concurrent_requests_share_executions_and_get_their_own_results(server: ServerProcess) -> None:
    before = _stats(server, "delayed")
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda v: _post(server, "delayed", _add_sub(v))[0], range(8)))
    for value, result in enumerate(results):
        assert result["outputs"][0]["data"] == [value + 1] * 16  # each request's own slice of the batch
        assert result["outputs"][1]["data"] == [value - 1] * 16
    after = _stats(server, "delayed")
    assert after["inference_count"] - before["inference_count"] == 8
    assert after["execution_count"] - before["execution_count"] <= 2  # well under one per request
    assert max(b["batch_size"] for b in after["batch_stats"]) >= 4


def test_a_lone_request_waits_at_most_the_queue_delay(server: ServerProcess) -> None:
    _, elapsed = _post(server, "delayed", _add_sub(1))
    assert 0.25 <= elapsed < 2.0  # max_queue_delay_microseconds: 300000


def test_a_preferred_batch_goes_as_soon_as_it_forms(server: ServerProcess) -> None:
    before = _stats(server, "preferred")
    with ThreadPoolExecutor(4) as pool:
        timed = list(pool.map(lambda v: _post(server, "preferred", _add_sub(v)), range(4)))
    assert max(elapsed for _, elapsed in timed) < 3.0  # far less than the 5 s queue delay
    after = _stats(server, "preferred")
    assert after["execution_count"] - before["execution_count"] == 1
    assert [b["batch_size"] for b in after["batch_stats"]] == [4]


def test_requests_with_different_shapes_are_not_batched_together(server: ServerProcess) -> None:
    before = _stats(server, "variable")
    documents = [
        {"inputs": [{"name": "X", "shape": [1, width], "datatype": "FP32", "data": [float(width)] * width}]}
        for width in (3, 5, 3, 5)
    ]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda d: _post(server, "variable", d)[0], documents))
    for document, result in zip(documents, results, strict=True):
        width = document["inputs"][0]["shape"][1]
        assert result["outputs"][0]["data"] == [-float(width)] * width
    after = _stats(server, "variable")
    assert after["execution_count"] - before["execution_count"] == 2  # one batch per shape
    assert after["inference_count"] - before["inference_count"] == 4


def test_a_config_without_dynamic_batching_runs_one_execution_per_request(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    proc = ServerProcess([repo]).start(tmp_path)
    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda v: _post(proc, "simple", _add_sub(v)), range(8)))
        stats = _stats(proc, "simple")
        assert stats["execution_count"] == stats["inference_count"] == 8
    finally:
        proc.stop()


POLICY_MODELS = {
    "bounded": "dynamic_batching { max_queue_delay_microseconds: 1500000 "
    "default_queue_policy { max_queue_size: 2 } }",
    "timed": "dynamic_batching { max_queue_delay_microseconds: 3000000 "
    "default_queue_policy { default_timeout_microseconds: 200000 } }",
    "overridable": "dynamic_batching { max_queue_delay_microseconds: 3000000 "
    "default_queue_policy { allow_timeout_override: true } }",
}


@pytest.fixture(scope="module")
def policy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("policy_repo")
    for name, batching in POLICY_MODELS.items():
        write_simple(repo, name, SIMPLE_CONFIG + batching + "\n")
    proc = ServerProcess([repo]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _attempt(server: ServerProcess, model: str, parameters: dict | None = None) -> tuple[int, str, float]:
    document = _add_sub(1)
    if parameters:
        document["parameters"] = parameters
    started = time.monotonic()
    try:
        _post(server, model, document)
        return 200, "", time.monotonic() - started
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["error"], time.monotonic() - started


def test_a_full_queue_refuses_at_once_with_503(policy_server: ServerProcess) -> None:
    with ThreadPoolExecutor(4) as pool:
        first = [pool.submit(_attempt, policy_server, "bounded") for _ in range(2)]
        time.sleep(0.3)  # both wait in the queue for the 1.5 s delay
        late = [pool.submit(_attempt, policy_server, "bounded") for _ in range(2)]
        refused = [f.result() for f in late]
        accepted = [f.result() for f in first]
    assert all(
        status == 503 and "Exceeds maximum queue size" in error and elapsed < 1.0
        for status, error, elapsed in refused
    )
    assert [status for status, _, _ in accepted] == [200, 200]


def test_a_request_that_waits_past_its_timeout_is_rejected(policy_server: ServerProcess) -> None:
    status, error, elapsed = _attempt(policy_server, "timed")
    assert status == 503 and "timeout" in error.lower()
    assert 0.15 < elapsed < 2.0  # the 200 ms policy, well before the 3 s queue delay
    status, error, elapsed = _attempt(policy_server, "overridable", {"timeout": 100000})
    assert status == 503 and elapsed < 2.0  # the request's own timeout, allowed by the policy
    status, _, elapsed = _attempt(policy_server, "bounded")
    assert status == 200


class _SlowRecordingInstance:
    """A real instance for the batcher: takes 50 ms and remembers what it ran, in order."""

    def __init__(self) -> None:
        self.ran: list[int] = []

    def execute(self, inputs: dict, output_names: list) -> dict:
        time.sleep(0.05)
        self.ran.extend(int(v) for v in inputs["X"][:, 0])
        return {"Y": inputs["X"]}

    def close(self) -> None:
        pass


def test_higher_priority_requests_are_served_first() -> None:
    import asyncio

    import numpy as np

    from trt.server.core.extensions.statistics import ModelStatistics
    from trt.server.core.scheduling.dynamic_batcher import DynamicBatcher, QueuePolicy
    from trt.server.core.scheduling.instance_pool import InstancePool

    instance = _SlowRecordingInstance()

    async def scenario() -> None:
        pool = InstancePool("priority-test", [instance])
        batcher = DynamicBatcher(
            pool, ModelStatistics("m", "1"), max_batch_size=1, priority_levels=2, default_priority_level=2,
            policies={1: QueuePolicy(), 2: QueuePolicy()},
        )  # fmt: skip

        def submit(value: int, priority: int) -> asyncio.Future:
            feeds = {"X": np.full((1, 1), value, np.int32)}
            return asyncio.ensure_future(batcher.execute(feeds, ["Y"], 1, priority))

        first = submit(1, 0)  # takes the instance
        await asyncio.sleep(0.01)
        later = [submit(2, 0), submit(3, 0), submit(4, 1)]  # 4 is priority 1, the highest
        await asyncio.gather(first, *later)
        pool.shutdown()

    asyncio.run(scenario())
    assert instance.ran == [1, 4, 2, 3]


def test_priority_levels_cost_nothing_until_requests_use_them() -> None:
    import asyncio

    import numpy as np

    from trt.protos import model_config_pb2
    from trt.server.core.extensions.statistics import ModelStatistics
    from trt.server.core.scheduling.dynamic_batcher import DynamicBatcher
    from trt.server.core.scheduling.instance_pool import InstancePool

    instance = _SlowRecordingInstance()
    config = model_config_pb2.ModelConfig(name="m", max_batch_size=1)
    config.dynamic_batching.priority_levels = 2**64 - 1  # Triton takes any uint64
    config.dynamic_batching.default_priority_level = 2**63

    async def scenario() -> int:
        pool = InstancePool("levels-test", [instance])
        began = time.monotonic()
        batcher = DynamicBatcher.from_config(pool, ModelStatistics("m", "1"), config)
        assert time.monotonic() - began < 1  # a queue for each level took all memory before

        def submit(value: int, priority: int) -> asyncio.Future:
            feeds = {"X": np.full((1, 1), value, np.int32)}
            return asyncio.ensure_future(batcher.execute(feeds, ["Y"], 1, priority))

        first = submit(1, 0)  # the default level takes the instance
        await asyncio.sleep(0.01)
        later = [submit(2, 2**64 - 1), submit(3, 0), submit(4, 5), submit(5, 2**40), submit(6, 5)]
        await asyncio.gather(first, *later)
        pool.shutdown()
        return len(batcher._queues)

    queues = asyncio.run(scenario())
    assert instance.ran == [1, 4, 6, 5, 3, 2]  # level 5, then 2**40, the default (2**63), the last
    assert queues == 1  # the levels the requests chose are gone again; the default's stays


class _Sleeper:
    """A real instance that takes ``seconds`` per execution and echoes its input."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def execute(self, inputs: dict, output_names: list) -> dict:
        time.sleep(self.seconds)
        return {"Y": inputs["X"]}

    def close(self) -> None:
        pass


def _finishing_order(preserve_ordering: bool) -> list[int]:
    """Request 1 goes to a slow instance, request 2 to a fast one: the order their answers come in."""
    import asyncio

    import numpy as np
    from google.protobuf import text_format

    from trt.protos import model_config_pb2
    from trt.server.core.extensions.statistics import ModelStatistics
    from trt.server.core.scheduling.dynamic_batcher import DynamicBatcher
    from trt.server.core.scheduling.instance_pool import InstancePool

    answered: list[int] = []
    text = f"max_batch_size: 1 dynamic_batching {{ preserve_ordering: {str(preserve_ordering).lower()} }}"
    config = text_format.Parse(text, model_config_pb2.ModelConfig())

    async def scenario() -> None:
        pool = InstancePool("ordering-test", [_Sleeper(0.3), _Sleeper(0.01)])
        batcher = DynamicBatcher.from_config(pool, ModelStatistics("m", "1"), config)
        requests = []
        for value in (1, 2):
            future = asyncio.ensure_future(batcher.execute({"X": np.full((1, 1), value, np.int32)}, ["Y"], 1))
            future.add_done_callback(lambda done: answered.append(int(done.result()[0]["Y"][0, 0])))
            requests.append(future)
        results = await asyncio.gather(*requests)
        assert [int(r[0]["Y"][0, 0]) for r in results] == [1, 2]  # each its own output either way
        pool.shutdown()

    asyncio.run(scenario())
    return answered


def test_preserve_ordering_holds_a_later_batch_until_the_earlier_one_answers() -> None:
    assert _finishing_order(preserve_ordering=True) == [1, 2]
    assert _finishing_order(preserve_ordering=False) == [2, 1]  # what happens without it


class _GatedRecorder:
    """A real instance that records each batch's size; its first execution waits for ``gate``."""

    def __init__(self) -> None:
        import threading

        self.gate = threading.Event()
        self.batches: list[int] = []

    def execute(self, inputs: dict, output_names: list) -> dict:
        if not self.batches:
            self.gate.wait(10)
        self.batches.append(len(inputs["X"]))
        return {"Y": inputs["X"]}

    def close(self) -> None:
        pass


def _batches_after_a_busy_spell(more_after_free: int, delay_from_instance_free: bool) -> list[int]:
    """One instance, ``preferred_batch_size: [ 4 ]``, a 100 ms delay: a first request of 4 takes the
    instance and holds it 250 ms while two requests of 1 queue; as soon as it is free again (its answer is
    in), ``more_after_free`` further requests come. The batch sizes executed."""
    import asyncio

    import numpy as np

    from trt.server.core.extensions.statistics import ModelStatistics
    from trt.server.core.scheduling.dynamic_batcher import DynamicBatcher
    from trt.server.core.scheduling.instance_pool import InstancePool

    instance = _GatedRecorder()

    async def scenario() -> None:
        pool = InstancePool("availability-test", [instance])
        batcher = DynamicBatcher(
            pool, ModelStatistics("m", "1"), max_batch_size=8, preferred_batch_sizes=[4],
            max_queue_delay_us=100_000, delay_from_instance_free=delay_from_instance_free,
        )  # fmt: skip

        def submit(rows: int = 1) -> asyncio.Future:
            feeds = {"X": np.zeros((rows, 1), np.float32)}
            return asyncio.ensure_future(batcher.execute(feeds, ["Y"], rows))

        first = submit(4)  # a preferred batch by itself: it goes at once
        await asyncio.sleep(0.05)  # the first is executing
        waiting = [submit(), submit()]
        await asyncio.sleep(0.2)  # the two have waited twice the delay, all of it for the instance
        instance.gate.set()
        await first
        later = [submit() for _ in range(more_after_free)]
        await asyncio.gather(*waiting, *later)
        pool.shutdown()

    asyncio.run(scenario())
    return instance.batches


def test_requests_that_waited_for_a_busy_instance_go_at_once_when_it_frees_by_default() -> None:
    # Triton's rule: the delay counts from arrival, so the two that waited 200 ms for the instance go
    # as a batch of 2 the moment it frees, and the two that come next wait their own delay.
    assert _batches_after_a_busy_spell(more_after_free=2, delay_from_instance_free=False) == [4, 2, 2]


def test_counted_from_instance_free_they_still_wait_the_delay_for_a_preferred_batch() -> None:
    # ``queue_delay_from: "instance_free"``: counted from when the instance came free, the two that
    # arrive next join them (with one instance, arrival's rule splits a closed loop of clients for good).
    assert _batches_after_a_busy_spell(more_after_free=2, delay_from_instance_free=True) == [4, 4]


def test_counted_from_instance_free_they_go_once_the_delay_passes_after_it_frees() -> None:
    assert _batches_after_a_busy_spell(more_after_free=0, delay_from_instance_free=True) == [4, 2]


@pytest.mark.parametrize(
    ("parameter", "expected"), [(None, False), ("arrival", False), (" instance_free ", True)]
)
def test_queue_delay_from_is_read_from_the_model_config(parameter: str | None, expected: bool) -> None:
    from trt.protos import model_config_pb2
    from trt.server.core.scheduling.dynamic_batcher import QUEUE_DELAY_FROM, _delay_from_instance_free

    config = model_config_pb2.ModelConfig(name="m", max_batch_size=8)
    if parameter is not None:
        config.parameters[QUEUE_DELAY_FROM].string_value = parameter
    assert _delay_from_instance_free(config) is expected


def test_an_unknown_queue_delay_from_is_a_config_error_naming_the_parameter() -> None:
    from trt.protos import model_config_pb2
    from trt.server.core.errors import ModelConfigError
    from trt.server.core.scheduling.dynamic_batcher import QUEUE_DELAY_FROM, _delay_from_instance_free

    config = model_config_pb2.ModelConfig(name="m", max_batch_size=8)
    config.parameters[QUEUE_DELAY_FROM].string_value = "later"
    with pytest.raises(ModelConfigError, match="queue_delay_from 'later'"):
        _delay_from_instance_free(config)
