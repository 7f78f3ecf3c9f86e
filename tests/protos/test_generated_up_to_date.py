"""The wire contract stays current and stays Triton's.

* the modules under protos/ are what scripts/generate_protos.py makes from the .proto files;
* our descriptors are tritonclient's, field for field and byte for byte. Byte identity matters beyond
  the wire: both register "model_config.proto" and "grpc_service.proto" in protobuf's default pool,
  and a process that imports both fails ("duplicate file name") unless the two are identical;
* tritonclient's own client talks to a servicer built from our modules;
* config.pbtxt files that Triton accepts parse with text_format into our ModelConfig.
"""

from __future__ import annotations

import base64
import importlib
import importlib.util
import json
import queue
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from google.protobuf import descriptor_pb2, text_format

from trt.protos import grpc_service_pb2, grpc_service_pb2_grpc, health_pb2, health_pb2_grpc, model_config_pb2

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "generate_protos.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_protos_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- staleness ---------------------------------------------------------------------------------


def test_generated_modules_match_the_proto_sources() -> None:
    pytest.importorskip("grpc_tools")
    stale = _load_script().stale_files()
    assert stale == [], f"stale generated modules {stale}: run python scripts/generate_protos.py"


def test_check_reports_edited_missing_and_orphaned_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("grpc_tools")
    script = _load_script()
    copy = tmp_path / "protos"
    shutil.copytree(ROOT / "trt" / "protos", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "grpc_service_pb2.py").write_text((copy / "grpc_service_pb2.py").read_text() + "# edited\n")
    (copy / "health_pb2_grpc.py").unlink()
    (copy / "retired_pb2.py").write_text("")
    monkeypatch.setattr(script, "PROTO_DIR", copy)
    # A subset: anything already stale in the checkout is reported too (and fails the test above).
    assert {"grpc_service_pb2.py", "health_pb2_grpc.py", "retired_pb2.py"} <= set(script.stale_files())


