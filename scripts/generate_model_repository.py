"""(Re)create the example ONNX models of ``model_repository/``, deterministically and offline.

Usage::

    python scripts/generate_model_repository.py [--output DIR]

Every model is written in Triton's layout, ``<DIR>/<name>/config.pbtxt`` plus
``<DIR>/<name>/1/model.onnx``, then validated with ``onnx.checker`` and by one run in
onnxruntime whose results are compared with numpy. Nothing is downloaded.

The models, and what each one is for:

``simple``
    Triton's canonical example: ``OUTPUT0 = INPUT0 + INPUT1`` and ``OUTPUT1 = INPUT0 - INPUT1``,
    INT32 tensors of shape ``[batch, 16]``. It is what Triton's own client examples, the quick
    start and ``perf_analyzer -m simple`` expect, so it is the reference for wire compatibility.
``simple_fp32``
    The same add/sub graph on FP32 tensors with ``max_batch_size: 64``: exercises the float path
    of the protocols (JSON numbers, binary tensor data) and larger dynamic batches.
``cnn_onnx``
    A small, compute-bound convolutional network (three conv+ReLU blocks, global average pool,
    linear layer to 10 classes) exported from PyTorch with random weights under a fixed seed.
    Input ``input`` FP32 ``[batch, 3, 64, 64]``, output ``logits`` FP32 ``[batch, 10]``. Its
    ``config.pbtxt`` is deliberately minimal (name, platform, ``max_batch_size``) so that the
    server's auto-complete must fill in inputs and outputs from the ONNX graph. It needs torch
    (``pip install torch==2.13.0``); without torch the other models are still generated.
``mlp_onnx``
    A compute-bound multi-layer perceptron built directly with ``onnx.helper`` and numpy
    (no torch): ``INPUT0`` FP32 ``[batch, 256]`` through three Gemm+ReLU layers of width 512 to
    ``OUTPUT0`` FP32 ``[batch, 10]``. A realistic target for the load generator and the config
    analyzer (dynamic batching and instance counts make a measurable difference).

``tiny_llm``
    A small generative model (a Llama decoder and a BPE tokenizer trained on text in this
    repository) with the I/O contract of Triton's vLLM backend, for the OpenAI front end. Built in
    ``tiny_llm.py`` beside this script; it needs the ``genai`` extra (torch, transformers,
    tokenizers) and is skipped without it.

``simple``, ``simple_fp32`` and ``mlp_onnx`` are byte-for-byte reproducible: producer, IR version,
opset and doc strings are fixed, weights come from a seeded numpy generator, and protobuf
serialization is deterministic. ``cnn_onnx`` is reproducible for a given torch version. ``tiny_llm``'s
files are byte-for-byte reproducible too (weights from a seeded numpy generator, JSON written sorted).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from tiny_llm import generate_tiny_llm  # beside this script, which Python puts first on sys.path

if TYPE_CHECKING:
    from torch import nn

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO_ROOT / "model_repository"

PRODUCER_NAME = "trt-generate-model-repository"
PRODUCER_VERSION = "1"
IR_VERSION = 8
OPSET = 17
SEED = 0
TORCH_PIN = "torch==2.13.0"

SIMPLE_WIDTH = 16
MLP_INPUT_WIDTH = 256
MLP_HIDDEN_WIDTH = 512
MLP_HIDDEN_LAYERS = 3
NUM_CLASSES = 10
CNN_IMAGE_SIZE = 64

CPU_INSTANCE_GROUP = "instance_group [ { kind: KIND_CPU count: 1 } ]\n"


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as it appears in config.pbtxt (dims exclude the batch dimension)."""

    name: str
    data_type: str
    dims: tuple[int, ...]

    def to_pbtxt(self) -> str:
        dims = ", ".join(str(d) for d in self.dims)
        return f'  {{ name: "{self.name}" data_type: {self.data_type} dims: [ {dims} ] }}'


# ---------------------------------------------------------------------------------------------
# config.pbtxt
# ---------------------------------------------------------------------------------------------


def minimal_config(name: str, max_batch_size: int) -> str:
    """Name, platform and max_batch_size only: the rest is left to the server's auto-complete."""
    return f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch_size}\n'


