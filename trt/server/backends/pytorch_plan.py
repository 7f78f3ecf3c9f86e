"""How a TorchScript ``forward()`` meets a Triton config, without torch: the argument and output
rules (``plan_call``), the backend's config parameters, and what an incomplete config lacks. Kept apart
from the torch half (``torchscript``) so that reading or listing a repository does not import torch
(about 3 s)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trt.protos import model_config_pb2
from trt.server.core.errors import ModelConfigError

_TENSOR_TYPES = ("Tensor", "Optional[Tensor]")
_DICT_TYPE = "Dict[str, Tensor]"
UNSUPPORTED_TYPES = {
    model_config_pb2.TYPE_STRING: "TYPE_STRING (BYTES) tensors cannot reach a TorchScript model: "
    "this backend feeds numeric tensors only",
}


@dataclass(frozen=True, slots=True)
class ForwardArgument:
    name: str
    type: str  # TorchScript's spelling: "Tensor", "Optional[Tensor]", "Dict[str, Tensor]", "int"...
    has_default: bool


@dataclass(frozen=True, slots=True)
class ForwardSignature:
    """What a TorchScript ``forward()`` declares; ``arguments`` is None where the schema is unreadable."""

    arguments: tuple[ForwardArgument, ...] | None
    returns: int | None  # values returned: a tuple's length, 1 for a tensor; None when unknown (a list)
    text: str = "forward(...)"

    @classmethod
    def of(cls, module: Any) -> ForwardSignature:
        try:
            schema = module.forward.schema
        except (AttributeError, RuntimeError):
            return cls(None, None)
        arguments = tuple(
            ForwardArgument(a.name, str(a.type), a.has_default_value()) for a in schema.arguments[1:]
        )
        result = schema.returns[0].type if len(schema.returns) == 1 else None
        returns = None
        if result is not None and result.kind() == "TupleType":
            returns = len(result.elements())
        elif result is not None and result.kind() == "TensorType":
            returns = 1
        text = f"forward({', '.join(a.name for a in arguments)}) -> {result}"
        return cls(arguments, returns, text)


@dataclass(frozen=True, slots=True)
class CallPlan:
    """How one execution's tensors become a ``forward()`` call and come back as outputs."""

    convention: str  # "forward_argument", "named_index", "config_order" or "dict"
    inputs: tuple[str, ...]  # config input names, in forward()'s argument order
    keyword: bool  # pass inputs by argument name (some may be left out) rather than by position
    outputs: dict[str, int]  # config output name -> position among the values forward() returns


def _named_index(name: str) -> int | None:
    """``i`` for ``<name>__<i>``, with Triton's reading: whatever follows the first ``__``, all digits."""
    _, separator, index = name.partition("__")
    return int(index) if separator and index.isascii() and index.isdigit() and len(index) < 10 else None


def _output_positions(names: Sequence[str], returns: int | None, text: str) -> dict[str, int]:
    positions = [i for i in map(_named_index, names) if i is not None]
    if len(positions) != len(names):
        positions = list(range(len(names)))
    plan = dict(zip(names, positions, strict=True))
    for name, position in plan.items():
        if returns is not None and position >= returns:
            raise ModelConfigError(
                f"output '{name}' is value {position} of what forward() returns, but {text} returns "
                f"{returns} value{'s' if returns != 1 else ''}"
            )
    return plan


def plan_call(
    inputs: Sequence[str], optional: Sequence[str], outputs: Sequence[str], signature: ForwardSignature
) -> CallPlan:
    """Map config tensors onto ``forward()`` by Triton's naming rules; ModelConfigError if they cannot be."""
    output_plan = _output_positions(outputs, signature.returns, signature.text)
    arguments = signature.arguments
    if arguments is not None and len(arguments) == 1 and arguments[0].type == _DICT_TYPE:
        return CallPlan("dict", tuple(inputs), False, output_plan)
    by_name = {a.name: a for a in arguments or ()}
    if arguments and all(name in by_name for name in inputs):
        order = [a.name for a in arguments]
        fed = sorted(inputs, key=order.index)
        _check_arguments(arguments, set(fed), signature.text)
        for name in optional:
            if not by_name[name].has_default:
                raise ModelConfigError(
                    f"input '{name}' is optional in the config, but {signature.text} has no default for it"
                )
        keyword = bool(optional) or fed != order[: len(fed)]
        return CallPlan("forward_argument", tuple(fed), keyword, output_plan)
    if optional:
        raise ModelConfigError(
            f"optional input(s) {', '.join(optional)} need names that are forward() arguments (so that "
            f"a missing one can be left out); {signature.text}"
        )
    indexes = [i for i in map(_named_index, inputs) if i is not None]
    if len(indexes) == len(inputs):
        if sorted(indexes) != list(range(len(inputs))):
            raise ModelConfigError(
                f"inputs {', '.join(inputs)} must number forward()'s arguments 0..{len(inputs) - 1} once each"
            )
        ordered = tuple(name for _, name in sorted(zip(indexes, inputs, strict=True)))
        convention = "named_index"
    else:
        ordered, convention = tuple(inputs), "config_order"
    if arguments is not None:
        if len(ordered) > len(arguments):
            raise ModelConfigError(
                f"the config lists {len(ordered)} inputs but {signature.text} takes {len(arguments)}"
            )
        _check_arguments(arguments, {a.name for a in arguments[: len(ordered)]}, signature.text)
    return CallPlan(convention, ordered, False, output_plan)


