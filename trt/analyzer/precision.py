"""Reduced-precision variants of a model, and the accuracy guard that decides whether one may be served.

ONNX models: FP16 through ONNX Runtime's float16 converter (inputs and outputs stay FP32, so the config
and clients do not change) and INT8 through its dynamic quantization (weights INT8, activations quantized
at run time). TorchScript models: FP16 (see ``analyzer.torch_precision``). OpenVINO models: INT8 by NNCF
and FP16 as a compile-time hint where the CPU computes in it (see ``analyzer.openvino_precision``).

Each variant's outputs on the same sample inputs are compared with FP32's; the error is the largest
absolute difference relative to the largest FP32 magnitude of that output, so values near zero do not
inflate it.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trt.protos import model_config_pb2
from trt.server.core.datatypes import config_to_wire, wire_to_numpy
from trt.server.core.devices import gpu_count

logger = logging.getLogger("trt.analyze")

ONNX_PLATFORM = "onnxruntime_onnx"
TORCH_PLATFORM = "pytorch_libtorch"
OPENVINO = "openvino"  # no platform: the backend's name stands for it


def copy_model_file(source: Path, destination: Path) -> None:
    """A model file and what belongs with it: an OpenVINO IR's weights (``.bin``) beside its ``.xml``."""
    shutil.copyfile(source, destination)
    if source.suffix == ".xml" and source.with_suffix(".bin").is_file():
        shutil.copyfile(source.with_suffix(".bin"), destination.with_suffix(".bin"))


def served_by_config(platform: str, precision: str) -> bool:
    """Precisions served from the FP32 model file with a config setting, not from a file of their own:
    ONNX Runtime's TensorRT provider in FP16, OpenVINO's FP16 hint."""
    return precision == "trt_fp16" or (platform == OPENVINO and precision == "fp16")


@dataclass(frozen=True)
class PrecisionCheck:
    precision: str
    path: Path | None  # the variant's model file; None where it could not be made
    max_rel_error: float  # nan where not measured
    accepted: bool
    reason: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "precision": self.precision,
            "max_rel_error": None if np.isnan(self.max_rel_error) else self.max_rel_error,
            "accepted": self.accepted,
            "reason": self.reason,
        }


def available_precisions(platform: str) -> tuple[str, ...]:
    """What this machine can make for ``platform``: ONNX all three, TorchScript FP16, others FP32."""
    if platform == TORCH_PLATFORM:
        try:
            import torch  # noqa: F401
        except ImportError:
            return ("fp32",)
        return ("fp32", "fp16")
    if platform == OPENVINO:
        from trt.analyzer.openvino_precision import available

        return available()
    if platform != ONNX_PLATFORM:
        return ("fp32",)
    # The TensorRT execution provider needs no converted file: FP32 served with precision_mode FP16.
    tensorrt = ("trt_fp16",) if gpu_count() else ()
    try:
        import onnx  # noqa: F401  (the converters need it)
    except ImportError:
        return ("fp32", *tensorrt)
    return ("fp32", "fp16", "int8", *tensorrt)


def unavailable_reason(platform: str, precision: str) -> str:
    """Why ``available_precisions`` leaves ``precision`` out for ``platform`` on this machine."""
    if platform == OPENVINO:
        from trt.analyzer.openvino_precision import unavailable_reason as openvino_reason

        return openvino_reason(precision)
    return f"no {precision} conversion for {platform} models"


