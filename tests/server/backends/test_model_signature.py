"""Auto-complete and the config check shared by the OpenVINO and TensorFlow backends, on signatures
written out by hand (neither library needed)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from trt.protos import model_config_pb2
from trt.server.backends.model_signature import ModelSignature, TensorInfo, auto_complete, check_tensors, yes
from trt.server.core.errors import ModelConfigError

BATCHING = ModelSignature(
    {"x": TensorInfo("x", "TYPE_FP32", (-1, 4)), "mask": TensorInfo("mask", "TYPE_BOOL", (-1, 4))},
    {"y": TensorInfo("y", "TYPE_FP32", (-1, 3))},
)
SCALAR_OUT = ModelSignature(
    {"x": TensorInfo("x", "TYPE_FP32", (-1, 4))}, {"score": TensorInfo("score", "TYPE_FP32", (-1,))}
)


def _config(text: str = "") -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_an_empty_config_gets_every_tensor_a_batch_size_and_a_batcher() -> None:
    config = _config()
    auto_complete(config, BATCHING, BATCHING.first_dims_variable(), 4)
    assert config.max_batch_size == 4 and config.HasField("dynamic_batching")
    assert [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in config.input] == [
        ("x", "TYPE_FP32", [4]),
        ("mask", "TYPE_BOOL", [4]),
    ]
    assert [(t.name, list(t.dims)) for t in config.output] == [("y", [3])]
    check_tensors(config, BATCHING, "test")


def test_a_config_that_gives_dims_keeps_max_batch_size_zero() -> None:
    config = _config('input [ { name: "x" dims: [ -1, 4 ] } ]')
    auto_complete(config, BATCHING, True, 4)
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert model_config_pb2.DataType.Name(config.input[0].data_type) == "TYPE_FP32"
    assert [t.name for t in config.output] == ["y"] and list(config.output[0].dims) == [-1, 3]


def test_a_tensor_with_only_a_batch_dimension_is_given_dims_1_and_an_empty_reshape() -> None:
    config = _config()
    auto_complete(config, SCALAR_OUT, True, 8)
    (score,) = config.output
    assert list(score.dims) == [1] and score.HasField("reshape") and list(score.reshape.shape) == []
    check_tensors(config, SCALAR_OUT, "test")


def test_a_backend_that_cannot_batch_leaves_max_batch_size_zero() -> None:
    config = _config()
    auto_complete(config, BATCHING, False, 4)
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [-1, 4]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('input [ { name: "z" data_type: TYPE_FP32 dims: [4] } ]', "input 'z' in config is not in the model"),
        (
            'input [ { name: "x" data_type: TYPE_INT32 dims: [4] } ]',
            "config says TYPE_INT32 but the model has TYPE_FP32",
        ),
        (
            'input [ { name: "x" data_type: TYPE_FP32 dims: [5] } ]',
            "config dims [5] do not match the model's [4]",
        ),
        (
            'input [ { name: "x" data_type: TYPE_FP32 dims: [4] } ]',
            "the model has input(s) mask that the config does not list",
        ),
    ],
)
def test_each_disagreement_with_the_model_is_named(text: str, message: str) -> None:
    config = _config("max_batch_size: 2\n" + text)
    with pytest.raises(ModelConfigError) as raised:
        check_tensors(config, BATCHING, "test")
    assert message in str(raised.value)


def test_a_fixed_first_dimension_cannot_batch() -> None:
    fixed = ModelSignature(
        {"x": TensorInfo("x", "TYPE_FP32", (1, 4))}, {"y": TensorInfo("y", "TYPE_FP32", (1, 3))}
    )
    config = _config('max_batch_size: 2 input [ { name: "x" data_type: TYPE_FP32 dims: [4] } ]')
    with pytest.raises(ModelConfigError, match="first dimension is fixed at 1"):
        check_tensors(config, fixed, "test")


def test_a_type_the_config_cannot_name_is_refused_with_the_model_type() -> None:
    odd = ModelSignature({"x": TensorInfo("x", "", (-1,), "bfloat16")}, {})
    config = _config('input [ { name: "x" data_type: TYPE_FP32 dims: [-1] } ]')
    with pytest.raises(ModelConfigError, match="bfloat16 has no counterpart"):
        check_tensors(config, odd, "the test backend")


@pytest.mark.parametrize(
    ("value", "expected"), [("YES", True), ("yes", True), ("true", True), ("", False), ("NO", False)]
)
def test_yes_no_parameters(value: str, expected: bool) -> None:
    assert yes(value, "KEY") is expected


def test_a_yes_no_parameter_that_is_neither_is_refused() -> None:
    with pytest.raises(ModelConfigError, match="parameter KEY must be YES or NO, got 'maybe'"):
        yes("maybe", "KEY")


def test_a_tensor_may_be_named_by_an_alias_of_the_models_name() -> None:
    aliased = ModelSignature(BATCHING.inputs, BATCHING.outputs, {"x:0": "x", "y:0": "y"})
    config = _config(
        'max_batch_size: 2 input [ { name: "x:0" data_type: TYPE_FP32 dims: [4] }, '
        '{ name: "mask" data_type: TYPE_BOOL dims: [4] } ] output [ { name: "y:0" } ]'
    )
    auto_complete(config, aliased, True, 4)
    assert list(config.output[0].dims) == [3]
    check_tensors(config, aliased, "test")  # "x" counts as fed through its alias
