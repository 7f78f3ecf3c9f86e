"""Reading a TorchScript model's outputs by running it, since the file records no shapes or types.

Given its inputs (``--input``), the model runs twice on zeros: with batch 1 and 2 prepended when it
may batch, and with every variable input dim at 1 and then 2. The outputs of the first run give the
data types and dims; a dim that differs between the runs is variable (-1). A model that fails with
a batch dimension, or whose outputs do not follow it, does not batch (max_batch_size 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trt.server.core.errors import ModelConfigError
from trt.server.repo.tensor_spec import TensorSpec

_TORCH_TO_CONFIG = {
    "float32": "TYPE_FP32", "float16": "TYPE_FP16", "float64": "TYPE_FP64", "bfloat16": "TYPE_BF16",
    "int64": "TYPE_INT64", "int32": "TYPE_INT32", "int16": "TYPE_INT16", "int8": "TYPE_INT8",
    "uint8": "TYPE_UINT8", "bool": "TYPE_BOOL",
}  # fmt: skip
_CONFIG_TO_TORCH = {config: torch_name for torch_name, config in _TORCH_TO_CONFIG.items()}


@dataclass(frozen=True, slots=True)
class ProbeResult:
    outputs: tuple[TensorSpec, ...]
    batches: bool  # the outputs follow a batch dimension prepended to the inputs


def probe_outputs(path: Path, inputs: Sequence[TensorSpec], try_batching: bool) -> ProbeResult:
    import torch

    module = torch.jit.load(str(path), map_location="cpu").eval()
    failure = ""
    for batches in (True, False) if try_batching else (False,):
        try:
            first = _run(torch, module, inputs, batch=1 if batches else None, variable=1)
            second = _run(torch, module, inputs, batch=2 if batches else None, variable=2)
        except Exception as exc:  # the model's own error for inputs it cannot take
            failure = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            continue
        if batches and not all(a.ndim >= 1 and a.shape[0] == 1 for a in first):
            continue
        if batches and not all(b.ndim >= 1 and b.shape[0] == 2 for b in second):
            continue
        outputs = tuple(
            _spec(f"OUTPUT__{index}", a, b, strip_batch=batches)
            for index, (a, b) in enumerate(zip(first, second, strict=True))
        )
        return ProbeResult(outputs, batches)
    raise ModelConfigError(
        f"the TorchScript model did not run on zeros of the --input shapes ({failure}); check the inputs' "
        "types and dims, or give every output with --output NAME:TYPE:DIMS"
    )


def _run(
    torch: Any, module: Any, inputs: Sequence[TensorSpec], batch: int | None, variable: int
) -> list[Any]:
    arguments = []
    for spec in inputs:
        dtype_name = _CONFIG_TO_TORCH.get(spec.data_type)
        if dtype_name is None:
            raise ModelConfigError(f"input '{spec.name}': {spec.data_type} cannot be a TorchScript tensor")
        shape = ((batch,) if batch is not None else ()) + tuple(variable if d == -1 else d for d in spec.dims)
        arguments.append(torch.zeros(shape, dtype=getattr(torch, dtype_name)))
    with torch.inference_mode():
        result = module(*arguments)
    values = list(result) if isinstance(result, (tuple, list)) else [result]
    if not all(isinstance(value, torch.Tensor) for value in values):
        raise ModelConfigError(
            "forward() returns something other than tensors; give every output with --output NAME:TYPE:DIMS"
        )
    return values


def _spec(name: str, first: Any, second: Any, strip_batch: bool) -> TensorSpec:
    data_type = _TORCH_TO_CONFIG.get(str(first.dtype).removeprefix("torch."))
    if data_type is None:
        raise ModelConfigError(f"{name}: TorchScript dtype {first.dtype} has no Triton data type")
    dims_a, dims_b = list(first.shape), list(second.shape)
    if strip_batch:
        dims_a, dims_b = dims_a[1:], dims_b[1:]
    if len(dims_a) != len(dims_b):
        dims = tuple(-1 for _ in dims_a)
    else:
        dims = tuple(a if a == b else -1 for a, b in zip(dims_a, dims_b, strict=True))
    if not dims:
        raise ModelConfigError(
            f"{name} is a scalar per batch item; Triton needs at least one dim: give it with --output "
            f"{name}:{data_type.removeprefix('TYPE_')}:1 and reshape in the model, or return shape [1]"
        )
    return TensorSpec(name, data_type, dims)