def test_check_runs_from_any_directory_and_exits_zero(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_modules_import_each_other_through_the_protos_package() -> None:
    for path in sorted((ROOT / "trt" / "protos").glob("*_pb2*.py*")):
        bare = re.findall(r"^import \w+_pb2\b.*$", path.read_text(), flags=re.MULTILINE)
        assert not bare, f"{path.name}: {bare}"
    for name in (
        "model_config_pb2",
        "grpc_service_pb2",
        "grpc_service_pb2_grpc",
        "health_pb2",
        "health_pb2_grpc",
    ):
        assert importlib.import_module(f"trt.protos.{name}").__name__ == f"trt.protos.{name}"


# --- descriptors compared with tritonclient's ----------------------------------------------------

# Each side is read in a process of its own: in one process the second import would either fail or be
# handed the first one's descriptor, and the comparison would prove nothing.
_DUMP = """
import base64, importlib, json, sys
print(json.dumps({n: base64.b64encode(importlib.import_module(n).DESCRIPTOR.serialized_pb).decode()
                  for n in sys.argv[1:]}))
"""
OURS = {"service": "trt.protos.grpc_service_pb2", "config": "trt.protos.model_config_pb2"}
THEIRS = {"service": "tritonclient.grpc.service_pb2", "config": "tritonclient.grpc.model_config_pb2"}


def _file_descriptors(modules: dict[str, str]) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    result = subprocess.run(
        [sys.executable, "-c", _DUMP, *modules.values()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    blobs = json.loads(result.stdout)
    return {key: descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(blobs[name]))
            for key, name in modules.items()}  # fmt: skip


@pytest.fixture(scope="module")
def descriptors() -> dict[str, dict[str, descriptor_pb2.FileDescriptorProto]]:
    # Not imported here: if the two differ, importing both in this process is exactly what fails.
    if importlib.util.find_spec("tritonclient") is None:
        pytest.skip("tritonclient is not installed")
    return {"ours": _file_descriptors(OURS), "theirs": _file_descriptors(THEIRS)}


def _schema(proto: descriptor_pb2.FileDescriptorProto) -> dict[str, Any]:
    """Every message, enum and service in a file by full name, recursively, with every field's facts."""
    found: dict[str, Any] = {}

    def enum(e: descriptor_pb2.EnumDescriptorProto, prefix: str) -> None:
        found[f"enum {prefix}.{e.name}"] = {v.name: v.number for v in e.value}

    def message(m: descriptor_pb2.DescriptorProto, prefix: str) -> None:
        name = f"{prefix}.{m.name}"
        oneofs = [o.name for o in m.oneof_decl]
        found[f"message {name}"] = {
            "map_entry": m.options.map_entry,
            "fields": {
                f.name: {
                    "number": f.number,
                    "type": descriptor_pb2.FieldDescriptorProto.Type.Name(f.type),
                    "label": descriptor_pb2.FieldDescriptorProto.Label.Name(f.label),
                    "type_name": f.type_name,
                    "oneof": oneofs[f.oneof_index] if f.HasField("oneof_index") else None,
                    "proto3_optional": f.proto3_optional,
                    "json_name": f.json_name,
                }
                for f in m.field
            },
        }
        for nested in m.nested_type:
            message(nested, name)
        for e in m.enum_type:
            enum(e, name)

    for m in proto.message_type:
        message(m, proto.package)
    for e in proto.enum_type:
        enum(e, proto.package)
    for s in proto.service:
        found[f"service {proto.package}.{s.name}"] = {
            md.name: (md.input_type, md.output_type, md.client_streaming, md.server_streaming)
            for md in s.method
        }
    return found


def _differences(ours: dict[str, Any], theirs: dict[str, Any], where: str = "") -> list[str]:
    """What differs, as short lines naming the message/enum and field."""
    lines = [f"only in ours: {where}{k}" for k in sorted(ours.keys() - theirs.keys())]
    lines += [f"only in tritonclient: {where}{k}" for k in sorted(theirs.keys() - ours.keys())]
    for k in sorted(ours.keys() & theirs.keys()):
        if ours[k] == theirs[k]:
            continue
        if isinstance(ours[k], dict) and isinstance(theirs[k], dict):
            lines += _differences(ours[k], theirs[k], f"{where}{k} / ")
        else:
            lines.append(f"{where}{k}: ours {ours[k]!r}, tritonclient {theirs[k]!r}")
    return lines


@pytest.mark.parametrize("which", ["service", "config"])
def test_every_message_enum_and_field_matches_tritonclient(descriptors: dict[str, Any], which: str) -> None:
    ours, theirs = descriptors["ours"][which], descriptors["theirs"][which]
    assert (ours.name, ours.package, ours.syntax) == (theirs.name, theirs.package, theirs.syntax)
    assert list(ours.dependency) == list(theirs.dependency)
    diff = _differences(_schema(ours), _schema(theirs))
    assert not diff, "\n".join(diff)


@pytest.mark.parametrize("which", ["service", "config"])
def test_serialized_descriptor_is_byte_identical_to_tritonclient(
    descriptors: dict[str, Any], which: str
) -> None:
    # Field declaration order matters here too; this is what lets trt and tritonclient share a process.
    ours, theirs = descriptors["ours"][which], descriptors["theirs"][which]
    assert ours.SerializeToString() == theirs.SerializeToString(), (
        f"{ours.name} differs from tritonclient's in bytes (declaration order?): "
        "a process importing both would fail with 'duplicate file name'"
    )


def test_trt_and_tritonclient_modules_load_into_one_process(descriptors: dict[str, Any]) -> None:
    for first, second in ((OURS, THEIRS), (THEIRS, OURS)):
        names = [*first.values(), *second.values()]
        code = "import importlib, sys; [importlib.import_module(n) for n in sys.argv[1:]]"
        result = subprocess.run(
            [sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize(
    "message",
    [
        "ModelInferRequest",
        "ModelInferResponse",
        "ModelConfig",
        "ModelStatistics",
        "InferParameter",
        "ModelStreamInferResponse",
        "RepositoryIndexResponse",
    ],
)
def test_pinned_messages_are_tritonclients_including_nested_ones(
    descriptors: dict[str, Any], message: str
) -> None:
    which = "config" if message == "ModelConfig" else "service"
    ours, theirs = _schema(descriptors["ours"][which]), _schema(descriptors["theirs"][which])
    prefix = f"message inference.{message}"
    ours_part = {k: v for k, v in ours.items() if k == prefix or k.startswith(prefix + ".")}
    theirs_part = {k: v for k, v in theirs.items() if k == prefix or k.startswith(prefix + ".")}
    assert prefix in theirs_part
    assert ours_part == theirs_part


def test_fields_clients_depend_on_have_tritons_numbers() -> None:
    def number(message: Any, field: str) -> int:
        return int(message.DESCRIPTOR.fields_by_name[field].number)

    assert number(grpc_service_pb2.ModelInferRequest, "raw_input_contents") == 7
    assert number(grpc_service_pb2.ModelInferResponse, "raw_output_contents") == 6
    assert number(grpc_service_pb2.InferParameter, "uint64_param") == 5
    assert number(grpc_service_pb2.ModelStatistics, "response_stats") == 9
    assert number(grpc_service_pb2.ModelStreamInferResponse, "infer_response") == 2
    assert number(model_config_pb2.ModelConfig, "model_metrics") == 26
    assert grpc_service_pb2.DESCRIPTOR.package == model_config_pb2.DESCRIPTOR.package == "inference"
    assert health_pb2.DESCRIPTOR.package == "grpc.health.v1"


def test_service_methods_and_streaming_flags_match_tritonclient() -> None:
    theirs_module = pytest.importorskip("tritonclient.grpc.service_pb2")

    # The descriptor objects may be shared with ours in this process, so compare through the
    # descriptor protos each side copies out, and by method path as the stubs use them.
    def methods(module: Any) -> dict[str, tuple[bool, bool]]:
        service = descriptor_pb2.ServiceDescriptorProto()
        module.DESCRIPTOR.services_by_name["GRPCInferenceService"].CopyToProto(service)
        return {m.name: (m.client_streaming, m.server_streaming) for m in service.method}

    ours = methods(grpc_service_pb2)
    assert ours == methods(theirs_module)
    assert ours["ModelStreamInfer"] == (True, True)
    assert {name for name, flags in ours.items() if flags != (False, False)} == {"ModelStreamInfer"}
    assert set(ours) == {
        "ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer",
        "ModelStreamInfer", "ModelConfig", "ModelStatistics", "RepositoryIndex", "RepositoryModelLoad",
        "RepositoryModelUnload", "SystemSharedMemoryStatus", "SystemSharedMemoryRegister",
        "SystemSharedMemoryUnregister", "CudaSharedMemoryStatus", "CudaSharedMemoryRegister",
        "CudaSharedMemoryUnregister", "TraceSetting", "LogSettings",
    }  # fmt: skip
    health = health_pb2.DESCRIPTOR.services_by_name["Health"]
    assert [m.name for m in health.methods] == ["Check"]


# --- tritonclient against a servicer built from our modules -------------------------------------


class _EchoServicer(grpc_service_pb2_grpc.GRPCInferenceServiceServicer):
    """Answers the few calls below; every output is the same-named input with "_OUT" appended."""

    def ServerLive(self, request: Any, context: Any) -> Any:
        return grpc_service_pb2.ServerLiveResponse(live=True)

    def ModelConfig(self, request: Any, context: Any) -> Any:
        config = text_format.Parse(DYNAMIC_BATCHING_CONFIG, model_config_pb2.ModelConfig())
        return grpc_service_pb2.ModelConfigResponse(config=config)

    def ModelInfer(self, request: Any, context: Any) -> Any:
        return self._echo(request)

    def ModelStreamInfer(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
        for request in request_iterator:
            yield grpc_service_pb2.ModelStreamInferResponse(infer_response=self._echo(request))

    @staticmethod
    def _echo(request: Any) -> Any:
        response = grpc_service_pb2.ModelInferResponse(
            model_name=request.model_name, model_version="1", id=request.id
        )
        for tensor, raw in zip(request.inputs, request.raw_input_contents, strict=True):
            out = response.outputs.add(name=tensor.name + "_OUT", datatype=tensor.datatype)
            out.shape.extend(tensor.shape)
            response.raw_output_contents.append(raw)
        response.parameters["echoed"].uint64_param = 2**63
        return response


class _HealthServicer(health_pb2_grpc.HealthServicer):
    def Check(self, request: Any, context: Any) -> Any:
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


@pytest.fixture
def echo_server() -> Iterator[str]:
    grpc = pytest.importorskip("grpc")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(_EchoServicer(), server)
    health_pb2_grpc.add_HealthServicer_to_server(_HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def test_tritonclient_talks_to_a_servicer_built_from_our_modules(echo_server: str) -> None:
    grpcclient = pytest.importorskip("tritonclient.grpc")
    import grpc

    client = grpcclient.InferenceServerClient(url=echo_server)
    try:
        assert client.is_server_live()
        config = client.get_model_config("echo", as_json=True)["config"]
        assert config["dynamic_batching"]["priority_queue_policy"]["1"]["max_queue_size"] == 4

        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        tensor = grpcclient.InferInput("IN", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer("echo", [tensor], request_id="r1")
        np.testing.assert_array_equal(result.as_numpy("IN_OUT"), data)
        assert result.get_response().parameters["echoed"].uint64_param == 2**63

        answers: queue.Queue[Any] = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        client.async_stream_infer("echo", [tensor], request_id="s1")
        streamed = answers.get(timeout=30)
        assert not isinstance(streamed, Exception), streamed
        np.testing.assert_array_equal(streamed.as_numpy("IN_OUT"), data)
        client.stop_stream()
    finally:
        client.close()

    with grpc.insecure_channel(echo_server) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


# --- config.pbtxt ---------------------------------------------------------------------------------

DYNAMIC_BATCHING_CONFIG = """
name: "detector"
platform: "onnxruntime_onnx"
max_batch_size: 16
version_policy: { specific: { versions: [ 1, 3 ] } }
input [
  {
    name: "IMAGE"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, -1, -1 ]
    reshape: { shape: [ 1, 3, -1, -1 ] }
  },
  { name: "MASK" data_type: TYPE_BOOL dims: [ -1 ] optional: true allow_ragged_batch: true }
]
output [
  { name: "BOXES" data_type: TYPE_FP32 dims: [ -1, 4 ] },
  { name: "LABELS" data_type: TYPE_STRING dims: [ -1 ] label_filename: "labels.txt" }
]
batch_input [
  {
    kind: BATCH_ACCUMULATED_ELEMENT_COUNT
    target_name: "MASK_OFFSETS"
    data_type: TYPE_INT32
    source_input: "MASK"
  }
]
instance_group [
  {
    name: "detector_gpu"
    kind: KIND_GPU
    count: 2
    gpus: [ 0, 1 ]
    rate_limiter {
      resources [ { name: "R1" count: 4 }, { name: "SHARED" global: true count: 2 } ]
      priority: 2
    }
    host_policy: "numa0"
  },
  { kind: KIND_CPU count: 1 passive: true }
]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  preserve_ordering: true
  priority_levels: 2
  default_priority_level: 2
  default_queue_policy {
    timeout_action: DELAY
    default_timeout_microseconds: 1000
    allow_timeout_override: true
    max_queue_size: 8
  }
  priority_queue_policy [
    { key: 1 value: { timeout_action: REJECT default_timeout_microseconds: 500 max_queue_size: 4 } },
    { key: 2 value: { max_queue_size: 16 } }
  ]
}
optimization {
  priority: PRIORITY_MAX
  graph { level: 1 }
  cuda {
    graphs: true
    busy_wait_events: true
    output_copy_stream: true
    graph_spec [
      {
        batch_size: 8
        input { key: "IMAGE" value: { dim: [ 3, 224, 224 ] } }
        graph_lower_bound { batch_size: 1 input { key: "IMAGE" value: { dim: [ 3, 224, 224 ] } } }
      }
    ]
  }
  execution_accelerators {
    gpu_execution_accelerator: [
      {
        name: "tensorrt"
        parameters { key: "precision_mode" value: "FP16" }
        parameters { key: "max_workspace_size_bytes" value: "1073741824" }
      }
    ]
    cpu_execution_accelerator: [ { name: "openvino" } ]
  }
  input_pinned_memory { enable: true }
  output_pinned_memory { enable: false }
  gather_kernel_buffer_threshold: 2
  eager_batching: true
}
parameters [
  { key: "intra_op_thread_count" value: { string_value: "2" } },
  { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }
]
model_warmup [
  {
    name: "zeros"
    batch_size: 4
    count: 2
    inputs { key: "IMAGE" value: { data_type: TYPE_FP32 dims: [ 3, 64, 64 ] zero_data: true } }
    inputs { key: "MASK" value: { data_type: TYPE_BOOL dims: [ 8 ] random_data: true } }
  }
]
model_transaction_policy { decoupled: false }
model_repository_agents {
  agents [ { name: "checksum" parameters { key: "MD5:model.onnx" value: "0123456789abcdef" } } ]
}
response_cache { enable: true }
metric_tags { key: "team" value: "vision" }
model_metrics {
  metric_control [
    {
      metric_identifier { family: "nv_inference_first_response_histogram_ms" }
      histogram_options { buckets: [ 1, 2, 4, 8 ] }
    }
  ]
}
"""

SEQUENCE_CONFIG = """
name: "tracker"
backend: "python"
max_batch_size: 4
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { max_queue_delay_microseconds: 100 minimum_slot_utilization: 0.5 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [
    {
      input_name: "STATE_IN"
      output_name: "STATE_OUT"
      data_type: TYPE_FP32
      dims: [ -1 ]
      use_same_buffer_for_input_output: true
      use_growable_memory: true
      initial_state: { name: "zeros" data_type: TYPE_FP32 dims: [ 4 ] zero_data: true }
    }
  ]
}
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""

OLDEST_SEQUENCE_CONFIG = """
name: "generator"
backend: "python"
sequence_batching {
  iterative_sequence: true
  oldest {
    max_candidate_sequences: 4
    preferred_batch_size: [ 2, 4 ]
    max_queue_delay_microseconds: 100
    preserve_ordering: true
  }
}
model_transaction_policy { decoupled: true }
"""

ENSEMBLE_CONFIG = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "RAW" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 1000 ] } ]
ensemble_scheduling {
  max_inflight_requests: 16
  step [
    {
      model_name: "preprocess"
      model_version: -1
      input_map { key: "BYTES" value: "RAW" }
      output_map { key: "PIXELS" value: "pixels" }
    },
    {
      model_name: "classifier"
      model_version: 2
      input_map { key: "input" value: "pixels" }
      output_map { key: "logits" value: "SCORES" }
    }
  ]
}
"""


def _parse(text: str) -> Any:
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    again = text_format.Parse(text_format.MessageToString(config), model_config_pb2.ModelConfig())
    assert again == config
    return config


def test_dynamic_batching_config_parses() -> None:
    config = _parse(DYNAMIC_BATCHING_CONFIG)
    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert list(config.version_policy.specific.versions) == [1, 3]
    gpu_group = config.instance_group[0]
    assert gpu_group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    assert list(gpu_group.gpus) == [0, 1]
    assert [(r.name, r.count, getattr(r, "global")) for r in gpu_group.rate_limiter.resources] == [
        ("R1", 4, False),
        ("SHARED", 2, True),
    ]
    batching = config.dynamic_batching
    assert batching.priority_queue_policy[1].timeout_action == model_config_pb2.ModelQueuePolicy.REJECT
    assert batching.priority_queue_policy[2].max_queue_size == 16
    assert batching.default_queue_policy.timeout_action == model_config_pb2.ModelQueuePolicy.DELAY
    assert config.optimization.cuda.graph_spec[0].input["IMAGE"].dim == [3, 224, 224]
    assert config.parameters["EXECUTION_ENV_PATH"].string_value.endswith("env.tar.gz")
    warmup = config.model_warmup[0]
    assert warmup.inputs["IMAGE"].zero_data and warmup.inputs["MASK"].random_data
    assert config.input[0].reshape.shape == [1, 3, -1, -1]


def test_sequence_configs_parse() -> None:
    direct = _parse(SEQUENCE_CONFIG).sequence_batching
    assert direct.WhichOneof("strategy_choice") == "direct"
    kinds = {c.name: c.control[0].kind for c in direct.control_input}
    assert kinds["CORRID"] == model_config_pb2.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID
    state = direct.state[0]
    assert (state.input_name, state.output_name) == ("STATE_IN", "STATE_OUT")
    assert state.initial_state[0].zero_data and state.initial_state[0].name == "zeros"
    oldest = _parse(OLDEST_SEQUENCE_CONFIG).sequence_batching
    assert oldest.iterative_sequence and list(oldest.oldest.preferred_batch_size) == [2, 4]


def test_ensemble_config_parses() -> None:
    steps = _parse(ENSEMBLE_CONFIG).ensemble_scheduling.step
    assert [(s.model_name, s.model_version) for s in steps] == [("preprocess", -1), ("classifier", 2)]
    assert dict(steps[0].input_map) == {"BYTES": "RAW"}
    assert dict(steps[1].output_map) == {"logits": "SCORES"}


def test_schema_rejects_what_triton_rejects() -> None:
    with pytest.raises(text_format.ParseError):
        text_format.Parse('name: "x" no_such_field: 1', model_config_pb2.ModelConfig())
    with pytest.raises(text_format.ParseError):  # one scheduling choice per model
        text_format.Parse("dynamic_batching {} sequence_batching {}", model_config_pb2.ModelConfig())


def test_the_bundled_model_repository_parses() -> None:
    paths = sorted((ROOT / "model_repository").glob("*/config.pbtxt"))
    for path in paths:
        config = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
        assert config.name in ("", path.parent.name), path
