"""What a TensorRT engine's I/O tensors mean for a Triton config, as pure functions.

Kept apart from ``server.backends.tensorrt`` (which needs the ``tensorrt`` package and a GPU) so that
auto-complete and validation are tested on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from protos import model_config_pb2
from server.core.errors import ModelConfigError

# tensorrt.DataType names -> config data types. FP8/INT4 have no Triton wire type.
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


@dataclass(frozen=True, slots=True)
class EngineTensor:
    name: str
    is_input: bool
    trt_type: str  # tensorrt.DataType name, e.g. "FLOAT"
    shape: tuple[int, ...]  # -1 where the dimension is dynamic
    profile_max: tuple[int, ...] | None = None  # inputs: the largest shape optimization profile 0 accepts

    @property
    def config_type(self) -> str:
        try:
            return TRT_TO_CONFIG_TYPE[self.trt_type]
        except KeyError:
            raise ModelConfigError(
                f"tensor '{self.name}' has TensorRT type {self.trt_type}, which Triton cannot carry"
            ) from None


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
                continue
            if entry.data_type == model_config_pb2.TYPE_INVALID:
                entry.data_type = model_config_pb2.DataType.Value(tensor.config_type)
            if not entry.dims:
                entry.dims.extend(tensor.shape[1:] if strip else tensor.shape)


def check(config: model_config_pb2.ModelConfig, tensors: list[EngineTensor]) -> None:
    """Raise ModelConfigError where the config and the engine disagree."""
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
    strip = config.max_batch_size > 0
    for declared, is_input, kind in ((config.input, True, "input"), (config.output, False, "output")):
        by_name = {t.name: t for t in tensors if t.is_input == is_input}
        for entry in declared:
            tensor = by_name.get(entry.name)
            if tensor is None:
                raise ModelConfigError(
                    f"{kind} '{entry.name}' is not in the engine; its {kind}s are: {', '.join(by_name)}"
                )
            declared_type = model_config_pb2.DataType.Name(entry.data_type)
            if declared_type != tensor.config_type:
                raise ModelConfigError(
                    f"{kind} '{entry.name}': config says {declared_type}, engine has {tensor.config_type}"
                )
            engine_dims = tensor.shape[1:] if strip else tensor.shape
            if len(engine_dims) != len(entry.dims) or any(
                e != d and e != -1 and d != -1 for e, d in zip(engine_dims, entry.dims, strict=True)
            ):
                raise ModelConfigError(
                    f"{kind} '{entry.name}': config dims {list(entry.dims)} != engine {list(engine_dims)}"
                )
