"""What a TensorRT engine's I/O tensors mean for a Triton config, as pure functions.

Kept apart from ``server.backends.tensorrt`` (which needs the ``tensorrt`` package and a GPU) so that
reading an engine's I/O, auto-complete and validation are tested on any machine: ``read_engine``
takes anything shaped like a TensorRT 10 ``ICudaEngine`` (enums are compared by ``.name``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trt.protos import model_config_pb2
from trt.server.core.datatypes import BF16_DTYPE
from trt.server.core.errors import ModelConfigError

# tensorrt.DataType names -> config data types. FP8/INT4/FP4 have no Triton wire type.
TRT_TO_CONFIG_TYPE = {
    "FLOAT": "TYPE_FP32",
    "HALF": "TYPE_FP16",
    "BF16": "TYPE_BF16",
    "INT8": "TYPE_INT8",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
}
# Host arrays for each type (BF16 as ml_dtypes' bfloat16, which the core uses for it).
TRT_TO_NUMPY: dict[str, np.dtype[Any]] = {
    "FLOAT": np.dtype(np.float32),
    "HALF": np.dtype(np.float16),
    "BF16": BF16_DTYPE,
    "INT8": np.dtype(np.int8),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
}


@dataclass(frozen=True, slots=True)
class EngineTensor:
    name: str
    is_input: bool
    trt_type: str  # tensorrt.DataType name, e.g. "FLOAT"
    shape: tuple[int, ...]  # -1 where the dimension is dynamic
    profile_max: tuple[int, ...] | None = None  # inputs: the largest shape optimization profile 0 accepts
    profile_min: tuple[int, ...] | None = None  # inputs: the smallest
    linear: bool = True  # False for vectorized formats (CHW4...), which Triton clients cannot fill
    shape_tensor: bool = False  # holds shape values read on the host (is_shape_inference_io)

    @property
    def config_type(self) -> str:
        try:
            return TRT_TO_CONFIG_TYPE[self.trt_type]
        except KeyError:
            raise ModelConfigError(
                f"tensor '{self.name}' has TensorRT type {self.trt_type}, which Triton cannot carry"
            ) from None

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        try:
            return TRT_TO_NUMPY[self.trt_type]
        except KeyError:
            raise ModelConfigError(
                f"tensor '{self.name}' has TensorRT type {self.trt_type}, which this server cannot carry "
                "(no numpy type); rebuild the engine with FP16 or FP32 I/O"
            ) from None


def read_engine(engine: Any) -> list[EngineTensor]:
    """The I/O tensors of a deserialized engine (TensorRT 10 API), profile 0's limits for inputs."""
    tensors = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        is_input = engine.get_tensor_mode(name).name == "INPUT"
        shape_tensor = bool(engine.is_shape_inference_io(name))
        profile_min = profile_max = None
        if is_input and not shape_tensor and engine.num_optimization_profiles > 0:
            low, _, high = engine.get_tensor_profile_shape(name, 0)
            profile_min, profile_max = tuple(low), tuple(high)
        tensors.append(
            EngineTensor(
                name,
                is_input,
                engine.get_tensor_dtype(name).name,
                tuple(engine.get_tensor_shape(name)),
                profile_max,
                profile_min,
                engine.get_tensor_format(name).name == "LINEAR",
                shape_tensor,
            )
        )
    return tensors


def engine_max_batch_size(tensors: list[EngineTensor]) -> int:
    """0 when the engine has no shared dynamic first dimension; else the largest batch profile 0 allows."""
    if not tensors or any(not t.shape or t.shape[0] != -1 for t in tensors):
        return 0
    limits = [t.profile_max[0] for t in tensors if t.is_input and t.profile_max]
    return min(limits) if limits else 0


