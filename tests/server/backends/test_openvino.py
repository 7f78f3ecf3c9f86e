"""OpenVINO IR models, converted in the test from ONNX by OpenVINO's own converter, served by trt serve
and checked with tritonclient against numpy; the backend's sharing of compiled models in-process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

ov = pytest.importorskip("openvino")

from tests.server.core.scheduling.test_sequence_batcher import ACCUMULATE, _accumulator  # noqa: E402
from tests.support import ServerProcess, add_sub_model, save_onnx  # noqa: E402
from trt.protos import model_config_pb2  # noqa: E402
from trt.server.backends.openvino import OpenVinoBackend  # noqa: E402
from trt.server.core.backends.base import InstanceSpec, ModelFiles  # noqa: E402
from trt.server.core.errors import ModelConfigError, ModelLoadError  # noqa: E402
from trt.server.core.models.config import read_config_file  # noqa: E402

WEIGHTS = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
BIAS = np.array([1.0, -1.0, 0.5], dtype=np.float32)


def _linear_onnx() -> Any:
    """y = x @ WEIGHTS + BIAS, x [batch, 4] -> y [batch, 3]."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(WEIGHTS, "w"), numpy_helper.from_array(BIAS, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _convert(onnx_model: Any, work: Path, destination: Path, shape: list[int] | None = None) -> Any:
    """The IR OpenVINO's converter makes from an ONNX model (FP32 weights kept, so numbers match)."""
    source = work / f"{destination.parent.parent.name}.onnx"
    save_onnx(onnx_model, source)
    model = ov.convert_model(str(source), input=shape) if shape else ov.convert_model(str(source))
    destination.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(destination), compress_to_fp16=False)
    return model


def _write(repo: Path, name: str, config: str | None, work: Path, model: Any = None) -> Path:
    _convert(model if model is not None else _linear_onnx(), work, repo / name / "1" / "model.xml")
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)
    return repo / name


