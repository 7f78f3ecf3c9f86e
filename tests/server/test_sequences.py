"""Sequence batching: stateful models fed in order, with control inputs and implicit state."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, save_onnx

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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("sequence_repo")
    for name, config in (("accumulate", ACCUMULATE % 5_000_000), ("short_lived", ACCUMULATE % 200_000)):
        save_onnx(_accumulator(), repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nplatform: "onnxruntime_onnx"\n{config}')
    save_onnx(_corrid_echo(), repo / "corrid" / "1" / "model.onnx")
    (repo / "corrid" / "config.pbtxt").write_text('name: "corrid"\nplatform: "onnxruntime_onnx"\n' + CORRID)
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
) -> int:
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    result = client.infer(model, [tensor], sequence_id=sequence, sequence_start=start, sequence_end=end)
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
    with pytest.raises(InferenceServerException, match="sequence_id"):
        _step(httpclient, client, "accumulate", 1, 0)


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
