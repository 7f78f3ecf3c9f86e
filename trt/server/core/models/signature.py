"""What a model's inputs and outputs must look like, checked on every request.

The checks here are the hot path of every inference, so they are plain loops over tuples: no
validation framework, no copies. Messages name the tensor, what was expected and what was sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from trt.protos import model_config_pb2
from trt.server.core.datatypes import config_to_wire
from trt.server.core.errors import InvalidInput
from trt.server.core.types import InputTensor, RequestedOutput


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    datatype: str  # wire name, e.g. "FP32"
    dims: tuple[int, ...]  # without the batch dimension
    shape: tuple[int, ...]  # as clients see it: [-1] + dims when the model batches
    reshape: tuple[int, ...] | None  # the shape the model itself takes/gives, without batch
    optional: bool = False
    labels: tuple[str, ...] = ()

    @classmethod
    def from_config(
        cls,
        tensor: model_config_pb2.ModelInput | model_config_pb2.ModelOutput,
        batching: bool,
        labels: tuple[str, ...] = (),
    ) -> TensorSpec:
        dims = tuple(int(d) for d in tensor.dims)
        return cls(
            name=tensor.name,
            datatype=config_to_wire(model_config_pb2.DataType.Name(tensor.data_type)),
            dims=dims,
            shape=((-1, *dims) if batching else dims),
            reshape=tuple(int(d) for d in tensor.reshape.shape) if tensor.HasField("reshape") else None,
            optional=getattr(tensor, "optional", False),
            labels=labels,
        )


@dataclass(frozen=True, slots=True)
class ModelSignature:
    model_name: str
    max_batch_size: int
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    required_inputs: frozenset[str]

    @classmethod
    def build(
        cls,
        model_name: str,
        config: model_config_pb2.ModelConfig,
        labels: dict[str, tuple[str, ...]] | None = None,
    ) -> ModelSignature:
        batching = config.max_batch_size > 0
        inputs = {t.name: TensorSpec.from_config(t, batching) for t in config.input}
        outputs = {
            t.name: TensorSpec.from_config(t, batching, (labels or {}).get(t.name, ())) for t in config.output
        }
        required = frozenset(name for name, spec in inputs.items() if not spec.optional)
        return cls(model_name, config.max_batch_size, inputs, outputs, required)

    def check_inputs(self, inputs: list[InputTensor]) -> int:
        """Raise InvalidInput unless the inputs fit the model; return the request's batch size."""
        batch_size = 1 if self.max_batch_size > 0 else 0
        seen: set[str] = set()
        first_batch: int | None = None
        for tensor in inputs:
            spec = self.inputs.get(tensor.name)
            if spec is None:
                raise InvalidInput(
                    f"unexpected inference input '{tensor.name}' for model '{self.model_name}'; "
                    f"its inputs are: {', '.join(self.inputs) or '(none)'}"
                )
            if tensor.name in seen:
                raise InvalidInput(f"input '{tensor.name}' appears more than once in the request")
            seen.add(tensor.name)
            if tensor.datatype != spec.datatype:
                raise InvalidInput(
                    f"input '{tensor.name}': datatype is '{tensor.datatype}' but model "
                    f"'{self.model_name}' expects '{spec.datatype}'"
                )
            shape = tensor.shape
            if self.max_batch_size > 0:
                dims = spec.dims
                rows = shape[1:]
                if len(shape) != len(dims) + 1 or (rows != dims and not self._dims_match(rows, dims)):
                    raise self._shape_error(tensor, spec)
                if shape[0] < 1 or shape[0] > self.max_batch_size:
                    raise InvalidInput(
                        f"input '{tensor.name}': batch size {shape[0]} is outside 1..{self.max_batch_size} "
                        f"(max_batch_size of model '{self.model_name}')"
                    )
                if first_batch is None:
                    first_batch = shape[0]
                elif shape[0] != first_batch:
                    raise InvalidInput(
                        f"input '{tensor.name}': batch size {shape[0]} differs from "
                        f"the other inputs' {first_batch}"
                    )
            elif len(shape) != len(spec.dims) or (
                shape != spec.dims and not self._dims_match(shape, spec.dims)
            ):
                raise self._shape_error(tensor, spec)
        if not self.required_inputs <= seen:
            missing = sorted(self.required_inputs - seen)
            raise InvalidInput(
                f"expected {len(self.required_inputs)} inputs but got {len(seen)} for model "
                f"'{self.model_name}'; missing required input(s): {', '.join(missing)}"
            )
        return first_batch if first_batch is not None else batch_size

    def check_outputs(self, outputs: list[RequestedOutput] | None) -> tuple[str, ...]:
        if outputs is None:
            return tuple(self.outputs)
        names: list[str] = []
        for output in outputs:
            spec = self.outputs.get(output.name)
            if spec is None:
                raise InvalidInput(
                    f"unexpected inference output '{output.name}' for model '{self.model_name}'; "
                    f"its outputs are: {', '.join(self.outputs)}"
                )
            if output.class_count < 0:
                raise InvalidInput(f"output '{output.name}': classification count must be positive")
            names.append(output.name)
        return tuple(dict.fromkeys(names))  # an output requested twice is answered once, as Triton

    @staticmethod
    def _dims_match(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
        """Whether ``shape`` fits ``dims`` with its -1 wildcards (the callers test equality first:
        the usual case, and a call saved on every input)."""
        return all(got == want or want == -1 for got, want in zip(shape, dims, strict=True))

    def _shape_error(self, tensor: InputTensor, spec: TensorSpec) -> InvalidInput:
        return InvalidInput(
            f"input '{tensor.name}': expected shape {list(spec.shape)}, got {list(tensor.shape)}"
            + (" (the first dimension is the batch)" if self.max_batch_size > 0 else "")
        )
