"""Triton's openvino_backend parameters, read into what trt passes to OpenVINO (no OpenVINO needed)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from trt.protos import model_config_pb2
from trt.server.backends.openvino_settings import check_device, read_settings
from trt.server.core.errors import ModelConfigError


def _config(parameters: dict[str, str], instances: int = 1) -> model_config_pb2.ModelConfig:
    text = f"instance_group [ {{ kind: KIND_CPU count: {instances} }} ]\n"
    text += "".join(
        f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in parameters.items()
    )
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_without_streams_or_hint_each_instance_gets_a_stream() -> None:
    assert read_settings(_config({}, instances=3)).properties == {"NUM_STREAMS": "3"}


def test_a_hint_alone_lets_openvino_choose_the_streams() -> None:
    assert read_settings(_config({"PERFORMANCE_HINT": "throughput"})).properties == {
        "PERFORMANCE_HINT": "THROUGHPUT"
    }


def test_tritons_parameters_map_to_openvino_properties() -> None:
    settings = read_settings(
        _config(
            {
                "NUM_STREAMS": "auto",
                "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_NUM_THREADS": "2",
                "COMPILATION_NUM_THREADS": "1",
                "HINT_BF16": "YES",
                "SKIP_OV_DYNAMIC_BATCHSIZE": "YES",
                "ENABLE_BATCH_PADDING": "yes",
                "RESHAPE_IO_LAYERS": "no",
                "TARGET_DEVICE": "cpu",
                "ENABLE_CPU_PINNING": "no",
            }
        )
    )
    assert settings.properties == {
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": "AUTO",
        "INFERENCE_NUM_THREADS": "2",
        "COMPILATION_NUM_THREADS": "1",
        "ENABLE_CPU_PINNING": "NO",
        "INFERENCE_PRECISION_HINT": "bf16",
    }
    assert settings.fixed_batch and settings.batch_padding and not settings.reshape_io_layers
    assert settings.target_device == "CPU"


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"NUM_STREAMS": "many"},
            "parameter NUM_STREAMS must be AUTO/NUMA or a non-negative whole number, got 'many'",
        ),
        (
            {"INFERENCE_NUM_THREADS": "-1"},
            "parameter INFERENCE_NUM_THREADS must be a non-negative whole number",
        ),
        ({"PERFORMANCE_HINT": "fast"}, "parameter PERFORMANCE_HINT must be one of LATENCY, THROUGHPUT"),
        ({"HINT_BF16": "NO"}, "parameter HINT_BF16 must be YES, got 'NO'"),
        ({"INFERENCE_PRECISION_HINT": "int4"}, "must be f32, f16 or bf16"),
        (
            {"HINT_BF16": "YES", "INFERENCE_PRECISION_HINT": "f16"},
            "HINT_BF16 and INFERENCE_PRECISION_HINT disagree",
        ),
        ({"ENABLE_BATCH_PADDING": "sometimes"}, "parameter ENABLE_BATCH_PADDING must be YES or NO"),
    ],
)
def test_a_bad_value_is_refused_naming_the_parameter(parameters: dict[str, str], message: str) -> None:
    with pytest.raises(ModelConfigError) as raised:
        read_settings(_config(parameters))
    assert message in str(raised.value)
    assert raised.value.field == f"parameters[{next(reversed(parameters))}]"


def test_a_device_openvino_does_not_see_is_refused_listing_those_it_does() -> None:
    check_device("CPU", ["CPU"])
    check_device("AUTO", ["CPU"])
    check_device("HETERO:CPU", ["CPU"])
    with pytest.raises(ModelConfigError, match="OpenVINO sees no device GPU here; available: CPU"):
        check_device("GPU", ["CPU"])
    with pytest.raises(ModelConfigError, match="no device NPU"):
        check_device("MULTI:CPU,NPU", ["CPU"])