def make_variant(
    source: Path, precision: str, destination: Path, config: model_config_pb2.ModelConfig | None = None
) -> None:
    """Write ``source`` (an FP32 model file) converted to ``precision`` at ``destination`` (an OpenVINO
    IR's INT8 is calibrated on sample inputs of ``config``)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    if source.suffix == ".xml":
        if precision != "int8" or config is None:
            raise ValueError(f"no {precision} conversion for OpenVINO IR files")
        from trt.analyzer.openvino_precision import CALIBRATION_SAMPLES, make_int8_variant

        samples = [sample_inputs(config, batch=1, seed=seed) for seed in range(CALIBRATION_SAMPLES)]
        make_int8_variant(source, destination, samples)
        return
    if source.suffix == ".pt":
        if precision != "fp16":
            raise ValueError(f"no {precision} conversion for TorchScript")
        from trt.analyzer.torch_precision import make_fp16_variant

        make_fp16_variant(source, destination)
        return
    import onnx

    if precision == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = onnx.load(str(source))
        converted = convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=True)
        onnx.save(converted, str(destination))
    elif precision == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # its advice to pre-process is logged on the root logger
        try:
            quantize_dynamic(str(source), str(destination), weight_type=QuantType.QInt8)
        finally:
            root.setLevel(level)
    else:
        raise ValueError(f"no {precision} conversion")


def sample_inputs(config: model_config_pb2.ModelConfig, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of the configured dtypes and dims (variable dims as 1), a batch of ``batch`` where batching."""
    rng = np.random.default_rng(seed)
    inputs: dict[str, np.ndarray] = {}
    for tensor in config.input:
        dims = [d if d > 0 else 1 for d in tensor.dims]
        shape = ([batch] if config.max_batch_size > 0 else []) + dims
        datatype = config_to_wire(model_config_pb2.DataType.Name(tensor.data_type))
        if datatype == "BYTES":
            raise ValueError(f"input '{tensor.name}' is not numeric")
        dtype = wire_to_numpy(datatype)
        if np.issubdtype(dtype, np.floating):
            inputs[tensor.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            inputs[tensor.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            inputs[tensor.name] = rng.integers(0, 8, shape).astype(dtype)
    return inputs


def _run_torch(
    path: Path, config: model_config_pb2.ModelConfig, inputs: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Outputs by config name, with tensors fed to ``forward()`` by the PyTorch backend's own rules."""
    import torch

    from trt.server.backends.pytorch_plan import ForwardSignature, plan_call

    module = torch.jit.load(str(path), map_location="cpu").eval()
    plan = plan_call(
        [t.name for t in config.input],
        [t.name for t in config.input if t.optional],
        [t.name for t in config.output],
        ForwardSignature.of(module),
    )
    tensors = {name: torch.from_numpy(inputs[name]) for name in plan.inputs}
    with torch.inference_mode():
        result = module(**tensors) if plan.keyword else module(*tensors.values())
    values = result if isinstance(result, tuple | list) else (result,)
    return {name: values[position].numpy() for name, position in plan.outputs.items()}


def _run(
    path: Path, config: model_config_pb2.ModelConfig, inputs: dict[str, np.ndarray], precision: str = "fp32"
) -> dict[str, np.ndarray]:
    if path.suffix == ".xml":
        from trt.analyzer import openvino_precision

        hint = dict([openvino_precision.FP16_PARAMETER]) if precision == "fp16" else None
        return openvino_precision.run(path, config, inputs, hint)
    if path.suffix == ".pt":
        return _run_torch(path, config, inputs)
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    feed: dict[str, Any] = {i.name: inputs[i.name] for i in session.get_inputs() if i.name in inputs}
    return dict(zip(names, session.run(names, feed), strict=True))


def relative_error(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray]) -> float:
    worst = 0.0
    for name, expected in reference.items():
        got = candidate[name].astype(np.float64)
        scale = float(np.max(np.abs(expected))) if expected.size else 0.0
        difference = float(np.max(np.abs(got - expected.astype(np.float64)))) if expected.size else 0.0
        worst = max(worst, difference / scale if scale > 0 else difference)
    return worst


def check_precisions(
    source: Path,
    config: model_config_pb2.ModelConfig,
    precisions: tuple[str, ...],
    workdir: Path,
    max_rel_error: float,
) -> dict[str, PrecisionCheck]:
    """Make each reduced-precision variant of ``source`` and judge it against FP32 on sample inputs."""
    checks = {"fp32": PrecisionCheck("fp32", source, 0.0, True)}
    wanted = [p for p in precisions if p not in ("fp32", "trt_fp16")]
    if "trt_fp16" in precisions:  # judged by TensorRT at build time, not measurable without a GPU here
        checks["trt_fp16"] = PrecisionCheck("trt_fp16", source, float("nan"), True, "TensorRT EP, FP16")
    if not wanted:
        return checks
    try:
        inputs = sample_inputs(config, batch=max(1, min(8, config.max_batch_size)))
        reference = _run(source, config, inputs)
    except Exception as exc:  # a model the converters cannot read is served in FP32 only
        for precision in wanted:
            checks[precision] = PrecisionCheck(precision, None, float("nan"), False, f"no reference: {exc}")
        return checks
    platform = config.platform or config.backend
    for precision in wanted:
        destination = source if served_by_config(platform, precision) else workdir / precision / source.name
        try:
            if destination != source:
                make_variant(source, precision, destination, config)
            error = relative_error(reference, _run(destination, config, inputs, precision))
        except Exception as exc:
            logger.info("%s variant failed: %s", precision, exc)
            checks[precision] = PrecisionCheck(
                precision, None, float("nan"), False, f"conversion failed: {exc}"
            )
            continue
        accepted = error <= max_rel_error
        reason = "" if accepted else f"relative error {error:.2e} exceeds --max-rel-error {max_rel_error:g}"
        checks[precision] = PrecisionCheck(precision, destination, error, accepted, reason)
    return checks
