"""Sequence batching: stateful models fed in order, with control inputs and implicit state."""

from __future__ import annotations

import asyncio
import http.client
import json
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, save_onnx, write_python_model

ONE = helper.make_tensor("one", TensorProto.INT32, [1], [1])


def _accumulator() -> object:
    """OUTPUT = ACC_IN * (1 - START) + INPUT; ACC_OUT = OUTPUT (the state carried to the next request)."""
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["one", "START"], ["keep"]),
            helper.make_node("Mul", ["ACC_IN", "keep"], ["kept"]),
            helper.make_node("Add", ["kept", "INPUT"], ["OUTPUT"]),
            helper.make_node("Identity", ["OUTPUT"], ["ACC_OUT"]),
        ],
        "accumulate",
        [
            helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 1])
            for n in ("INPUT", "START", "ACC_IN")
        ],
        [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 1]) for n in ("OUTPUT", "ACC_OUT")],
        [ONE],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _corrid_echo() -> object:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["CORRID"], ["ID"]), helper.make_node("Identity", ["INPUT"], ["SAME"])],
        "corrid",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", 1]) for n in ("INPUT", "CORRID")],
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", 1]) for n in ("ID", "SAME")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _string_corrid_echo() -> object:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["CORRID"], ["ID"]), helper.make_node("Identity", ["INPUT"], ["SAME"])],
        "string_corrid",
        [
            helper.make_tensor_value_info("INPUT", TensorProto.INT64, ["batch", 1]),
            helper.make_tensor_value_info("CORRID", TensorProto.STRING, ["batch", 1]),
        ],
        [
            helper.make_tensor_value_info("ID", TensorProto.STRING, ["batch", 1]),
            helper.make_tensor_value_info("SAME", TensorProto.INT64, ["batch", 1]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


ACCUMULATE = """
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: %d
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } } ]
}
"""

CORRID = """
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "ID" data_type: TYPE_INT64 dims: [ 1 ] }, { name: "SAME" data_type: TYPE_INT64 dims: [ 1 ] } ]
sequence_batching {
  control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT64 } ] } ]
}
"""

# Triton's simple_string_dyna_sequence: the CORRID control carries string ids as BYTES.
STRING_CORRID = """
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "ID" data_type: TYPE_STRING dims: [ 1 ] }, { name: "SAME" data_type: TYPE_INT64 dims: [ 1 ] } ]
sequence_batching {
  control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ]
}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("sequence_repo")
    for name, config in (("accumulate", ACCUMULATE % 5_000_000), ("short_lived", ACCUMULATE % 200_000)):
        save_onnx(_accumulator(), repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nplatform: "onnxruntime_onnx"\n{config}')
    save_onnx(_corrid_echo(), repo / "corrid" / "1" / "model.onnx")
    (repo / "corrid" / "config.pbtxt").write_text('name: "corrid"\nplatform: "onnxruntime_onnx"\n' + CORRID)
    save_onnx(_corrid_echo(), repo / "iterative_corrid" / "1" / "model.onnx")
    iterative = CORRID.replace("sequence_batching {", "sequence_batching {\n  iterative_sequence: true")
    (repo / "iterative_corrid" / "config.pbtxt").write_text(
        'name: "iterative_corrid"\nplatform: "onnxruntime_onnx"\n' + iterative
    )
    save_onnx(_string_corrid_echo(), repo / "string_corrid" / "1" / "model.onnx")
    (repo / "string_corrid" / "config.pbtxt").write_text(
        'name: "string_corrid"\nplatform: "onnxruntime_onnx"\n' + STRING_CORRID
    )
    proc = ServerProcess([repo]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _step(
    module: Any,
    client: Any,
    model: str,
    value: int,
    sequence: int | str,
    start: bool = False,
    end: bool = False,
    timeout: int | None = None,  # microseconds
) -> int:
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    result = client.infer(
        model, [tensor], sequence_id=sequence, sequence_start=start, sequence_end=end, timeout=timeout
    )
    return int(result.as_numpy("OUTPUT")[0][0])


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_interleaved_sequences_keep_their_own_state(server: ServerProcess, module: Any) -> None:
    client = module.InferenceServerClient(server.http_url if module is httpclient else server.grpc_url)
    numbered, named = 1000 + (module is grpcclient), f"session-{module.__name__}"
    assert _step(module, client, "accumulate", 2, numbered, start=True) == 2
    assert _step(module, client, "accumulate", 10, named, start=True) == 10  # a string id
    assert _step(module, client, "accumulate", 3, numbered) == 5
    assert _step(module, client, "accumulate", 20, named, end=True) == 30
    assert _step(module, client, "accumulate", 4, numbered, end=True) == 9
    assert _step(module, client, "accumulate", 7, numbered, start=True) == 7  # a new sequence starts at zero


def test_a_request_for_an_unknown_or_ended_sequence_needs_start(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match="START flag") as info:
        _step(httpclient, client, "accumulate", 1, 4242)
    assert info.value.status() == "400"
    _step(httpclient, client, "accumulate", 1, 4243, start=True, end=True)
    with pytest.raises(InferenceServerException, match="START flag"):
        _step(httpclient, client, "accumulate", 1, 4243)
    with pytest.raises(InferenceServerException) as info:  # Triton's words
        _step(httpclient, client, "accumulate", 1, 0)
    assert info.value.message() == (
        "inference request to model 'accumulate' must specify a non-zero or non-empty correlation ID"
    )


def test_an_idle_sequence_is_released(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    _step(httpclient, client, "short_lived", 5, 77, start=True)
    time.sleep(0.7)  # max_sequence_idle_microseconds: 200000
    with pytest.raises(InferenceServerException, match="START flag"):
        _step(httpclient, client, "short_lived", 1, 77)


def test_the_corrid_control_carries_the_sequence_id(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT", [1, 1], "INT64")
    tensor.set_data_from_numpy(np.array([[5]], dtype=np.int64))
    result = client.infer("corrid", [tensor], sequence_id=314, sequence_start=True, sequence_end=True)
    assert int(result.as_numpy("ID")[0][0]) == 314
    assert int(result.as_numpy("SAME")[0][0]) == 5


def test_an_iterative_sequence_model_gives_a_request_without_an_id_a_sequence_of_its_own(
    server: ServerProcess,
) -> None:
    """A tensor backend cannot reschedule a request, so each is a whole sequence (START and END)."""
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT", [1, 1], "INT64")
    tensor.set_data_from_numpy(np.array([[5]], dtype=np.int64))
    given = [int(client.infer("iterative_corrid", [tensor]).as_numpy("ID")[0][0]) for _ in range(3)]
    assert given == [1, 2, 3]  # Triton's counter, from 1
    # A client's own ids still work, and an open one is never handed out.
    client.infer("iterative_corrid", [tensor], sequence_id=4, sequence_start=True)
    assert int(client.infer("iterative_corrid", [tensor]).as_numpy("ID")[0][0]) == 5
    with pytest.raises(InferenceServerException, match="must specify a non-zero or non-empty correlation ID"):
        client.infer("corrid", [tensor])  # not iterative: an id is needed


def test_a_string_id_is_refused_where_the_corrid_control_carries_integers(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT", [1, 1], "INT64")
    tensor.set_data_from_numpy(np.array([[6]], dtype=np.int64))
    with pytest.raises(InferenceServerException) as info:
        client.infer("corrid", [tensor], sequence_id="user-7", sequence_start=True, sequence_end=True)
    assert info.value.status() == "400"
    assert info.value.message() == (  # current Triton's words (core ValidateCorrelationId)
        "[request id: <id_unknown>] sequence batching control 'CORRID' data-type is 'BYTES', but model "
        "'corrid' expects 'INT64'"
    )


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_string_corrid_control_carries_string_and_integer_ids_as_text(
    server: ServerProcess, module: Any
) -> None:
    client = module.InferenceServerClient(server.http_url if module is httpclient else server.grpc_url)
    tensor = module.InferInput("INPUT", [1, 1], "INT64")
    tensor.set_data_from_numpy(np.array([[8]], dtype=np.int64))
    named = client.infer(
        "string_corrid", [tensor], sequence_id="user-7", sequence_start=True, sequence_end=True
    )
    assert named.as_numpy("ID")[0][0] == b"user-7"
    assert int(named.as_numpy("SAME")[0][0]) == 8
    numbered = client.infer(
        "string_corrid", [tensor], sequence_id=2718, sequence_start=True, sequence_end=True
    )
    assert numbered.as_numpy("ID")[0][0] == b"2718"


# Batching across sequences, backlog and idle release, served the way users call them.

DIRECT_FULL = """
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
sequence_batching {
  max_sequence_idle_microseconds: %(idle)d
  direct { %(direct)s }
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
"""

OLDEST = """
max_batch_size: %(batch)d
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
sequence_batching {
  oldest { %(oldest)s }
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
"""

BATCHING_MODELS = {
    # Every slot must be ready before an execution (or 5 s pass): rounds of 4 sequences run as one.
    "direct_full": DIRECT_FULL
    % {"idle": 10_000_000, "direct": "minimum_slot_utilization: 1.0 max_queue_delay_microseconds: 5000000"},
    "two_slots": DIRECT_FULL.replace("max_batch_size: 4", "max_batch_size: 2") % {"idle": 10_000_000, "direct": ""},
    "one_slot_idle": DIRECT_FULL.replace("max_batch_size: 4", "max_batch_size: 1") % {"idle": 300_000, "direct": ""},
    "oldest_four": OLDEST
    % {"batch": 4, "oldest": "max_candidate_sequences: 4 preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 5000000"},
    "oldest_pair": OLDEST
    % {"batch": 2, "oldest": "max_candidate_sequences: 2 preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 400000"},
}  # fmt: skip


@pytest.fixture(scope="module")
def batching_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("sequence_batching_repo")
    for name, config in BATCHING_MODELS.items():
        save_onnx(_accumulator(), repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nplatform: "onnxruntime_onnx"\n{config}')
    proc = ServerProcess([repo]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _stats(server: ServerProcess, model: str) -> dict:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats") as reply:
        return json.loads(reply.read())["model_stats"][0]


def _run_sequence(server: ServerProcess, model: str, sequence: int | str, values: list[int]) -> list[int]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        last = len(values) - 1
        return [
            _step(httpclient, client, model, value, sequence, start=i == 0, end=i == last)
            for i, value in enumerate(values)
        ]
    finally:
        client.close()


def _running_sums(values: list[int]) -> list[int]:
    return [sum(values[: i + 1]) for i in range(len(values))]


def test_direct_batches_the_ready_slots_of_different_sequences(batching_server: ServerProcess) -> None:
    before = _stats(batching_server, "direct_full")
    plans = {100 + n: [n + 1, 10 * (n + 1), 100 * (n + 1), 1000 * (n + 1)] for n in range(4)}
    with ThreadPoolExecutor(4) as pool:
        futures = {
            seq: pool.submit(_run_sequence, batching_server, "direct_full", seq, v)
            for seq, v in plans.items()
        }
        results = {seq: future.result(timeout=60) for seq, future in futures.items()}
    for sequence, values in plans.items():
        assert results[sequence] == _running_sums(values)  # each row kept its own state
    after = _stats(batching_server, "direct_full")
    assert after["inference_count"] - before["inference_count"] == 16
    assert after["execution_count"] - before["execution_count"] == 4  # one execution per round
    assert [b["batch_size"] for b in after["batch_stats"]] == [4]


def test_oldest_batches_candidate_sequences_up_to_the_preferred_size(batching_server: ServerProcess) -> None:
    before = _stats(batching_server, "oldest_four")
    plans = {f"oldest-{n}": [n + 1, n + 2, n + 3] for n in range(4)}  # string ids
    with ThreadPoolExecutor(4) as pool:
        futures = {
            seq: pool.submit(_run_sequence, batching_server, "oldest_four", seq, v)
            for seq, v in plans.items()
        }
        results = {seq: future.result(timeout=60) for seq, future in futures.items()}
    for sequence, values in plans.items():
        assert results[sequence] == _running_sums(values)
    after = _stats(batching_server, "oldest_four")
    assert after["inference_count"] - before["inference_count"] == 12
    assert after["execution_count"] - before["execution_count"] == 3  # the preferred size, 4, each time


def test_oldest_never_batches_two_requests_of_one_sequence(batching_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(batching_server.http_url, concurrency=2)
    try:
        assert _step(httpclient, client, "oldest_pair", 1, 555, start=True) == 1
        before = _stats(batching_server, "oldest_pair")
        pending = []
        for value in (10, 100):
            tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            pending.append(client.async_infer("oldest_pair", [tensor], sequence_id=555))
        outputs = sorted(int(p.get_result(timeout=30).as_numpy("OUTPUT")[0][0]) for p in pending)
    finally:
        client.close()
    assert outputs[1] == 111 and outputs[0] in (11, 101)  # one after the other, in order
    after = _stats(batching_server, "oldest_pair")
    assert after["execution_count"] - before["execution_count"] == 2  # two executions of one
    assert after["inference_count"] - before["inference_count"] == 2


def test_a_new_sequence_waits_for_a_free_slot_in_the_backlog(batching_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(batching_server.http_url)
    try:
        assert _step(httpclient, client, "two_slots", 1, 701, start=True) == 1
        assert _step(httpclient, client, "two_slots", 2, 702, start=True) == 2
        with ThreadPoolExecutor(1) as pool:
            third = pool.submit(_run_sequence, batching_server, "two_slots", 703, [5, 6])
            time.sleep(0.8)
            assert not third.done()  # both slots are taken: the backlog holds its START
            assert _step(httpclient, client, "two_slots", 3, 702) == 5  # slot holders keep running
            assert _step(httpclient, client, "two_slots", 4, 701, end=True) == 5  # frees a slot
            assert third.result(timeout=10) == [5, 11]
        assert _step(httpclient, client, "two_slots", 5, 702, end=True) == 10
    finally:
        client.close()


def test_an_idle_sequence_gives_its_slot_to_the_backlog(batching_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(batching_server.http_url)
    try:
        assert _step(httpclient, client, "one_slot_idle", 1, 801, start=True) == 1
        started = time.monotonic()
        assert _run_sequence(batching_server, "one_slot_idle", 802, [7, 8]) == [7, 15]
        assert 0.25 < time.monotonic() - started < 5  # waited for 801 to go idle (300 ms)
        with pytest.raises(InferenceServerException, match="START flag"):
            _step(httpclient, client, "one_slot_idle", 1, 801)
    finally:
        client.close()


def test_a_sequence_request_must_have_batch_size_one(batching_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(batching_server.http_url)
    tensor = httpclient.InferInput("INPUT", [2, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[1], [2]], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="batch-size 1") as info:
        client.infer("two_slots", [tensor], sequence_id=901, sequence_start=True)
    assert info.value.status() == "400"


# What the model receives: rows, padding and control values, seen in-process with a real instance.

CONTROLLED = """
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  %s
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
"""


class _RecordingAccumulator:
    """A real (slow) instance: OUTPUT = ACC_IN * (1 - START) + INPUT; remembers every batch it ran."""

    def __init__(self) -> None:
        self.batches: list[dict[str, list]] = []

    def execute(self, inputs: dict, output_names: list) -> dict:
        time.sleep(0.05)
        self.batches.append({name: np.asarray(array).reshape(-1).tolist() for name, array in inputs.items()})
        output = inputs["ACC_IN"] * (1 - inputs["START"]) + inputs["INPUT"]
        return {"OUTPUT": output, "ACC_OUT": output}

    def close(self) -> None:
        pass


def _in_process(strategy: str, scenario: Any) -> _RecordingAccumulator:
    from google.protobuf import text_format

    from trt.protos import model_config_pb2
    from trt.server.core.extensions.statistics import ModelStatistics
    from trt.server.core.scheduling.instance_pool import InstancePool
    from trt.server.core.scheduling.sequence_batcher import SequenceBatcher

    config = text_format.Parse(CONTROLLED % strategy, model_config_pb2.ModelConfig())
    instance = _RecordingAccumulator()

    async def run() -> None:
        pool = InstancePool("sequence-test", [instance])
        batcher = SequenceBatcher("m", pool, [instance], ModelStatistics("m", "1"), config)

        def send(sequence: int, value: int, start: bool = False, end: bool = False) -> asyncio.Future:
            feeds = {"INPUT": np.full((1, 1), value, np.int32)}
            return asyncio.ensure_future(batcher.execute(feeds, ["OUTPUT"], 1, sequence, start, end))

        try:
            await scenario(send)
        finally:
            batcher.stop()
            pool.shutdown()

    asyncio.run(run())
    return instance


def _value(result: tuple) -> int:
    return int(result[0]["OUTPUT"][0][0])


def test_direct_pads_idle_slots_with_ready_false_and_keeps_each_slot_in_its_row() -> None:
    async def scenario(send: Any) -> None:
        assert _value(await send(11, 1, start=True)) == 1  # slot 0
        assert _value(await send(22, 2, start=True)) == 2  # slot 1
        assert _value(await send(22, 3)) == 5  # only slot 1 has a request: slot 0 is padding
        busy = send(33, 4, start=True)  # slot 2 keeps the instance busy while two more arrive
        await asyncio.sleep(0.01)
        both = [send(11, 10, end=True), send(22, 20)]
        assert _value(await busy) == 4
        assert [_value(r) for r in await asyncio.gather(*both)] == [11, 25]

    batches = _in_process("direct { }", scenario)
    padded = batches.batches[2]
    assert padded["READY"] == [False, True] and padded["CORRID"] == [0, 22]
    assert padded["START"] == [0, 0] and padded["INPUT"][1] == 3 and padded["ACC_IN"] == [0, 2]
    together = batches.batches[4]
    assert together["READY"] == [True, True] and together["CORRID"] == [11, 22]
    assert together["END"] == [1.0, 0.0] and together["ACC_IN"] == [1, 5]


def test_oldest_batches_the_oldest_request_of_each_sequence_without_padding() -> None:
    async def scenario(send: Any) -> None:
        first = send(33, 1, start=True)
        await asyncio.sleep(0.01)  # the instance is busy with 33: the next three queue up
        later = [send(11, 1, start=True), send(11, 2, end=True), send(22, 5, start=True)]
        assert _value(await first) == 1
        assert [_value(r) for r in await asyncio.gather(*later)] == [1, 3, 5]

    batches = _in_process("oldest { max_candidate_sequences: 3 }", scenario)
    assert [b["CORRID"] for b in batches.batches] == [[33], [11, 22], [11]]
    assert all(all(b["READY"]) for b in batches.batches)
    assert batches.batches[2]["END"] == [1.0]


# Python models keep sequence state in their own process: a sequence must stay on its instance.

PYTHON_ACCUMULATOR = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.instance = args["model_instance_name"]
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().reshape(-1)[0])
            key = request.correlation_id()
            total = value + (0 if request.flags() & 1 else self.totals.get(key, 0))
            self.totals[key] = total
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", np.array([[total]], dtype=np.int32)),
                pb_utils.Tensor("WHERE", np.array([[self.instance.encode()]], dtype=np.object_)),
            ]))
        return responses
"""

PYTHON_SEQUENCE_CONFIG = """
name: "py_sequence"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "WHERE" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
sequence_batching { max_sequence_idle_microseconds: 10000000 }
"""

# One instance that does not batch: one sequence slot, so one sequence at a time.
ONE_SLOT_CONFIG = """
name: "py_one_slot"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1, 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1, 1 ] }, { name: "WHERE" data_type: TYPE_STRING dims: [ 1, 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
sequence_batching { max_sequence_idle_microseconds: 10000000 }
"""

# Triton hands the sequence batcher's control tensors to Python models as inputs too.
PYTHON_CONTROLS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            def value(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            code = 100 * int(value("START")[0][0]) + 10 * int(value("END")[0][0]) + int(value("READY")[0][0])
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("CODE", np.array([[code]], dtype=np.int32)),
                pb_utils.Tensor("ID", value("CORRID").astype(np.object_)),
            ]))
        return responses
"""

PYTHON_CONTROLS_CONFIG = """
name: "py_controls"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "CODE" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "ID" data_type: TYPE_STRING dims: [ 1 ] } ]
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
}
"""

# Triton's "BLS with stateful models": drives py_controls and the ONNX accumulate model through a
# sequence of three requests (correlation_id, and the START and END flags), then one more request
# on the ended sequence; answers their codes and sums, and the last one's error.
BLS_SEQUENCE = """
import numpy as np
import triton_python_backend_utils as pb_utils

