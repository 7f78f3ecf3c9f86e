"""A catalogue of broken models: each folder holds one fault and names what validate must say about it.

``build(repo)`` writes them all into one repository beside a good ``simple`` model (which must come
out clean: one broken model never hides or spoils another).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from onnx import TensorProto, helper

from tests.support import add_sub_model, save_onnx, write_simple

Tensor = tuple[str, int, list[int | str]]  # name, ONNX element type, shape (a str names a free dimension)


@dataclass(frozen=True)
class Fault:
    model: str
    severity: str
    message: str  # a part of the message validate must print
    file: str  # the file the finding names, relative to the model folder ("" = the folder)
    line: int | None  # the line it points at (None: the finding has no line)
    write: Callable[[Path], None]


ADD_SUB = """platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
"""


def onnx_model(
    config: str, model_file: str = "1/model.onnx", model: object | None = None
) -> Callable[[Path], None]:
    def write(model_dir: Path) -> None:
        save_onnx(model or add_sub_model(), model_dir / model_file)
        if config:
            (model_dir / "config.pbtxt").write_text(config)

    return write


def python_model(config: str, source: str) -> Callable[[Path], None]:
    def write(model_dir: Path) -> None:
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "1" / "model.py").write_text(source)
        (model_dir / "config.pbtxt").write_text(config)

    return write


def config_only(config: str) -> Callable[[Path], None]:
    """A config.pbtxt and an empty version folder (all an ensemble needs)."""

    def write(model_dir: Path) -> None:
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "config.pbtxt").write_text(config)

    return write


def with_stray_folder(folder: str) -> Callable[[Path], None]:
    """A sound add/sub model beside a folder that looks like a version but is not one."""

    def write(model_dir: Path) -> None:
        onnx_model(ADD_SUB)(model_dir)
        save_onnx(add_sub_model(), model_dir / folder / "model.onnx")

    return write


def _model(name: str, nodes: list[object], inputs: list[Tensor], outputs: list[Tensor]) -> object:
    """An ONNX model of ``nodes``, its inputs and outputs given as (name, element type, shape)."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(*tensor) for tensor in inputs],
        [helper.make_tensor_value_info(*tensor) for tensor in outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def fixed_batch_model() -> object:
    """add/sub whose first dimension is fixed at 1 (exported without a dynamic batch)."""
    return _model(
        "fixed",
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        [(n, TensorProto.INT32, [1, 16]) for n in ("INPUT0", "INPUT1")],
        [(n, TensorProto.INT32, [1, 16]) for n in ("OUTPUT0", "OUTPUT1")],
    )


def bfloat16_model() -> object:
    """Y = cast(X) to bfloat16: an ONNX model with a BF16 output."""
    return _model(
        "bf16",
        [helper.make_node("Cast", ["X"], ["Y"], to=TensorProto.BFLOAT16)],
        [("X", TensorProto.FLOAT, ["batch", 4])],
        [("Y", TensorProto.BFLOAT16, ["batch", 4])],
    )


BF16 = """platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP16 dims: [ 4 ] } ]
"""


def sequence_model() -> object:
    """OUTPUT0 = INPUT0 + START: a model that takes a sequence control input."""
    return _model(
        "seq",
        [helper.make_node("Add", ["INPUT0", "START"], ["OUTPUT0"])],
        [("INPUT0", TensorProto.INT32, ["batch", 1]), ("START", TensorProto.INT32, ["batch", 1])],
        [("OUTPUT0", TensorProto.INT32, ["batch", 1])],
    )


SEQUENCE = """platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  control_input [
    {
      name: "%s"
      control [ { kind: CONTROL_SEQUENCE_START %s } ]
    }
  ]
}
"""

SEEDED_SEQUENCE = """platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [
    {
      input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ]
      initial_state [ { name: "seed" data_type: TYPE_INT32 dims: [ 1 ] data_file: "seed.bin" } ]
    }
  ]
}
"""

GOOD_PY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""

PY_CONFIG = """backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

ENSEMBLE_HEAD = """platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: %s dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "%s"
      model_version: -1
      input_map { key: "%s" value: "A" }
      input_map { key: "INPUT1" value: "%s" }
      output_map { key: "OUTPUT0" value: "SUM" }
    }
  ]
}
"""

ENSEMBLE_CYCLE = """platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "simple"
      input_map { key: "INPUT0" value: "A" }
      input_map { key: "INPUT1" value: "Y" }
      output_map { key: "OUTPUT0" value: "X" }
    },
    {
      model_name: "simple"
      input_map { key: "INPUT0" value: "X" }
      input_map { key: "INPUT1" value: "A" }
      output_map { key: "OUTPUT0" value: "Y" }
      output_map { key: "OUTPUT1" value: "SUM" }
    }
  ]
}
"""

CATALOGUE: list[Fault] = [
    Fault("syntax_error", "error", "Couldn't parse integer: oops", "config.pbtxt", 2,
          onnx_model('platform: "onnxruntime_onnx"\nmax_batch_size: oops\n')),
    Fault("unknown_field", "error", 'has no field named "max_batch_sizes". (did you mean "max_batch_size"?)',
          "config.pbtxt", 2, onnx_model(ADD_SUB.replace("max_batch_size", "max_batch_sizes"))),
    Fault("misspelt_data_type", "error", 'no value named TYPE_FLOAT. (did you mean "TYPE_FP32"?)',
          "config.pbtxt", 4, onnx_model(ADD_SUB.replace('"INPUT0" data_type: TYPE_INT32', '"INPUT0" data_type: TYPE_FLOAT'))),
    Fault("undefined_data_type_number", "error", "input[1].data_type: 32 is not a value of DataType",
          "config.pbtxt", 5, onnx_model(ADD_SUB.replace('"INPUT1" data_type: TYPE_INT32', '"INPUT1" data_type: 32'))),
    Fault("bf16_output", "error", "output 'Y': config says TYPE_FP16 but the model has TYPE_BF16",
          "config.pbtxt", 4, onnx_model(BF16, model=bfloat16_model())),
    Fault("name_mismatch", "error", "names the model 'other' but its folder is 'name_mismatch'", "config.pbtxt", 1,
          onnx_model('name: "other"\n' + ADD_SUB)),
    Fault("no_version_folder", "error", "model.onnx is directly in the model folder: move it into no_version_folder/1/",
          "", None, onnx_model(ADD_SUB, model_file="model.onnx")),
    Fault("leading_zero_version", "warning", "folder '01' is ignored: version folders are plain numbers",
          "01", None, with_stray_folder("01")),
    Fault("empty_version", "error", "version 1 is empty: put model.onnx in", "config.pbtxt", None,
          config_only(ADD_SUB)),
    Fault("misnamed_file", "error", 'found addsub.onnx: rename it to model.onnx or set default_model_filename: "addsub.onnx"',
          "config.pbtxt", None, onnx_model(ADD_SUB, model_file="1/addsub.onnx")),
    Fault("platform_is_backend_name", "error",
          'unknown platform \'onnxruntime\' (did you mean platform: "onnxruntime_onnx" or backend: "onnxruntime"?)',
          "config.pbtxt", 1, onnx_model(ADD_SUB.replace('"onnxruntime_onnx"', '"onnxruntime"'))),
    Fault("unknown_backend", "error", "unknown backend 'caffe2'", "config.pbtxt", 1,
          onnx_model(ADD_SUB.replace('platform: "onnxruntime_onnx"', 'backend: "caffe2"'))),
    Fault("platform_backend_mismatch", "error", "backend 'onnxruntime' does not match platform 'pytorch_libtorch'",
          "config.pbtxt", 1, onnx_model(ADD_SUB.replace('platform: "onnxruntime_onnx"',
                                                         'platform: "pytorch_libtorch"\nbackend: "onnxruntime"'))),
    Fault("version_policy_missing", "error", "version_policy asks for version(s) [2] but the model folder has [1]",
          "config.pbtxt", 11, onnx_model(ADD_SUB + "version_policy: { specific: { versions: [ 2 ] } }\n")),
    Fault("dtype_mismatch", "error", "input 'INPUT1': config says TYPE_FP32 but the model has TYPE_INT32",
          "config.pbtxt", 5, onnx_model(ADD_SUB.replace('"INPUT1" data_type: TYPE_INT32', '"INPUT1" data_type: TYPE_FP32'))),
    Fault("dims_mismatch", "error", "output 'OUTPUT1': config dims [8] do not match the model's [16]",
          "config.pbtxt", 9, onnx_model(ADD_SUB.replace('"OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]',
                                                         '"OUTPUT1" data_type: TYPE_INT32 dims: [ 8 ]'))),
    Fault("unknown_input_name", "error", "input 'INPUT_0' in config is not in the model (did you mean 'INPUT0'?)",
          "config.pbtxt", 4, onnx_model(ADD_SUB.replace('"INPUT0"', '"INPUT_0"'))),
    Fault("fixed_batch_dimension", "error", "max_batch_size is 8 but the model's first dimension is fixed at 1",
          "config.pbtxt", 2, onnx_model(ADD_SUB, model=fixed_batch_model())),
    Fault("duplicate_input", "error", "input 'INPUT0' is listed twice in the config", "config.pbtxt", 5,
          onnx_model(ADD_SUB.replace('"INPUT1"', '"INPUT0"'))),
    Fault("preferred_batch_too_large", "error", "preferred_batch_size 16 must be between 1 and max_batch_size (8)",
          "config.pbtxt", 12, onnx_model(ADD_SUB + "dynamic_batching {\n  preferred_batch_size: [ 4, 16 ]\n}\n")),
    Fault("cpu_instances_with_gpus", "error", "has kind KIND_CPU but lists gpus [0]", "config.pbtxt", 11,
          onnx_model(ADD_SUB + "instance_group [ { count: 2 kind: KIND_CPU gpus: [ 0 ] } ]\n")),
    Fault("too_many_instances", "error", "instance_group asks for 100001 instances in all; a model may have at most 1024",
          "config.pbtxt", 11, onnx_model(ADD_SUB + "instance_group [ { count: 100000 }, { count: 1 kind: KIND_CPU } ]\n")),
    Fault("batching_without_batch_dimension", "warning", "dynamic_batching does nothing while max_batch_size is 0",
          "config.pbtxt", 2, onnx_model(ADD_SUB.replace("max_batch_size: 8", "dynamic_batching { }")
                                        .replace("dims: [ 16 ]", "dims: [ -1, 16 ]"))),
    Fault("decoupled_onnx", "error", "model_transaction_policy decoupled needs a backend that can send many",
          "config.pbtxt", 11, onnx_model(ADD_SUB + "model_transaction_policy { decoupled: true }\n")),
    Fault("sequence_control_values", "error",
          "sequence control 'START' (CONTROL_SEQUENCE_START) needs exactly one of int32_false_true",
          "config.pbtxt", 7, onnx_model(SEQUENCE % ("START", "int32_false_true: [ 1 ]"), model=sequence_model())),
    Fault("sequence_control_not_in_model", "error",
          "sequence_batching feeds 'BEGIN' to the model, but the model has no input of that name",
          "config.pbtxt", 7, onnx_model(SEQUENCE % ("BEGIN", "int32_false_true: [ 0, 1 ]"), model=sequence_model())),
    Fault("missing_labels", "error", "output 'OUTPUT0': cannot read labels", "config.pbtxt", 8,
          onnx_model(ADD_SUB.replace('"OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ]',
                                     '"OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] label_filename: "labels.txt"'))),
    Fault("warmup_file_missing", "error", "no file warmup/input0.bin", "config.pbtxt", 11,
          onnx_model(ADD_SUB + 'model_warmup [ { name: "w" batch_size: 1 inputs { key: "INPUT0" value: '
                               '{ data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "input0.bin" } } } ]\n')),
    Fault("initial_state_file_missing", "error", "initial_state data_file: no file initial_state/seed.bin",
          "config.pbtxt", 8, onnx_model(SEEDED_SEQUENCE, model=sequence_model())),
    Fault("python_syntax_error", "error", "model.py does not compile", "1/model.py", 5,
          python_model(PY_CONFIG, GOOD_PY.replace("def execute(self, requests):", "def execute(self, requests)"))),
    Fault("python_no_model_class", "error", "model.py defines no class TritonPythonModel (found Model)", "1/model.py",
          None, python_model(PY_CONFIG, GOOD_PY.replace("TritonPythonModel", "Model"))),
    Fault("ensemble_unknown_model", "error",
          "step 0 runs model 'simpel', which is not in the repository (did you mean 'simple'?)", "config.pbtxt", 8,
          config_only(ENSEMBLE_HEAD % ("TYPE_INT32", "simpel", "INPUT0", "A"))),
    Fault("ensemble_unknown_step_input", "error",
          "input_map names input 'IN0', which 'simple' does not have (did you mean 'INPUT0'?)", "config.pbtxt", 10,
          config_only(ENSEMBLE_HEAD % ("TYPE_INT32", "simple", "IN0", "A"))),
    Fault("ensemble_dtype_mismatch", "error",
          "ensemble tensor 'A' comes from the ensemble input as TYPE_FP32, but input 'INPUT0' of step 0 ('simple') "
          "takes TYPE_INT32", "config.pbtxt", 10, config_only(ENSEMBLE_HEAD % ("TYPE_FP32", "simple", "INPUT0", "A"))),
    Fault("ensemble_cycle", "error", "the ensemble's steps 'simple', 'simple' form a cycle", "config.pbtxt", 7,
          config_only(ENSEMBLE_CYCLE)),
    Fault("ensemble_tensor_never_produced", "error",
          "ensemble tensor 'B' is consumed by step 0 ('simple') but no ensemble input or step output produces it",
          "config.pbtxt", 11, config_only(ENSEMBLE_HEAD % ("TYPE_INT32", "simple", "INPUT0", "B"))),
]  # fmt: skip


def build(repo: Path) -> None:
    write_simple(repo, config=ADD_SUB)
    for fault in CATALOGUE:
        fault.write(repo / fault.model)
