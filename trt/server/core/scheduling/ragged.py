"""Triton's ragged batching for tensor backends: ``allow_ragged_batch`` inputs, ``batch_input`` and
``batch_output`` in a config (Triton's ``ragged_batching.md``; the tensors as its backends'
``backend_input_collector.cc`` and ``backend_output_responder.cc`` build and scatter them).

A ragged input is not shape-checked across the requests of a batch: requests of different lengths
batch together, and the model gets their elements concatenated into one 1-D tensor, a batch of one
included (as Triton's ONNX Runtime, PyTorch, TensorFlow and TensorRT backends pass them). Since that
tensor does not say where each request's elements end, the server adds the ``batch_input`` tensors
the config asks for, computed once the batch is formed, from one source input's shape in each request:

- ``BATCH_ELEMENT_COUNT``: each request's element count, shape [requests];
- ``BATCH_ACCUMULATED_ELEMENT_COUNT``: their running sum, shape [requests];
- ``BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO``: the same after a 0, shape [requests + 1];
- ``BATCH_MAX_ELEMENT_COUNT_AS_SHAPE``: shape [the largest count], its values zero (only its shape
  speaks);
- ``BATCH_ITEM_SHAPE``: each batch item's shape without the batch dimension, [items, rank - 1];
- ``BATCH_ITEM_SHAPE_FLATTEN``: the same flattened, [items x (rank - 1)].

Outputs are split by the batch dimension as for any batch, except a ``batch_output`` of kind
``BATCH_SCATTER_WITH_INPUT_SHAPE``: the model's output is cut in the order of the requests, each
piece taking the shape of the output's config dims with every -1 set to the source input's dimension
there (the request's batch dimension first).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from trt.protos import model_config_pb2
from trt.server.core.errors import InvalidInput, ModelConfigError

_Kind = model_config_pb2.BatchInput.Kind
_DTYPES = {model_config_pb2.TYPE_INT32: np.dtype(np.int32), model_config_pb2.TYPE_FP32: np.dtype(np.float32)}


@dataclass(frozen=True, slots=True)
class BatchInputSpec:
    kind: int  # BatchInput.Kind
    targets: tuple[str, ...]
    dtype: np.dtype[np.generic]
    source: str


@dataclass(frozen=True, slots=True)
class ScatterSpec:
    source: str
    dims: tuple[int, ...]  # the output's config dims, the batch dimension first (-1)


@dataclass(frozen=True, slots=True)
class RaggedBatching:
    ragged: frozenset[str]  # inputs with allow_ragged_batch
    batch_inputs: tuple[BatchInputSpec, ...]
    scatter: Mapping[str, ScatterSpec]  # batch outputs, by output name

    @classmethod
    def from_config(cls, config: model_config_pb2.ModelConfig) -> RaggedBatching | None:
        """The config's ragged batching, or None when it uses none; ModelConfigError where it is wrong."""
        ragged = frozenset(t.name for t in config.input if t.allow_ragged_batch)
        if not ragged and not config.batch_input and not config.batch_output:
            return None
        if config.max_batch_size <= 0:
            raise ModelConfigError(
                "allow_ragged_batch, batch_input and batch_output need a model that batches "
                "(max_batch_size > 0)",
                "max_batch_size",
            )
        inputs = {t.name for t in config.input}
        outputs = {t.name: t for t in config.output}
        specs = []
        for index, batch_input in enumerate(config.batch_input):
            where = f"batch_input[{index}]"
            if batch_input.kind not in _Kind.values():
                raise ModelConfigError(
                    f"{where}.kind {batch_input.kind} is not one Triton has", f"{where}.kind"
                )
            if len(batch_input.source_input) != 1 or batch_input.source_input[0] not in inputs:
                raise ModelConfigError(
                    f"{where} must name one source_input among the config's inputs "
                    f"({', '.join(sorted(inputs)) or 'none'})",
                    f"{where}.source_input",
                )
            if not batch_input.target_name:
                raise ModelConfigError(f"{where} has no target_name", f"{where}.target_name")
            clash = [name for name in batch_input.target_name if name in inputs]
            if clash:
                raise ModelConfigError(
                    f"{where}.target_name '{clash[0]}' is also a config input: the server makes it",
                    f"{where}.target_name",
                )
            dtype = _DTYPES.get(batch_input.data_type)
            if dtype is None:
                raise ModelConfigError(
                    f"{where}.data_type must be TYPE_INT32 or TYPE_FP32", f"{where}.data_type"
                )
            specs.append(
                BatchInputSpec(
                    batch_input.kind, tuple(batch_input.target_name), dtype, batch_input.source_input[0]
                )
            )
        scatter = {}
        for index, batch_output in enumerate(config.batch_output):
            where = f"batch_output[{index}]"
            if len(batch_output.source_input) != 1 or batch_output.source_input[0] not in inputs:
                raise ModelConfigError(
                    f"{where} must name one source_input among the config's inputs", f"{where}.source_input"
                )
            for name in batch_output.target_name:
                if name not in outputs:
                    raise ModelConfigError(
                        f"{where}.target_name '{name}' is not a config output", f"{where}.target_name"
                    )
                scatter[name] = ScatterSpec(batch_output.source_input[0], (-1, *outputs[name].dims))
        return cls(ragged, tuple(specs), scatter)

    def shape_key(self, feeds: Mapping[str, np.ndarray]) -> tuple[tuple[str, tuple[int, ...], str], ...]:
        """What must match across the requests of a batch: each input's shape past the batch
        dimension (nothing of a ragged input's) and its type."""
        ragged = self.ragged
        return tuple(
            [
                (name, () if name in ragged else array.shape[1:], array.dtype.str)
                for name, array in sorted(feeds.items())
            ]
        )

    def feeds(self, requests: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """The batch's inputs for the model: ragged ones flattened end to end, the others
        concatenated, and the batch inputs."""
        feeds: dict[str, np.ndarray] = {}
        for name in requests[0]:
            parts = [request[name] for request in requests]
            if name in self.ragged:
                feeds[name] = np.concatenate([part.ravel() for part in parts])
            else:
                feeds[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        for spec in self.batch_inputs:
            value = _batch_input(spec, [request[spec.source].shape for request in requests])
            for target in spec.targets:
                feeds[target] = value
        return feeds

    def split(
        self,
        outputs: Mapping[str, np.ndarray],
        requests: Sequence[tuple[Mapping[str, np.ndarray], int, Sequence[str]]],
    ) -> list[dict[str, np.ndarray]]:
        """Each request's outputs, given (its inputs, its batch size, the outputs it asked for)."""
        results: list[dict[str, np.ndarray]] = [{} for _ in requests]
        for name in dict.fromkeys(name for _, _, names in requests for name in names):
            output = outputs[name]
            spec = self.scatter.get(name)
            flat = output.reshape(-1) if spec is not None else output  # scattered: cut by elements
            offset = 0
            for result, (inputs, batch_size, names) in zip(results, requests, strict=True):
                if spec is None:
                    end = offset + batch_size
                    piece = output[offset:end]
                else:
                    shape = _scattered_shape(spec, inputs[spec.source].shape)
                    end = offset + math.prod(shape)
                    if end > flat.size:
                        raise InvalidInput(
                            f"output '{name}' has {flat.size} elements, fewer than its batch output "
                            f"scattered by input '{spec.source}' needs"
                        )
                    piece = flat[offset:end].reshape(shape)
                if name in names:
                    result[name] = piece
                offset = end
        return results


def _scattered_shape(spec: ScatterSpec, source_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The output's dims with each -1 set to the source input's dimension there (Triton's naive rule)."""
    shape = []
    for index, dim in enumerate(spec.dims):
        if dim == -1:
            if index >= len(source_shape):
                raise InvalidInput(
                    f"input '{spec.source}' has no dimension {index} for a batch output to take"
                )
            dim = source_shape[index]
        shape.append(dim)
    return tuple(shape)


def _batch_input(spec: BatchInputSpec, shapes: Sequence[tuple[int, ...]]) -> np.ndarray:
    counts = [math.prod(shape) for shape in shapes]
    kind = spec.kind
    if kind == _Kind.BATCH_ELEMENT_COUNT:
        return np.array(counts, dtype=spec.dtype)
    if kind == _Kind.BATCH_ACCUMULATED_ELEMENT_COUNT:
        return np.cumsum(counts).astype(spec.dtype)
    if kind == _Kind.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO:
        return np.concatenate([[0], np.cumsum(counts)]).astype(spec.dtype)
    if kind == _Kind.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE:
        return np.zeros(max(counts), dtype=spec.dtype)
    rank = len(shapes[0]) - 1
    if any(len(shape) - 1 != rank for shape in shapes):
        raise InvalidInput(f"input '{spec.source}' has a different rank in requests batched together")
    items = [shape[1:] for shape in shapes for _ in range(shape[0])]
    value = np.array(items, dtype=spec.dtype).reshape(len(items), rank)
    if kind == _Kind.BATCH_ITEM_SHAPE:
        return value
    if kind == _Kind.BATCH_ITEM_SHAPE_FLATTEN:
        return value.reshape(-1)
    raise InvalidInput(f"batch_input kind {kind} is not one trt knows")
