"""A sequence's implicit state starts from its ``initial_state`` (zero_data or a data_file under the
model's ``initial_state/`` folder), as in Triton; a bad initial state fails only its own model."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from tests.support import ServerProcess, save_onnx
from trt.protos import model_config_pb2
from trt.server.core.datatypes import BF16_DTYPE
from trt.server.core.errors import ModelConfigError
from trt.server.core.scheduling.sequence_controls import initial_state_values


def _running_sum() -> object:
    """OUTPUT = ACC_IN + INPUT; ACC_OUT = OUTPUT: the state is the running sum."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["ACC_IN", "INPUT"], ["OUTPUT"]),
            helper.make_node("Identity", ["OUTPUT"], ["ACC_OUT"]),
        ],
        "running_sum",
        [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 1]) for n in ("INPUT", "ACC_IN")],
        [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 1]) for n in ("OUTPUT", "ACC_OUT")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _config(name: str, initial_state: str) -> str:
    return f"""
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 2
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
sequence_batching {{
  state [ {{
    input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ]
    {initial_state}
  }} ]
}}
"""


def _model(repo: Path, name: str, initial_state: str) -> Path:
    save_onnx(_running_sum(), repo / name / "1" / "model.onnx")
    (repo / name / "config.pbtxt").write_text(_config(name, initial_state))
    return repo / name


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    repo = tmp_path_factory.mktemp("initial_state_repo")
    seeded = _model(
        repo,
        "seeded",
        'initial_state [ { name: "seed" data_type: TYPE_INT32 dims: [ 1 ] data_file: "seed.bin" } ]',
    )
    (seeded / "initial_state").mkdir()
    (seeded / "initial_state" / "seed.bin").write_bytes(np.array([100], np.int32).tobytes())
    _model(
        repo, "zeroed", 'initial_state [ { name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } ]'
    )
    _model(
        repo,
        "missing_file",
        'initial_state [ { name: "s" data_type: TYPE_INT32 dims: [ 1 ] data_file: "none.bin" } ]',
    )
    short = _model(
        repo,
        "short_file",
        'initial_state [ { name: "s" data_type: TYPE_INT32 dims: [ 1 ] data_file: "s.bin" } ]',
    )
    (short / "initial_state").mkdir()
    (short / "initial_state" / "s.bin").write_bytes(b"\x01\x02")
    _model(
        repo,
        "escaping",
        'initial_state [ { name: "s" data_type: TYPE_INT32 dims: [ 1 ] data_file: "../config.pbtxt" } ]',
    )
    proc = ServerProcess([repo], ["--exit-on-error=false"]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _add(module, client, model: str, value: int, sequence: int, start: bool = False) -> int:  # type: ignore[no-untyped-def]
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    result = client.infer(model, [tensor], sequence_id=sequence, sequence_start=start)
    return int(result.as_numpy("OUTPUT")[0][0])


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_sequence_starts_from_its_initial_state(server: ServerProcess, module) -> None:  # type: ignore[no-untyped-def]
    client = module.InferenceServerClient(server.http_url if module is httpclient else server.grpc_url)
    first = 70 + (module is grpcclient)
    assert _add(module, client, "seeded", 5, first, start=True) == 105  # the data_file's 100, plus 5
    assert _add(module, client, "seeded", 3, first) == 108
    assert _add(module, client, "seeded", 1, first + 10, start=True) == 101  # every sequence starts from it
    assert _add(module, client, "zeroed", 5, first, start=True) == 5


def test_a_bad_initial_state_fails_only_its_model(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    index = {row["name"]: row for row in client.get_model_repository_index()}
    assert "no file initial_state/none.bin" in index["missing_file"]["reason"]
    assert "s.bin has 2 bytes; dims [1] of INT32 need 4" in index["short_file"]["reason"]
    assert "must be inside initial_state/" in index["escaping"]["reason"]
    assert all(index[name]["state"] == "READY" for name in ("seeded", "zeroed"))


@pytest.mark.parametrize(
    ("data_type", "reason"),
    [
        ("TYPE_INT32", "s.bin has 2 bytes; dims [1] of INT32 need 4"),
        ("TYPE_FP64", "s.bin has 2 bytes; dims [1] of FP64 need 8"),
    ],
)
def test_an_initial_state_file_that_cannot_be_read_is_a_config_error(
    tmp_path: Path, data_type: str, reason: str
) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "s.bin").write_bytes(b"\x01\x02")
    config = model_config_pb2.ModelConfig(name="m")
    kind = model_config_pb2.DataType.Value(data_type)
    state = config.sequence_batching.state.add(input_name="s", output_name="o", data_type=kind, dims=[1])
    state.initial_state.add(name="s", data_type=kind, dims=[1], data_file="s.bin")
    with pytest.raises(ModelConfigError, match=re.escape(reason)):
        initial_state_values(config, tmp_path)


def test_bf16_states_start_from_zeros_or_from_their_file(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "s.bin").write_bytes(np.array([1.5, -2.0], BF16_DTYPE).tobytes())
    config = model_config_pb2.ModelConfig(name="m")
    bf16 = model_config_pb2.TYPE_BF16
    config.sequence_batching.state.add(input_name="zeroed", output_name="o1", data_type=bf16, dims=[3])
    seeded = config.sequence_batching.state.add(
        input_name="seeded", output_name="o2", data_type=bf16, dims=[2]
    )
    seeded.initial_state.add(name="s", data_type=bf16, dims=[2], data_file="s.bin")
    values = initial_state_values(config, tmp_path)
    assert values["zeroed"].dtype == BF16_DTYPE and values["zeroed"].tolist() == [0.0, 0.0, 0.0]
    assert values["seeded"].dtype == BF16_DTYPE and values["seeded"].tolist() == [1.5, -2.0]


@pytest.mark.parametrize("initial", ["zero_data: true", 'data_file: "s.bin"', None])
def test_a_state_too_large_to_make_is_refused_before_it_is_made(tmp_path: Path, initial: str | None) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "s.bin").write_bytes(b"\x00" * 16)  # never read: the size comes first
    config = model_config_pb2.ModelConfig(name="m")
    state = config.sequence_batching.state.add(
        input_name="s", output_name="o", data_type=model_config_pb2.TYPE_FP32, dims=[65536, 65536]
    )
    if initial is not None:
        field = {"zero_data": True} if initial.startswith("zero") else {"data_file": "s.bin"}
        state.initial_state.add(name="s", data_type=model_config_pb2.TYPE_FP32, dims=[65536, 65536], **field)
    with pytest.raises(ModelConfigError, match=r"shape \[65536, 65536\] of FP32 takes 17,179,869,184 bytes"):
        initial_state_values(config, tmp_path)