START, END = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START, pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END


def call(model, output, value, flags, dtype=np.int32):
    request = pb_utils.InferenceRequest(
        model_name=model, requested_output_names=[output], correlation_id=4242, flags=flags,
        inputs=[pb_utils.Tensor("INPUT", np.array([[value]], dtype=dtype))],
    )
    return request.exec()


class TritonPythonModel:
    def execute(self, requests):
        codes = [
            int(call("py_controls", "CODE", 0, flags).output_tensors()[0].as_numpy()[0][0])
            for flags in (START, 0, END)
        ]
        sums = [
            int(call("py_sequence", "OUTPUT", value, flags).output_tensors()[0].as_numpy()[0][0])
            for value, flags in ((2, START), (3, 0), (4, END))
        ]
        after = call("py_sequence", "OUTPUT", 1, 0)
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("CODES", np.array(codes, np.int32)),
                pb_utils.Tensor("SUMS", np.array(sums, np.int32)),
                pb_utils.Tensor("AFTER", np.array([after.error().message().encode()], np.object_)),
            ])
            for _ in requests
        ]
"""

BLS_SEQUENCE_CONFIG = """
name: "bls_sequence"
backend: "python"
input [ { name: "GO" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "CODES" data_type: TYPE_INT32 dims: [ 3 ] }, { name: "SUMS" data_type: TYPE_INT32 dims: [ 3 ] },
  { name: "AFTER" data_type: TYPE_STRING dims: [ 1 ] }
]
"""


@pytest.fixture(scope="module")
def python_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("python_sequence_repo")
    for name, source, config in (
        ("py_sequence", PYTHON_ACCUMULATOR, PYTHON_SEQUENCE_CONFIG),
        ("py_controls", PYTHON_CONTROLS, PYTHON_CONTROLS_CONFIG),
        ("py_one_slot", PYTHON_ACCUMULATOR, ONE_SLOT_CONFIG),
        ("bls_sequence", BLS_SEQUENCE, BLS_SEQUENCE_CONFIG),
    ):
        write_python_model(repo, name, source, config)
    proc = ServerProcess([repo]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_python_sequence_stays_on_the_instance_it_started_on(
    python_server: ServerProcess, module: Any
) -> None:
    url = python_server.http_url if module is httpclient else python_server.grpc_url
    client = module.InferenceServerClient(url)
    sequences = [f"py-{module.__name__}-{n}" for n in range(4)]
    places: dict[str, set[str]] = {s: set() for s in sequences}
    totals = dict.fromkeys(sequences, 0)
    for step in range(5):  # interleaved: each request of a sequence follows requests of the others
        for n, sequence in enumerate(sequences):
            value = 10 * n + step + 1
            tensor = module.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            result = client.infer(
                "py_sequence",
                [tensor],
                sequence_id=sequence,
                sequence_start=step == 0,
                sequence_end=step == 4,
            )
            totals[sequence] += value
            assert int(result.as_numpy("OUTPUT")[0][0]) == totals[sequence]
            places[sequence].add(result.as_numpy("WHERE").reshape(-1)[0].decode())
    assert all(len(where) == 1 for where in places.values())  # each sequence on one instance
    assert len(set.union(*places.values())) == 2  # and the sequences spread over both
    with pytest.raises(InferenceServerException, match="START flag"):
        tensor = module.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[1]], dtype=np.int32))
        client.infer("py_sequence", [tensor], sequence_id=sequences[0])  # it has ended


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_python_sequence_model_reads_the_control_tensors(python_server: ServerProcess, module: Any) -> None:
    url = python_server.http_url if module is httpclient else python_server.grpc_url
    client = module.InferenceServerClient(url)
    sequence = f"controls-{module.__name__}"
    codes = []
    for step, (start, end) in enumerate([(True, False), (False, False), (False, True)]):
        tensor = module.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[step]], dtype=np.int32))
        result = client.infer(
            "py_controls", [tensor], sequence_id=sequence, sequence_start=start, sequence_end=end
        )
        codes.append(int(result.as_numpy("CODE")[0][0]))
        assert result.as_numpy("ID").reshape(-1)[0] == sequence.encode()
    assert codes == [101, 1, 11]  # START on the first, END on the last, READY on every request


def test_a_python_model_drives_a_sequence_through_bls_with_its_id_and_flags(
    python_server: ServerProcess,
) -> None:
    client = httpclient.InferenceServerClient(python_server.http_url)
    tensor = httpclient.InferInput("GO", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))
    result = client.infer("bls_sequence", [tensor])
    assert result.as_numpy("CODES").tolist() == [101, 1, 11]  # START, then neither, then END
    assert result.as_numpy("SUMS").tolist() == [2, 5, 9]  # one sequence, on one instance
    assert "START flag" in result.as_numpy("AFTER")[0].decode()  # END ended it


def test_a_new_python_sequence_waits_in_the_backlog_while_every_slot_is_taken(
    python_server: ServerProcess,
) -> None:
    """As Triton's sequence batcher: py_one_slot has one slot, so B starts once A has ended."""

    def step(sequence: str, value: int, start: bool = False, end: bool = False) -> int:
        tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        result = httpclient.InferenceServerClient(python_server.http_url).infer(
            "py_one_slot", [tensor], sequence_id=sequence, sequence_start=start, sequence_end=end
        )
        return int(result.as_numpy("OUTPUT")[0][0])

    assert step("A", 1, start=True) == 1
    with ThreadPoolExecutor(1) as pool:
        b_started = pool.submit(step, "B", 10, True)
        time.sleep(0.5)
        assert not b_started.done()  # no slot for B while A holds the only one
        assert step("A", 2) == 3
        assert step("A", 3, end=True) == 6
        assert b_started.result(timeout=10) == 10  # A's END freed the slot
    assert step("B", 5, end=True) == 15