def auto_complete(config: model_config_pb2.ModelConfig, tensors: list[EngineTensor]) -> None:
    """Fill max_batch_size, inputs and outputs from the engine; keep whatever the config says."""
    engine_batch = engine_max_batch_size(tensors)
    if (
        config.max_batch_size == 0
        and engine_batch > 0
        and not any(t.dims for t in (*config.input, *config.output))
    ):
        config.max_batch_size = engine_batch
        if config.WhichOneof("scheduling_choice") is None:
            config.dynamic_batching.SetInParent()
    strip = config.max_batch_size > 0
    for declared, is_input in ((config.input, True), (config.output, False)):
        found = [t for t in tensors if t.is_input == is_input]
        if not declared:
            for engine_tensor in found:
                declared.add().name = engine_tensor.name
        by_name = {t.name: t for t in found}
        for entry in declared:
            tensor = by_name.get(entry.name)
            if tensor is None:
                continue  # check() names it, with the engine's real names
            if entry.data_type == model_config_pb2.TYPE_INVALID:
                entry.data_type = model_config_pb2.DataType.Value(tensor.config_type)
            if not entry.dims:
                entry.dims.extend(tensor.shape[1:] if strip else tensor.shape)


def check(config: model_config_pb2.ModelConfig, tensors: list[EngineTensor]) -> None:
    """Raise ModelConfigError where the config and the engine disagree, or the engine cannot be served."""
    engine_batch = engine_max_batch_size(tensors)
    if config.max_batch_size > 0 and engine_batch == 0:
        raise ModelConfigError(
            f"max_batch_size is {config.max_batch_size} but the engine has no dynamic batch dimension; set 0"
        )
    if config.max_batch_size > engine_batch > 0:
        raise ModelConfigError(
            f"max_batch_size {config.max_batch_size} exceeds the largest batch of the engine's "
            f"optimization profile ({engine_batch})"
        )
    for tensor in tensors:
        if tensor.shape_tensor:
            raise ModelConfigError(
                f"engine tensor '{tensor.name}' is a shape tensor; this backend serves execution tensors only"
            )
        if not tensor.linear:
            raise ModelConfigError(
                f"engine tensor '{tensor.name}' has a vectorized (non-linear) format; "
                "rebuild the engine with linear I/O formats"
            )
    strip = config.max_batch_size > 0
    for declared, is_input, kind in ((config.input, True, "input"), (config.output, False, "output")):
        by_name = {t.name: t for t in tensors if t.is_input == is_input}
        for entry in declared:
            engine_tensor = by_name.get(entry.name)
            if engine_tensor is None:
                raise ModelConfigError(
                    f"{kind} '{entry.name}' is not in the engine; its {kind}s are: {', '.join(by_name)}"
                )
            declared_type = model_config_pb2.DataType.Name(entry.data_type)
            if declared_type != engine_tensor.config_type:
                raise ModelConfigError(
                    f"{kind} '{entry.name}': config says {declared_type}, "
                    f"engine has {engine_tensor.config_type}"
                )
            _ = engine_tensor.numpy_dtype  # BF16: refused here rather than on the first request
            engine_dims = engine_tensor.shape[1:] if strip else engine_tensor.shape
            config_dims = list(entry.reshape.shape) if entry.HasField("reshape") else list(entry.dims)
            if len(engine_dims) != len(config_dims) or any(
                e != d and e != -1 and d != -1 for e, d in zip(engine_dims, config_dims, strict=True)
            ):
                raise ModelConfigError(
                    f"{kind} '{entry.name}': config dims {config_dims} != engine {list(engine_dims)}"
                    + (" (the batch dimension is implied by max_batch_size)" if strip else "")
                )
    # After the per-name checks, so that a misspelt input is reported as such rather than as missing.
    declared_inputs = {t.name for t in config.input}
    missing = [t.name for t in tensors if t.is_input and t.name not in declared_inputs]
    if missing:
        raise ModelConfigError(
            f"the engine needs input(s) {', '.join(missing)}, which the config does not list"
        )


def profile_error(tensor: EngineTensor, shape: tuple[int, ...]) -> str:
    """Why TensorRT refused an input shape: it lies outside optimization profile 0."""
    limits = ""
    if tensor.profile_min is not None and tensor.profile_max is not None:
        limits = f" (min {list(tensor.profile_min)}, max {list(tensor.profile_max)})"
    return (
        f"input '{tensor.name}': shape {list(shape)} is outside the engine's optimization profile 0{limits}"
    )
