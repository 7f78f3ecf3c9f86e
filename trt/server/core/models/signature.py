"""What a model's inputs and outputs must look like, checked on every request.

The checks here are the hot path of every inference, so they are plain loops over tuples: no
validation framework, no copies. Messages name the tensor, what was expected and what was sent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trt.protos import model_config_pb2
from trt.server.core.datatypes import (
    check_shape,
    config_to_wire,
    element_count,
    element_size,
    serialize_bytes_tensor,
    tensor_from_bytes,
)
from trt.server.core.errors import InvalidInput, request_label
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

    def check_inputs(self, inputs: list[InputTensor], request_id: str = "") -> int:
        """Raise InvalidInput unless the inputs fit the model; return the request's batch size.

        The messages are Triton's words (``request_label`` and all), and the checks come in its order
        (but for a name the model does not have, told first): clients and Triton's own tests match on
        them. Triton keeps a request's inputs in a hash map, which for the few inputs of a request
        yields the last one added first (libstdc++): it is walked the same way here, so that of
        several wrong inputs the same one is named."""
        label = request_label(request_id)
        model = self.model_name
        walk = inputs[::-1]
        specs: list[TensorSpec] = []
        seen: set[str] = set()
        for tensor in walk:
            spec = self.inputs.get(tensor.name)
            if spec is None:
                raise InvalidInput(
                    f"unexpected inference input '{tensor.name}' for model '{model}'; "
                    f"its inputs are: {', '.join(self.inputs) or '(none)'}"
                )
            if tensor.name in seen:
                raise InvalidInput(f"{label}input '{tensor.name}' already exists in request")
            seen.add(tensor.name)
            specs.append(spec)
        if not self.required_inputs <= seen:
            raise InvalidInput(self._missing_inputs_message(label, walk))
        batch_size = 0
        if self.max_batch_size > 0 and not inputs:
            batch_size = 1
        elif self.max_batch_size > 0:
            for tensor in walk:
                if not tensor.shape:
                    raise InvalidInput(
                        f"{label}input '{tensor.name}' has no shape but model requires batch dimension "
                        f"for '{model}'"
                    )
                if tensor is walk[0]:
                    batch_size = tensor.shape[0]
                elif tensor.shape[0] != batch_size:
                    raise InvalidInput(
                        f"{label}input '{tensor.name}' batch size does not match other inputs for '{model}'"
                    )
            if batch_size > self.max_batch_size:
                raise InvalidInput(
                    f"{label}inference request batch-size must be <= {self.max_batch_size} for '{model}'"
                )
            if batch_size < 1:  # Triton passes an empty batch on to the backend; no model expects one
                raise InvalidInput(f"{label}inference request batch-size must be >= 1 for '{model}'")
        for tensor, spec in zip(walk, specs, strict=True):
            if tensor.datatype != spec.datatype:
                raise InvalidInput(
                    f"{label}inference input '{tensor.name}' data-type is '{tensor.datatype}', but model "
                    f"'{model}' expects '{spec.datatype}'"
                )
            shape = tensor.shape[1:] if self.max_batch_size > 0 else tensor.shape
            dims = spec.dims
            if len(shape) != len(dims) or (shape != dims and not self._dims_match(shape, dims)):
                raise self._shape_error(label, tensor, spec)
        return batch_size

    def raw_input(self, data: bytes, request_id: str = "") -> InputTensor:
        """The input of a raw binary request (HTTP, no header: ``data`` is the bytes of the model's
        one input), named, typed and shaped from the config as Triton deduces it: a batch of one where
        the model batches, and the one variable dimension, if any, from the byte count. A BYTES input
        must be one element, which is the whole of ``data``. InvalidInput where it cannot be deduced,
        in Triton's words, and where the bytes do not fill the shape."""
        label = request_label(request_id)
        if len(self.inputs) != 1:
            raise InvalidInput(
                f"{label}Raw request must only have 1 input (found 1) to be deduced but got "
                f"{len(self.inputs)} inputs in '{self.model_name}' model configuration"
            )
        spec = next(iter(self.inputs.values()))
        variable = [axis for axis, dim in enumerate(spec.dims) if dim == -1]
        if len(variable) > 1:
            raise InvalidInput(
                f"{label}The shape of the raw input '{spec.name}' can not be deduced because there are "
                "more than one variable-sized dimension"
            )
        fixed = element_count([dim for dim in spec.dims if dim != -1])
        dims = list(spec.dims)
        if spec.datatype == "BYTES":
            if variable or fixed != 1:
                raise InvalidInput(
                    f"{label}For BYTE datatype raw input '{spec.name}', the model must have input shape [1]"
                )
            if len(data) > 0xFFFFFFFF:  # Triton's length prefix is 32 bits
                raise InvalidInput(f"{label}raw input '{spec.name}' of {len(data)} bytes is too large")
            data = serialize_bytes_tensor(np.array([data], dtype=np.object_))  # one element, length first
        elif variable:
            per_row = fixed * element_size(spec.datatype)
            dims[variable[0]] = len(data) // per_row if per_row else 0
        shape = ((1,) if self.max_batch_size > 0 else ()) + tuple(dims)
        check_shape(spec.name, shape)  # a zero beside a huge dimension is still a shape numpy refuses
        array = tensor_from_bytes(data, spec.datatype, shape, spec.name, self.model_name, request_id)
        return InputTensor(spec.name, spec.datatype, shape, array)

    def _missing_inputs_message(self, label: str, walk: list[InputTensor]) -> str:
        got = "[" + ",".join(f"'{tensor.name}'" for tensor in walk) + "]"
        names = {tensor.name for tensor in walk}
        absent = [n for n in self.inputs if n in self.required_inputs and n not in names]  # config order
        missing = "[" + ",".join(f"'{name}'" for name in absent)
        expected = (
            f"expected {len(self.inputs)} inputs"
            if len(self.required_inputs) == len(self.inputs)
            else f"expected number of inputs between {len(self.required_inputs)} and {len(self.inputs)}"
        )
        return (
            f"{label}{expected} but got {len(walk)} inputs for model '{self.model_name}'. Got input(s) "
            f"{got}, but missing required input(s) {missing}]. Please provide all required input(s)."
        )

    def check_outputs(self, outputs: list[RequestedOutput] | None, request_id: str = "") -> tuple[str, ...]:
        if outputs is None:
            return tuple(self.outputs)
        names: list[str] = []
        for output in outputs:
            if output.name in names:  # current Triton's words (2.51 answered it once)
                raise InvalidInput(
                    f"{request_label(request_id)}output '{output.name}' already exists in request"
                )
            spec = self.outputs.get(output.name)
            if spec is None:
                raise InvalidInput(
                    f"unexpected inference output '{output.name}' for model '{self.model_name}'; "
                    f"its outputs are: {', '.join(self.outputs)}"
                )
            if output.class_count < 0:
                raise InvalidInput(f"output '{output.name}': classification count must be positive")
            names.append(output.name)
        return tuple(names)

    @staticmethod
    def _dims_match(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
        """Whether ``shape`` fits ``dims`` with its -1 wildcards (the callers test equality first:
        the usual case, and a call saved on every input)."""
        return all(got == want or want == -1 for got, want in zip(shape, dims, strict=True))

    def _shape_error(self, label: str, tensor: InputTensor, spec: TensorSpec) -> InvalidInput:
        expected, got = _dims_text(spec.shape), _dims_text(tensor.shape)
        message = f"{label}unexpected shape for input '{tensor.name}' for model '{self.model_name}'. "
        message += f"Expected {expected}, got {got}. "  # the space even without the note, as Triton's
        if self.max_batch_size > 0:
            message += _IMPLICIT_BATCH_NOTE
        return InvalidInput(message)


# What Triton (core's infer_request.cc, 2.51 and today) adds for a batching model, word for word:
# clients and test suites compare whole error texts.
_IMPLICIT_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
    "prepended to each input shape. If you want to specify the full shape including the batch dim in "
    "your input dims config, try setting max_batch_size to zero. See the model configuration docs for "
    "more info on max_batch_size."
)


def _dims_text(shape: tuple[int, ...]) -> str:
    """A shape as Triton writes it in messages: ``[-1,16]``."""
    return "[" + ",".join(str(d) for d in shape) + "]"