def test_a_backlogged_python_sequence_is_dropped_when_its_timeout_runs_out(
    python_server: ServerProcess,
) -> None:
    """As the tensor batcher (below) and Triton's: B's START waits for py_one_slot's only slot past
    its request timeout, so B is dropped; A keeps the slot, and once A ends C starts."""
    client = httpclient.InferenceServerClient(python_server.http_url)

    def step(
        sequence: str, value: int, start: bool = False, end: bool = False, timeout: int | None = None
    ) -> int:
        return _step(httpclient, client, "py_one_slot", value, sequence, start, end, timeout)

    try:
        assert step("A-t", 1, start=True) == 1
        started = time.monotonic()
        with pytest.raises(InferenceServerException, match="timeout of the corresponding sequence") as info:
            step("B-t", 10, start=True, timeout=300_000)
        assert info.value.status() == "503" and 0.25 < time.monotonic() - started < 3
        with pytest.raises(InferenceServerException, match="START flag"):  # B is gone
            step("B-t", 5)
        assert step("A-t", 2, end=True) == 3  # the slot holder is not
        assert step("C-t", 7, start=True, end=True, timeout=300_000) == 7  # and the slot came back
    finally:
        client.close()


TORCH_ACCUMULATOR = """
platform: "pytorch_libtorch"
max_batch_size: 2
input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
sequence_batching {
  direct { minimum_slot_utilization: 1.0 max_queue_delay_microseconds: 5000000 }
  control_input [ { name: "START__1" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "ACC__2" output_name: "ACC_OUT__1" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
"""