# FP32 arithmetic, so that answers match numpy's: on CPUs with AMX, OpenVINO computes FP32 models in
# bfloat16 unless told otherwise (about 1% off here), as it does under Triton.
FP32_ARITHMETIC = 'parameters { key: "INFERENCE_PRECISION_HINT" value { string_value: "f32" } }\n'
LINEAR = (
    """
backend: "openvino"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""
    + FP32_ARITHMETIC
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("openvino_repo")
    work = tmp_path_factory.mktemp("onnx")
    _write(repo, "addsub", None, work, add_sub_model())  # no config: auto-complete fills it
    _write(repo, "linear", LINEAR + "dynamic_batching { max_queue_delay_microseconds: 200000 }\n"
           "instance_group [ { kind: KIND_CPU count: 2 } ]\n", work)  # fmt: skip
    unbatched = LINEAR.replace("max_batch_size: 8", "max_batch_size: 0").replace(
        "dims: [ 4 ]", "dims: [ 2, 4 ]"
    )
    _write(repo, "linear_unbatched", unbatched.replace("dims: [ 3 ]", "dims: [ 2, 3 ]"), work)
    fixed = 'parameters { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value { string_value: "YES" } }\n'
    padding = 'parameters { key: "ENABLE_BATCH_PADDING" value { string_value: "YES" } }\n'
    _write(repo, "linear_padded", LINEAR.replace("8", "4") + fixed + padding, work)
    _write(repo, "linear_fixed", LINEAR.replace("8", "2") + fixed, work)
    _write(
        repo, "bad_streams", LINEAR + 'parameters { key: "NUM_STREAMS" value { string_value: "many" } }', work
    )
    _write(repo, "escapes", LINEAR + 'default_model_filename: "../../linear/1/model.xml"\n', work)
    _write(repo, "accumulate", 'backend: "openvino"\n' + ACCUMULATE % 5_000_000, work, _accumulator())
    # An IR with a fixed batch of 1 whose layout names the batch: Triton's rule says it batches.
    source = work / "layout.onnx"
    save_onnx(_linear_onnx(), source)
    model = ov.convert_model(str(source), input=[1, 4])
    for port in (model.input(0), model.output(0)):
        ov.layout_helpers.set_layout(port, ov.Layout("NC"))
    (repo / "layout" / "1").mkdir(parents=True)
    ov.save_model(model, str(repo / "layout" / "1" / "model.xml"), compress_to_fp16=False)
    # Auto-completed (its batching from the layout), FP32 arithmetic asked for.
    (repo / "layout" / "config.pbtxt").write_text('backend: "openvino"\n' + FP32_ARITHMETIC)
    return repo


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess([repo], ["--exit-on-error=false", "--strict-readiness=false"])
    process.start(tmp_path_factory.mktemp("logs"))
    yield process
    assert process.alive(), process.log()
    process.stop()


def _client(server: ServerProcess, protocol: str) -> Any:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url)
    return grpcclient.InferenceServerClient(server.grpc_url)


def _infer(client: Any, model: str, inputs: dict[str, np.ndarray]) -> Any:
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    tensors = []
    for name, array in inputs.items():
        tensor = module.InferInput(name, list(array.shape), "FP32" if array.dtype == np.float32 else "INT32")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return client.infer(model, tensors)


def test_a_model_without_config_is_completed_from_the_ir(server: ServerProcess) -> None:
    config = httpclient.InferenceServerClient(server.http_url).get_model_config("addsub")
    assert (config["backend"], config["platform"], config["max_batch_size"]) == ("openvino", "", 4)
    assert "dynamic_batching" in config
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [
        ("INPUT0", "TYPE_INT32", [16]),
        ("INPUT1", "TYPE_INT32", [16]),
    ]
    assert [t["name"] for t in config["output"]] == ["OUTPUT0", "OUTPUT1"]


def test_a_fixed_batch_with_a_batch_layout_batches_as_triton_says(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.get_model_config("layout")["max_batch_size"] == 4
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(
        _infer(client, "layout", {"x": x}).as_numpy("y"), x @ WEIGHTS + BIAS, rtol=1e-5
    )


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_batched_and_unbatched_models_answer_with_the_right_numbers(
    server: ServerProcess, protocol: str
) -> None:
    client = _client(server, protocol)
    first = np.arange(48, dtype=np.int32).reshape(3, 16)
    second = np.full((3, 16), 7, dtype=np.int32)
    result = _infer(client, "addsub", {"INPUT0": first, "INPUT1": second})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(
        _infer(client, "linear", {"x": x}).as_numpy("y"), x @ WEIGHTS + BIAS, rtol=1e-5
    )
    pair = x[:2]
    unbatched = _infer(client, "linear_unbatched", {"x": pair}).as_numpy("y")
    assert unbatched.shape == (2, 3)
    np.testing.assert_allclose(unbatched, pair @ WEIGHTS + BIAS, rtol=1e-5)


def test_the_dynamic_batcher_joins_concurrent_requests(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before = client.get_inference_statistics("linear")["model_stats"][0]
    rows = np.random.default_rng(2).standard_normal((6, 1, 4)).astype(np.float32)
    answers: list[np.ndarray] = [np.empty(0)] * len(rows)

    def send(index: int) -> None:
        own = httpclient.InferenceServerClient(server.http_url)
        answers[index] = _infer(own, "linear", {"x": rows[index]}).as_numpy("y")
        own.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(rows))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for row, answer in zip(rows, answers, strict=True):
        np.testing.assert_allclose(answer, row @ WEIGHTS + BIAS, rtol=1e-5)
    after = client.get_inference_statistics("linear")["model_stats"][0]
    inferences = int(after["inference_count"]) - int(before.get("inference_count", 0))
    executions = int(after["execution_count"]) - int(before.get("execution_count", 0))
    assert inferences == 6 and executions < 6, (inferences, executions)


def test_a_sequence_model_gets_its_controls_and_implicit_state(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)

    def step(value: int, sequence: int, start: bool = False, end: bool = False) -> int:
        tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        result = client.infer(
            "accumulate", [tensor], sequence_id=sequence, sequence_start=start, sequence_end=end
        )
        return int(result.as_numpy("OUTPUT")[0][0])

    assert step(3, 11, start=True) == 3
    assert step(10, 12, start=True) == 10
    assert step(4, 11) == 7
    assert step(5, 12, end=True) == 15
    assert step(1, 11, end=True) == 8


def test_a_batch_fixed_at_max_batch_size_pads_smaller_batches(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    x = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    for size in (1, 3, 4):
        answer = _infer(client, "linear_padded", {"x": x[:size]}).as_numpy("y")
        assert answer.shape == (size, 3)
        np.testing.assert_allclose(answer, x[:size] @ WEIGHTS + BIAS, rtol=1e-5)


def test_a_fixed_batch_without_padding_refuses_other_sizes_as_triton_does(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    x = np.ones((2, 4), dtype=np.float32)
    np.testing.assert_allclose(
        _infer(client, "linear_fixed", {"x": x}).as_numpy("y"), x @ WEIGHTS + BIAS, rtol=1e-5
    )
    with pytest.raises(InferenceServerException, match="expected requests with batch size '2', got '1'"):
        _infer(client, "linear_fixed", {"x": x[:1]})


def test_bad_parameters_and_files_outside_the_version_folder_fail_their_model_only(
    server: ServerProcess,
) -> None:
    index = {
        row["name"]: row
        for row in httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    }
    assert index["bad_streams"]["state"] == "UNAVAILABLE"
    assert (
        "parameter NUM_STREAMS must be AUTO/NUMA or a non-negative whole number, got 'many'"
        in index["bad_streams"]["reason"]
    )
    assert index["escapes"]["state"] == "UNAVAILABLE"
    assert "leads outside the version folder" in index["escapes"]["reason"]
    assert index["linear"]["state"] == "READY"


# -- the backend in-process ---------------------------------------------------------------------------------


def _files(repo: Path, name: str) -> tuple[model_config_pb2.ModelConfig, ModelFiles]:
    config = read_config_file(repo / name / "config.pbtxt")
    config.name = name
    return config, ModelFiles(name, 1, repo / name, repo / name / "1")


def test_instances_share_one_compiled_model_with_a_stream_each(repo: Path) -> None:
    config, files = _files(repo, "linear")
    backend = OpenVinoBackend()
    instances = [
        backend.create_instance(config, files, InstanceSpec(f"linear_0_{i}", "KIND_CPU", 0, 1))
        for i in range(2)
    ]
    ((_, shared),) = backend._compiled.items()
    assert shared.users == 2 and int(shared.compiled.get_property("NUM_STREAMS")) == 2
    x = np.ones((2, 4), dtype=np.float32)
    for instance in instances:
        np.testing.assert_allclose(instance.execute({"x": x}, ["y"])["y"], x @ WEIGHTS + BIAS, rtol=1e-5)
    for instance in instances:
        instance.close()
    assert backend._compiled == {}


def test_kind_gpu_is_refused_as_triton_does(repo: Path) -> None:
    config, files = _files(repo, "linear")
    group = config.instance_group[0]
    group.name, group.kind = "linear_0", model_config_pb2.ModelInstanceGroup.KIND_GPU
    with pytest.raises(ModelConfigError, match="runs KIND_CPU instances only"):
        OpenVinoBackend().validate(config, files)


def test_an_ir_without_its_weights_file_names_the_file(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.xml").write_bytes((repo / "linear" / "1" / "model.xml").read_bytes())
    (tmp_path / "m" / "config.pbtxt").write_text(LINEAR)
    config, files = _files(tmp_path, "m")
    with pytest.raises(ModelLoadError, match=r"model weights not found: .*model\.bin"):
        OpenVinoBackend().validate(config, files)
