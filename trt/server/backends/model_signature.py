"""A model's tensors as its own file declares them, and the config work every tensor backend does with
them: auto-complete (Triton's rules) and the check of a config against the model.

The ONNX Runtime, OpenVINO and TensorFlow backends read their library's view of a model into a
``ModelSignature``; everything here is plain Python, tested without any of those libraries.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trt.protos import model_config_pb2
from trt.server.core.errors import ModelConfigError

Config = model_config_pb2.ModelConfig


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    data_type: str  # the config's spelling, "TYPE_FP32"; "" where the model's type has no config type
    dims: tuple[int, ...] | None  # -1 where a dimension is not fixed; None where the rank is unknown
    model_type: str = ""  # the library's own name for the type, for messages


@dataclass(frozen=True, slots=True)
class ModelSignature:
    inputs: Mapping[str, TensorInfo]
    outputs: Mapping[str, TensorInfo]
    # Other names of the same tensors (an OpenVINO port may carry several): alias -> name above.
    aliases: Mapping[str, str] = field(default_factory=dict)

    def find(self, found: Mapping[str, TensorInfo], name: str) -> TensorInfo | None:
        """``name``'s tensor in ``found`` (the inputs or the outputs), by its name or an alias."""
        return found.get(name) or found.get(self.aliases.get(name, ""))

    def first_dims_variable(self) -> bool:
        """Every tensor has a first dimension and none fixes it: the model can take a batch there."""
        tensors = [*self.inputs.values(), *self.outputs.values()]
        return bool(tensors) and all(
            t.dims is not None and len(t.dims) >= 1 and t.dims[0] == -1 for t in tensors
        )