def test_a_torchscript_sequence_model_gets_controls_state_and_batched_slots(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")

    class Accumulate(torch.nn.Module):
        def forward(self, x: Any, start: Any, acc: Any) -> tuple[Any, Any]:
            out = acc * (1 - start) + x
            return out, out

    (tmp_path / "repo" / "torch_acc" / "1").mkdir(parents=True)
    example = (torch.ones(2, 1, dtype=torch.int32),) * 3
    traced = torch.jit.trace(Accumulate(), example)  # tracing needs no source, unlike scripting
    traced.save(str(tmp_path / "repo" / "torch_acc" / "1" / "model.pt"))
    (tmp_path / "repo" / "torch_acc" / "config.pbtxt").write_text(TORCH_ACCUMULATOR)
    proc = ServerProcess([tmp_path / "repo"]).start(tmp_path)
    try:
        plans = {31: [1, 2, 3], 32: [10, 20, 30]}

        def run(sequence: int) -> list[int]:
            client = httpclient.InferenceServerClient(proc.http_url)
            outputs = []
            for i, value in enumerate(plans[sequence]):
                tensor = httpclient.InferInput("INPUT__0", [1, 1], "INT32")
                tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
                result = client.infer("torch_acc", [tensor], sequence_id=sequence, sequence_start=i == 0)
                outputs.append(int(result.as_numpy("OUTPUT__0")[0][0]))
            return outputs

        with ThreadPoolExecutor(2) as pool:
            results = dict(zip(plans, pool.map(run, plans), strict=True))
        assert results == {31: [1, 3, 6], 32: [10, 30, 60]}
        stats = _stats(proc, "torch_acc")
        assert stats["execution_count"] == 3 and stats["inference_count"] == 6  # both slots in each
    finally:
        proc.stop()


def test_a_backlogged_sequence_is_dropped_when_its_timeout_runs_out(batching_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(batching_server.http_url)
    try:
        assert _step(httpclient, client, "two_slots", 1, 711, start=True) == 1
        assert _step(httpclient, client, "two_slots", 1, 712, start=True) == 1
        tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[1]], dtype=np.int32))
        started = time.monotonic()
        with pytest.raises(InferenceServerException, match="timeout of the corresponding sequence") as info:
            client.infer("two_slots", [tensor], sequence_id=713, sequence_start=True, timeout=300_000)
        assert info.value.status() == "503" and 0.25 < time.monotonic() - started < 3
        with pytest.raises(InferenceServerException, match="START flag"):  # the sequence is gone
            _step(httpclient, client, "two_slots", 1, 713)
        assert _step(httpclient, client, "two_slots", 1, 711, end=True) == 2  # the slot holders are not
        assert _step(httpclient, client, "two_slots", 1, 712, end=True) == 2
    finally:
        client.close()


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_request_of_two_rows_to_a_sequence_model_is_refused_in_tritons_words(
    python_server: ServerProcess, server: ServerProcess, module: Any
) -> None:
    """A sequence is one row a request: Triton refuses more (a Python model was given the two rows
    and answered one, the second lost)."""
    tensor = module.InferInput("INPUT", [2, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[1], [2]], dtype=np.int32))
    for running, model in ((python_server, "py_sequence"), (server, "accumulate")):
        url = running.http_url if module is httpclient else running.grpc_url
        client = module.InferenceServerClient(url)
        with pytest.raises(InferenceServerException) as info:
            client.infer(model, [tensor], sequence_id=11, sequence_start=True, sequence_end=True)
        assert info.value.message() == (
            f"inference request to model '{model}' must specify batch-size 1 due to requirements of "
            "sequence batcher"
        )


@pytest.mark.parametrize(
    ("parameters", "refusal"),
    [
        ({"sequence_id": -5, "sequence_start": True}, "'sequence_id' must be an unsigned 64-bit integer"),
        ({"sequence_id": 1.5, "sequence_start": True}, "'sequence_id' must be an unsigned 64-bit integer"),
        ({"sequence_id": 2**64, "sequence_start": True}, "'sequence_id' must be an unsigned 64-bit integer"),
        ({"sequence_id": 5, "sequence_start": 1}, "'sequence_start' must be true or false"),
        ({"sequence_id": 5, "sequence_end": "yes"}, "'sequence_end' must be true or false"),
    ],
)
def test_sequence_parameters_of_the_wrong_kind_are_refused(
    python_server: ServerProcess, parameters: dict[str, Any], refusal: str
) -> None:
    """Triton refuses them as JSON it cannot parse; they were taken as ids and flags of their own."""
    body = {"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [[1]]}]}
    connection = http.client.HTTPConnection(python_server.http_url, timeout=30)
    connection.request("POST", "/v2/models/py_sequence/infer", json.dumps({**body, "parameters": parameters}))
    answer = connection.getresponse()
    assert answer.status == 400
    assert refusal in json.loads(answer.read())["error"]
