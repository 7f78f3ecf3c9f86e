"""TensorRT engines against Triton configs. No GPU here: the engine's I/O tensors are described by
hand (what ``engine_tensors`` reads from a real engine), and the backend's missing-package message
is checked. The GPU execution path is unverified on this machine."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from trt.protos import model_config_pb2
from trt.server.backends.tensorrt_signature import EngineTensor, auto_complete, check, engine_max_batch_size
from trt.server.core.errors import ModelConfigError

DYNAMIC = [
    EngineTensor("images", True, "HALF", (-1, 3, 224, 224), profile_max=(16, 3, 224, 224)),
    EngineTensor("scores", False, "FLOAT", (-1, 1000)),
]
FIXED = [EngineTensor("x", True, "INT32", (4,), profile_max=(4,)), EngineTensor("y", False, "INT32", (4,))]


def _config(text: str = "") -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_max_batch_size_comes_from_the_optimization_profile() -> None:
    assert engine_max_batch_size(DYNAMIC) == 16
    assert engine_max_batch_size(FIXED) == 0


def test_auto_complete_fills_tensors_batching_and_types() -> None:
    config = _config('platform: "tensorrt_plan"')
    auto_complete(config, DYNAMIC)
    assert config.max_batch_size == 16
    assert config.HasField("dynamic_batching")
    assert [(t.name, list(t.dims)) for t in config.input] == [("images", [3, 224, 224])]
    assert model_config_pb2.DataType.Name(config.input[0].data_type) == "TYPE_FP16"
    assert model_config_pb2.DataType.Name(config.output[0].data_type) == "TYPE_FP32"
    check(config, DYNAMIC)

    fixed = _config()
    auto_complete(fixed, FIXED)
    assert fixed.max_batch_size == 0 and list(fixed.input[0].dims) == [4]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            'max_batch_size: 32 input [ { name: "images" data_type: TYPE_FP16 dims: [ 3, 224, 224 ] } ]',
            "exceeds",
        ),
        (
            'max_batch_size: 8 input [ { name: "pixels" data_type: TYPE_FP16 dims: [ 3, 224, 224 ] } ]',
            "not in the engine",
        ),
        (
            'max_batch_size: 8 input [ { name: "images" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]',
            "engine has TYPE_FP16",
        ),
        ('max_batch_size: 8 input [ { name: "images" data_type: TYPE_FP16 dims: [ 3, 112, 224 ] } ]', "dims"),
    ],
)
def test_configs_that_disagree_with_the_engine_are_refused(text: str, fragment: str) -> None:
    with pytest.raises(ModelConfigError, match=fragment):
        check(_config(text), DYNAMIC)


def test_batching_config_on_a_fixed_engine_is_refused() -> None:
    with pytest.raises(ModelConfigError, match="no dynamic batch dimension"):
        check(_config('max_batch_size: 4 input [ { name: "x" data_type: TYPE_INT32 dims: [ 4 ] } ]'), FIXED)


def test_unsupported_engine_types_are_named() -> None:
    with pytest.raises(ModelConfigError, match="FP8"):
        _ = EngineTensor("q", True, "FP8", (4,)).config_type