def closest(name: str, names: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


def auto_complete(
    config: Config, signature: ModelSignature, can_batch: bool, default_max_batch_size: int
) -> None:
    """Fill what the config leaves out: ``max_batch_size`` (only when the config says nothing about
    batching or dims, as for ONNX Runtime), a dynamic batcher with it, then inputs and outputs."""
    declared_dims = [len(t.dims) for t in (*config.input, *config.output)]
    if config.max_batch_size == 0 and can_batch and not declared_dims and default_max_batch_size > 0:
        config.max_batch_size = default_max_batch_size
        if config.max_batch_size > 1 and config.WhichOneof("scheduling_choice") is None:
            config.dynamic_batching.SetInParent()
    strip_batch = config.max_batch_size > 0
    complete_tensors(config.input, signature.inputs, strip_batch, signature)
    complete_tensors(config.output, signature.outputs, strip_batch, signature)


def complete_tensors(
    declared: Any, found: Mapping[str, TensorInfo], strip_batch: bool, signature: ModelSignature | None = None
) -> None:
    """Add every tensor when the config lists none; otherwise fill only what listed ones lack. A
    tensor of no dimension (besides the batch) is given dims [1] and an empty reshape, as Triton's
    TensorFlow backend does (dims may not be empty)."""
    if not declared:
        for name in found:
            declared.add().name = name
    for tensor in declared:
        info = signature.find(found, tensor.name) if signature is not None else found.get(tensor.name)
        if info is None:
            continue  # the check reports it with the model's real names
        if tensor.data_type == model_config_pb2.TYPE_INVALID and info.data_type:
            tensor.data_type = model_config_pb2.DataType.Value(info.data_type)
        if not tensor.dims and info.dims is not None:
            dims = info.dims[1:] if strip_batch and info.dims else info.dims
            if dims:
                tensor.dims.extend(dims)
            elif not tensor.HasField("reshape"):
                tensor.dims.append(1)
                tensor.reshape.SetInParent()


def check_tensors(
    config: Config, signature: ModelSignature, backend: str, *, all_inputs: bool = True
) -> None:
    """Raise ModelConfigError where the config's tensors disagree with the model's: names, types, dims
    and the batch dimension. ``all_inputs``: every model input must be in the config (a tensor backend
    cannot run a model with an input nobody feeds)."""
    batch = config.max_batch_size > 0
    scattered = scattered_outputs(config)
    for kind, declared, found in (
        ("input", config.input, signature.inputs),
        ("output", config.output, signature.outputs),
    ):
        for tensor in declared:
            where = f"{kind}[{tensor.name}]"
            info = signature.find(found, tensor.name)
            if info is None:
                raise ModelConfigError(
                    f"{kind} '{tensor.name}' in config is not in the model{closest(tensor.name, found)}; "
                    f"the model's {kind}s are: {', '.join(found) or 'none'}",
                    f"{where}.name",
                )
            declared_type = model_config_pb2.DataType.Name(tensor.data_type)
            if not info.data_type:
                raise ModelConfigError(
                    f"{kind} '{tensor.name}': the model's type {info.model_type} has no counterpart in a "
                    f"config; {backend} cannot serve it",
                    f"{where}.data_type",
                )
            if declared_type != info.data_type:
                raise ModelConfigError(
                    f"{kind} '{tensor.name}': config says {declared_type} but the model has {info.data_type}",
                    f"{where}.data_type",
                )
            if info.dims is None:
                continue  # the model does not say: the library checks each request
            if batch and ragged_or_scattered(kind, tensor, list(info.dims), scattered):
                continue
            if batch and (not info.dims or info.dims[0] != -1):
                raise ModelConfigError(
                    f"{kind} '{tensor.name}': max_batch_size is {config.max_batch_size} but the model's "
                    f"first dimension is {'missing' if not info.dims else f'fixed at {info.dims[0]}'}; set "
                    "max_batch_size: 0 or export the model with a variable batch dimension",
                    "max_batch_size",
                )
            model_dims = list(info.dims[1:] if batch else info.dims)
            config_dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
            if not dims_compatible(config_dims, model_dims):
                raise ModelConfigError(
                    f"{kind} '{tensor.name}': config dims {list(tensor.dims)} do not match the model's "
                    f"{model_dims}"
                    + (" (the batch dimension is implied by max_batch_size)" if batch else ""),
                    f"{where}.dims",
                )
    if all_inputs:
        fed = {t.name for t in config.input} | _server_fed(config)
        fed |= {signature.aliases[name] for name in fed if name in signature.aliases}
        missing = [name for name in signature.inputs if name not in fed]
        if missing:
            raise ModelConfigError(
                f"the model has input(s) {', '.join(missing)} that the config does not list; "
                "list every input (or leave inputs out and let auto-complete fill them)",
                f"input[{missing[0]}]",
            )
    check_sequence_tensors(config, signature)


def ragged_or_scattered(
    kind: str,
    tensor: model_config_pb2.ModelInput | model_config_pb2.ModelOutput,
    model_dims: list[int],
    scattered: set[str],
) -> bool:
    """Whether a batching model's tensor escapes the dims check, being ragged (an input the model takes
    flat: raises if it does not) or scattered by a batch_output (an output, ``scattered``)."""
    if kind == "output":
        return tensor.name in scattered
    if not getattr(tensor, "allow_ragged_batch", False):
        return False
    if len(model_dims) != 1:  # a ragged input arrives as every request's elements end to end
        raise ModelConfigError(
            f"input '{tensor.name}' has allow_ragged_batch, so the model must take it as one "
            f"dimension ([-1]: the elements end to end); the model's is {model_dims}",
            f"input[{tensor.name}].dims",
        )
    return True


def scattered_outputs(config: Config) -> set[str]:
    """Outputs a batch_output cuts to each request's shape."""
    return {name for batch_output in config.batch_output for name in batch_output.target_name}


def _server_fed(config: Config) -> set[str]:
    """Inputs the server supplies itself: batch inputs, sequence controls and implicit state."""
    fed = {name for batch_input in config.batch_input for name in batch_input.target_name}
    if not config.HasField("sequence_batching"):
        return fed
    settings = config.sequence_batching
    return fed | {c.name for c in settings.control_input} | {s.input_name for s in settings.state}


def dims_compatible(config_dims: list[int], model_dims: list[int]) -> bool:
    if len(config_dims) != len(model_dims):
        return False
    return all(c == m or m == -1 or c == -1 for c, m in zip(config_dims, model_dims, strict=True))


def check_sequence_tensors(config: Config, signature: ModelSignature) -> None:
    """The server feeds sequence controls and implicit state as model inputs (and reads state back
    from outputs), so the model must have tensors of those names."""
    if not config.HasField("sequence_batching"):
        return
    settings = config.sequence_batching
    fed = [(c.name, f"sequence_batching.control_input[{c.name}]") for c in settings.control_input]
    fed += [(s.input_name, f"sequence_batching.state[{s.input_name}]") for s in settings.state]
    for name, where in fed:
        if signature.find(signature.inputs, name) is None:
            raise ModelConfigError(
                f"sequence_batching feeds '{name}' to the model, but the model has no input of that name"
                f"{closest(name, signature.inputs)}; its inputs are: {', '.join(signature.inputs)}",
                where,
            )
    for state in settings.state:
        if signature.find(signature.outputs, state.output_name) is None:
            raise ModelConfigError(
                f"sequence_batching state reads '{state.output_name}' back from the model, but the model has "
                f"no output of that name{closest(state.output_name, signature.outputs)}; its outputs are: "
                f"{', '.join(signature.outputs)}",
                f"sequence_batching.state[{state.input_name}]",
            )


def yes(value: str, key: str) -> bool:
    """A yes/no config parameter. Triton's backends take YES (any case) as yes and anything else as no;
    here "true", "on" and "1" also mean yes, and a value that is neither is refused rather than read as no."""
    lowered = value.strip().lower()
    if lowered in ("yes", "true", "on", "1"):
        return True
    if lowered in ("", "no", "false", "off", "0"):
        return False
    raise ModelConfigError(f"parameter {key} must be YES or NO, got '{value}'", f"parameters[{key}]")


def parameter(config: Config, key: str) -> str:
    """A config parameter's string value ("" when absent)."""
    value = config.parameters.get(key)
    return value.string_value if value is not None else ""