def complete_config(
    name: str, max_batch_size: int, inputs: list[TensorSpec], outputs: list[TensorSpec]
) -> str:
    """A config.pbtxt listing every input and output, with one CPU instance."""
    input_block = ",\n".join(spec.to_pbtxt() for spec in inputs)
    output_block = ",\n".join(spec.to_pbtxt() for spec in outputs)
    return (
        f"{minimal_config(name, max_batch_size)}"
        f"input [\n{input_block}\n]\n"
        f"output [\n{output_block}\n]\n"
        f"{CPU_INSTANCE_GROUP}"
    )


# ---------------------------------------------------------------------------------------------
# Writing and checking models
# ---------------------------------------------------------------------------------------------


def finalize_model(model: onnx.ModelProto, doc_string: str) -> onnx.ModelProto:
    """Pin every piece of metadata that could otherwise vary between runs or onnx versions."""
    model.ir_version = IR_VERSION
    model.producer_name = PRODUCER_NAME
    model.producer_version = PRODUCER_VERSION
    model.domain = ""
    model.model_version = 1
    model.doc_string = doc_string
    model.graph.doc_string = ""
    for node in model.graph.node:
        node.doc_string = ""
    return model


def serialize(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString(deterministic=True)


def write_model(output: Path, name: str, model_bytes: bytes, config: str) -> Path:
    """Write ``<output>/<name>/1/model.onnx`` and ``<output>/<name>/config.pbtxt``."""
    model_dir = output / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    model_path = model_dir / "1" / "model.onnx"
    model_path.write_bytes(model_bytes)
    (model_dir / "config.pbtxt").write_text(config)
    return model_path


def run_once(model_path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the model once on CPU in onnxruntime; outputs by name."""
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [out.name for out in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def check_model(model_path: Path) -> onnx.ModelProto:
    model = onnx.load(str(model_path))
    onnx.checker.check_model(model, full_check=True)
    return model


def require(condition: bool, message: str) -> None:
    if not condition:
        raise RuntimeError(f"validation failed: {message}")


def require_symbolic_batch(model_path: Path) -> None:
    """Every input and output of the session must have a symbolic (dynamic) first dimension."""
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    for arg in [*session.get_inputs(), *session.get_outputs()]:
        require(isinstance(arg.shape[0], str), f"{model_path}: {arg.name} batch dim is {arg.shape[0]!r}")


# ---------------------------------------------------------------------------------------------
# simple / simple_fp32: add and subtract
# ---------------------------------------------------------------------------------------------


def build_add_sub_model(elem_type: int, graph_name: str) -> onnx.ModelProto:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 on [batch, 16], batch named "batch"."""
    shape: list[str | int] = ["batch", SIMPLE_WIDTH]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
        ],
        graph_name,
        [helper.make_tensor_value_info(n, elem_type, shape) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, elem_type, shape) for n in ("OUTPUT0", "OUTPUT1")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    return finalize_model(model, "OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1")


def add_sub_config(name: str, data_type: str, max_batch_size: int) -> str:
    dims = (SIMPLE_WIDTH,)
    return complete_config(
        name,
        max_batch_size,
        [TensorSpec("INPUT0", data_type, dims), TensorSpec("INPUT1", data_type, dims)],
        [TensorSpec("OUTPUT0", data_type, dims), TensorSpec("OUTPUT1", data_type, dims)],
    )


def validate_add_sub(model_path: Path, dtype: type[np.generic]) -> None:
    check_model(model_path)
    require_symbolic_batch(model_path)
    rng = np.random.default_rng(SEED)
    in0 = rng.integers(-100, 100, size=(3, SIMPLE_WIDTH)).astype(dtype)
    in1 = rng.integers(-100, 100, size=(3, SIMPLE_WIDTH)).astype(dtype)
    outputs = run_once(model_path, {"INPUT0": in0, "INPUT1": in1})
    require(outputs["OUTPUT0"].dtype == dtype, f"{model_path}: OUTPUT0 dtype {outputs['OUTPUT0'].dtype}")
    require(np.array_equal(outputs["OUTPUT0"], in0 + in1), f"{model_path}: OUTPUT0 != INPUT0 + INPUT1")
    require(np.array_equal(outputs["OUTPUT1"], in0 - in1), f"{model_path}: OUTPUT1 != INPUT0 - INPUT1")


def generate_simple(output: Path) -> Path:
    model = build_add_sub_model(TensorProto.INT32, "simple")
    path = write_model(output, "simple", serialize(model), add_sub_config("simple", "TYPE_INT32", 8))
    validate_add_sub(path, np.int32)
    return path


def generate_simple_fp32(output: Path) -> Path:
    model = build_add_sub_model(TensorProto.FLOAT, "simple_fp32")
    config = add_sub_config("simple_fp32", "TYPE_FP32", 64)
    path = write_model(output, "simple_fp32", serialize(model), config)
    validate_add_sub(path, np.float32)
    return path


# ---------------------------------------------------------------------------------------------
# mlp_onnx: Gemm+Relu stack built with onnx.helper and numpy
# ---------------------------------------------------------------------------------------------


def mlp_layer_widths() -> list[int]:
    return [MLP_INPUT_WIDTH, *([MLP_HIDDEN_WIDTH] * MLP_HIDDEN_LAYERS), NUM_CLASSES]


def mlp_weights() -> list[tuple[np.ndarray, np.ndarray]]:
    """He-initialised (weight [out, in], bias [out]) pairs from a seeded generator."""
    rng = np.random.default_rng(SEED)
    widths = mlp_layer_widths()
    layers = []
    for fan_in, fan_out in itertools.pairwise(widths):
        weight = (rng.standard_normal((fan_out, fan_in)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        bias = (rng.standard_normal(fan_out) * 0.01).astype(np.float32)
        layers.append((weight, bias))
    return layers


def build_mlp_model(layers: list[tuple[np.ndarray, np.ndarray]]) -> onnx.ModelProto:
    """INPUT0 [batch, 256] -> (Gemm -> Relu) x 3 -> Gemm -> OUTPUT0 [batch, 10]."""
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    current = "INPUT0"
    for index, (weight, bias) in enumerate(layers):
        is_last = index == len(layers) - 1
        weight_name, bias_name = f"fc{index}.weight", f"fc{index}.bias"
        initializers += [
            numpy_helper.from_array(weight, weight_name),
            numpy_helper.from_array(bias, bias_name),
        ]
        gemm_out = "OUTPUT0" if is_last else f"fc{index}"
        nodes.append(
            helper.make_node(
                "Gemm", [current, weight_name, bias_name], [gemm_out], name=f"fc{index}", transB=1
            )
        )
        current = gemm_out
        if not is_last:
            nodes.append(helper.make_node("Relu", [gemm_out], [f"relu{index}"], name=f"relu{index}"))
            current = f"relu{index}"
    graph = helper.make_graph(
        nodes,
        "mlp_onnx",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", MLP_INPUT_WIDTH])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", NUM_CLASSES])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    return finalize_model(model, "MLP 256 -> 3 x (Gemm 512 + Relu) -> 10, random weights (seed 0)")


def mlp_reference(layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    for index, (weight, bias) in enumerate(layers):
        x = x @ weight.T + bias
        if index < len(layers) - 1:
            x = np.maximum(x, 0.0)
    return x


def mlp_config() -> str:
    return complete_config(
        "mlp_onnx",
        64,
        [TensorSpec("INPUT0", "TYPE_FP32", (MLP_INPUT_WIDTH,))],
        [TensorSpec("OUTPUT0", "TYPE_FP32", (NUM_CLASSES,))],
    )


def validate_mlp(model_path: Path, layers: list[tuple[np.ndarray, np.ndarray]]) -> None:
    check_model(model_path)
    require_symbolic_batch(model_path)
    x = np.random.default_rng(SEED + 1).standard_normal((4, MLP_INPUT_WIDTH)).astype(np.float32)
    got = run_once(model_path, {"INPUT0": x})["OUTPUT0"]
    require(got.shape == (4, NUM_CLASSES), f"{model_path}: OUTPUT0 shape {got.shape}")
    require(np.allclose(got, mlp_reference(layers, x), rtol=1e-4, atol=1e-4), f"{model_path}: != numpy MLP")


def generate_mlp_onnx(output: Path) -> Path:
    layers = mlp_weights()
    path = write_model(output, "mlp_onnx", serialize(build_mlp_model(layers)), mlp_config())
    validate_mlp(path, layers)
    return path


# ---------------------------------------------------------------------------------------------
# cnn_onnx: small CNN exported from PyTorch
# ---------------------------------------------------------------------------------------------


def build_cnn_module() -> nn.Module:
    """A small image classifier with random weights (torch.manual_seed(0)), in eval mode."""
    import torch
    from torch import nn

    class SmallCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 32, kernel_size=3, stride=2, padding=1),  # 64x64 -> 32x32
                nn.ReLU(),
                nn.Conv2d(32, 64, kernel_size=3, stride=2, padding=1),  # 32x32 -> 16x16
                nn.ReLU(),
                nn.Conv2d(64, 64, kernel_size=3, stride=1, padding=1),  # 16x16
                nn.ReLU(),
                nn.MaxPool2d(2),  # 16x16 -> 8x8
            )
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Linear(64, NUM_CLASSES)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.pool(self.features(x))
            return self.classifier(torch.flatten(x, 1))

    torch.manual_seed(SEED)
    return SmallCNN().eval()


def export_cnn(module: nn.Module) -> onnx.ModelProto:
    """Export with the TorchScript-based exporter (no onnxscript needed), dynamic batch dim."""
    import torch

    example = torch.zeros(1, 3, CNN_IMAGE_SIZE, CNN_IMAGE_SIZE)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        onnx_path = Path(tmp) / "cnn.onnx"
        # The legacy exporter is chosen on purpose: the dynamo one needs onnxscript.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            module,
            (example,),
            onnx_path,
            input_names=["input"],
            output_names=["logits"],
            opset_version=OPSET,
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
            do_constant_folding=True,
            dynamo=False,
        )
        model = onnx.load(str(onnx_path))
    finalize_model(model, "Small CNN 3x64x64 -> 10 logits, random weights (torch.manual_seed(0))")
    model.producer_version = f"{PRODUCER_VERSION} (torch {torch.__version__})"
    return model


