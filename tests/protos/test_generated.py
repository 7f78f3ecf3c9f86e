"""The wire contract: generated modules are current, and identical to Triton's own schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, text_format

from protos import grpc_service_pb2, health_pb2, model_config_pb2

ROOT = Path(__file__).resolve().parents[2]


def test_generated_modules_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/generate_protos.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _fields(descriptor: object) -> dict[str, object]:
    """Every message's fields (name -> number, type, label, type name), recursively, by full name."""
    found: dict[str, object] = {}

    def visit(message: descriptor_pb2.DescriptorProto, prefix: str) -> None:
        name = f"{prefix}.{message.name}"
        found[name] = sorted((f.name, f.number, f.type, f.label, f.type_name) for f in message.field)
        for nested in message.nested_type:
            visit(nested, name)
        for enum in message.enum_type:
            found[f"{name}.{enum.name}"] = sorted((v.name, v.number) for v in enum.value)

    proto = descriptor_pb2.FileDescriptorProto()
    descriptor.CopyToProto(proto)  # type: ignore[attr-defined]
    for message in proto.message_type:
        visit(message, proto.package)
    for enum in proto.enum_type:
        found[f"{proto.package}.{enum.name}"] = sorted((v.name, v.number) for v in enum.value)
    for service in proto.service:
        found[f"service {service.name}"] = sorted(
            (m.name, m.input_type, m.output_type, m.client_streaming, m.server_streaming)
            for m in service.method
        )
    return found


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (grpc_service_pb2, "tritonclient.grpc.service_pb2"),
        (model_config_pb2, "tritonclient.grpc.model_config_pb2"),
    ],
    ids=["grpc_service", "model_config"],
)
def test_schema_matches_tritonclient_field_for_field(ours: object, theirs: str) -> None:
    reference = pytest.importorskip(theirs)
    assert _fields(ours.DESCRIPTOR) == _fields(reference.DESCRIPTOR)  # type: ignore[attr-defined]


def test_service_has_every_triton_rpc() -> None:
    methods = {
        m.name: m for m in grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods
    }
    assert set(methods) == {
        "ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer",
        "ModelStreamInfer", "ModelConfig", "ModelStatistics", "RepositoryIndex", "RepositoryModelLoad",
        "RepositoryModelUnload", "SystemSharedMemoryStatus", "SystemSharedMemoryRegister",
        "SystemSharedMemoryUnregister", "CudaSharedMemoryStatus", "CudaSharedMemoryRegister",
        "CudaSharedMemoryUnregister", "TraceSetting", "LogSettings",
    }  # fmt: skip
    stream = methods["ModelStreamInfer"]
    assert stream.client_streaming and stream.server_streaming
    assert grpc_service_pb2.DESCRIPTOR.package == "inference"
    assert health_pb2.DESCRIPTOR.package == "grpc.health.v1"


REALISTIC_CONFIG = """
name: "everything"
platform: "onnxruntime_onnx"
max_batch_size: 16
version_policy: { specific: { versions: [ 1, 3 ] } }
input [ { name: "IN" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, -1, -1 ] reshape: { shape: [ 1, 3, -1, -1 ] } } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] label_filename: "labels.txt" } ]
instance_group [
  { name: "gpu_group" kind: KIND_GPU count: 2 gpus: [ 0, 1 ]
    rate_limiter { resources [ { name: "R1" count: 4 global: true } ] priority: 2 } },
  { kind: KIND_CPU count: 1 }
]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  preserve_ordering: true
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000 allow_timeout_override: true max_queue_size: 8 }
  priority_queue_policy { key: 1 value: { timeout_action: REJECT max_queue_size: 4 } }
}
optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } } ] } }
parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env" } }
model_warmup [ { name: "warm" batch_size: 1 inputs { key: "IN" value: { data_type: TYPE_FP32 dims: [ 3, 8, 8 ] zero_data: true } } } ]
response_cache { enable: true }
model_transaction_policy { decoupled: false }
"""

SEQUENCE_AND_ENSEMBLE = """
name: "seq"
backend: "python"
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 100 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "IN_STATE" output_name: "OUT_STATE" data_type: TYPE_FP32 dims: [ 4 ]
            initial_state: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true name: "init" } } ]
}
"""

ENSEMBLE = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
ensemble_scheduling {
  step [
    { model_name: "pre" model_version: -1 input_map { key: "RAW" value: "IMAGE_BYTES" } output_map { key: "PIXELS" value: "pixels" } },
    { model_name: "net" model_version: 2 input_map { key: "input" value: "pixels" } output_map { key: "logits" value: "SCORES" } }
  ]
}
"""


@pytest.mark.parametrize(
    "text", [REALISTIC_CONFIG, SEQUENCE_AND_ENSEMBLE, ENSEMBLE], ids=["full", "sequence", "ensemble"]
)
def test_realistic_configs_parse_with_the_real_schema(text: str) -> None:
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    assert config.name
    round_tripped = text_format.Parse(text_format.MessageToString(config), model_config_pb2.ModelConfig())
    assert round_tripped == config