def _check_arguments(arguments: Sequence[ForwardArgument], fed: set[str], text: str) -> None:
    for argument in arguments:
        if argument.name in fed and argument.type not in _TENSOR_TYPES:
            raise ModelConfigError(
                f"{text}: argument '{argument.name}' is {argument.type}; a config input can only be a Tensor"
            )
        if argument.name not in fed and not argument.has_default:
            raise ModelConfigError(
                f"{text}: argument '{argument.name}' gets no config input and has no default; "
                f"list it in the config (as '{argument.name}' or by position)"
            )


@dataclass(frozen=True, slots=True)
class TorchOptions:
    """The config parameters Triton's pytorch backend reads, checked once at load."""

    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    inference_mode: bool = True
    optimized_execution: bool = True

    @classmethod
    def of(cls, config: model_config_pb2.ModelConfig) -> TorchOptions:
        values = {key: value.string_value.strip() for key, value in config.parameters.items()}
        return cls(
            _count(values, "INTRA_OP_THREAD_COUNT"),
            _count(values, "INTER_OP_THREAD_COUNT"),
            _flag(values, "INFERENCE_MODE", True),
            not _flag(values, "DISABLE_OPTIMIZED_EXECUTION", False),
        )


def _count(values: dict[str, str], key: str) -> int | None:
    if key not in values:
        return None
    text = values[key]
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < 1:
        raise ModelConfigError(f"parameter {key} must be a positive integer, got '{text}'")
    return int(text)


def _flag(values: dict[str, str], key: str, default: bool) -> bool:
    text = values.get(key, "").lower()
    if not text:
        return default
    if text not in ("true", "false", "1", "0", "on", "off"):
        raise ModelConfigError(f"parameter {key} must be true or false, got '{values[key]}'")
    return text in ("true", "1", "on")


def incomplete(config: model_config_pb2.ModelConfig) -> list[str]:
    """What the config lacks that a TorchScript file cannot supply (empty: it is complete)."""
    problems = [f"no {kind}s listed" for kind in ("input", "output") if not getattr(config, kind)]
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            missing = [
                field
                for field, absent in (
                    ("data_type", tensor.data_type == model_config_pb2.TYPE_INVALID),
                    ("dims", not tensor.dims and not tensor.HasField("reshape")),
                )
                if absent
            ]
            if missing:
                problems.append(f"{kind} '{tensor.name}' has no {' or '.join(missing)}")
    return problems


def example_names(signature: ForwardSignature) -> str:
    """A hint naming the inputs and outputs ``forward()`` implies, for an incomplete config's error."""
    if signature.arguments is None:
        return ""
    names = [a.name for a in signature.arguments if not a.has_default]
    hint = f"; the model is {signature.text}: inputs {', '.join(f'INPUT__{i}' for i in range(len(names)))}"
    if names:
        hint += f" (or {', '.join(names)})"
    if signature.returns is not None:
        hint += f", outputs {', '.join(f'OUTPUT__{i}' for i in range(signature.returns))}"
    return hint


def config_plan(config: model_config_pb2.ModelConfig, signature: ForwardSignature) -> CallPlan:
    """``plan_call`` for a model's config, its sequence controls and state included."""
    # A sequence model's control and state tensors are fed and read by the sequence batcher.
    sequence = config.sequence_batching
    inputs = [t.name for t in config.input]
    inputs += [c.name for c in sequence.control_input] + [s.input_name for s in sequence.state]
    outputs = [t.name for t in config.output]
    outputs += [s.output_name for s in sequence.state if s.output_name not in outputs]
    return plan_call(inputs, [t.name for t in config.input if t.optional], outputs, signature)