def validate_cnn(model_path: Path, module: nn.Module) -> None:
    import torch

    check_model(model_path)
    require_symbolic_batch(model_path)
    x = np.random.default_rng(SEED + 2).standard_normal((2, 3, CNN_IMAGE_SIZE, CNN_IMAGE_SIZE))
    x = x.astype(np.float32)
    got = run_once(model_path, {"input": x})["logits"]
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    require(got.shape == (2, NUM_CLASSES), f"{model_path}: logits shape {got.shape}")
    require(np.allclose(got, expected, rtol=1e-4, atol=1e-5), f"{model_path}: != torch CNN")


def generate_cnn_onnx(output: Path) -> Path | None:
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"skipping cnn_onnx: it needs PyTorch; install it with `pip install {TORCH_PIN}`")
        return None
    module = build_cnn_module()
    model = export_cnn(module)
    path = write_model(output, "cnn_onnx", serialize(model), minimal_config("cnn_onnx", 32))
    validate_cnn(path, module)
    return path


# ---------------------------------------------------------------------------------------------
# torch_mlp: a TorchScript model for the PyTorch backend, with Triton's INPUT__0 / OUTPUT__0 names
# ---------------------------------------------------------------------------------------------

TORCH_MLP_CONFIG = """name: "torch_mlp"
platform: "pytorch_libtorch"
max_batch_size: 32
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


def generate_torch_mlp(output: Path) -> Path | None:
    try:
        import torch
        from torch import nn
    except ImportError:
        print(f"skipping torch_mlp: it needs PyTorch; install it with `pip install {TORCH_PIN}`")
        return None
    torch.manual_seed(SEED)
    module = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, NUM_CLASSES)).eval()
    scripted = torch.jit.script(module)
    path = output / "torch_mlp" / "1" / "model.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    scripted.save(str(path))
    (output / "torch_mlp" / "config.pbtxt").write_text(TORCH_MLP_CONFIG)
    x = torch.randn(3, 64)
    with torch.inference_mode():
        require(torch.allclose(torch.jit.load(str(path))(x), module(x)), f"{path}: reloaded != module")
    return path


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[Path], Path | None]] = {
    "simple": generate_simple,
    "simple_fp32": generate_simple_fp32,
    "mlp_onnx": generate_mlp_onnx,
    "cnn_onnx": generate_cnn_onnx,
    "torch_mlp": generate_torch_mlp,
    "tiny_llm": generate_tiny_llm,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help=f"model repository to write (default: {DEFAULT_OUTPUT})",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    output: Path = parse_args(argv).output.resolve()
    for name, generate in GENERATORS.items():
        path = generate(output)
        if path is not None:
            print(f"{name}: {path} ({path.stat().st_size:,} bytes), validated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
