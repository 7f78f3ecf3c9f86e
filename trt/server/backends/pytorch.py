"""PyTorch backend: TorchScript ``model.pt`` files, as Triton's ``pytorch_libtorch`` platform runs them.

Config tensors meet ``forward()`` by Triton's rules (``plan_call``). Inputs: names that are all
``forward()`` argument names go by argument; else names that all read ``<name>__<i>`` (``INPUT__0``)
are argument ``i``; else the config's order is the argument order. A ``forward()`` taking one
``Dict[str, Tensor]`` gets every input in that dict. Outputs: ``<name>__<i>`` is the i-th value
``forward()`` returns (a tensor counts as one value), else the config's order.

TorchScript records argument names and how many values ``forward()`` returns, but no dtypes or
shapes: the config must give those (Triton does not auto-complete PyTorch models either). Config
parameters, as in Triton: INTRA_OP_THREAD_COUNT, INTER_OP_THREAD_COUNT, INFERENCE_MODE (default
true here) and DISABLE_OPTIMIZED_EXECUTION.

torch is imported with this module, so a missing torch fails only the models that need it, with the
registry's message naming the ``trt-serve[torch]`` extra. torch releases the GIL while it computes, so
instances run in parallel in the core's worker threads.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trt.protos import model_config_pb2
from trt.server.core.backends.base import InstanceSpec, ModelFiles
from trt.server.core.datatypes import BF16_DTYPE
from trt.server.core.errors import ModelConfigError, ModelLoadError, ServerError

logger = logging.getLogger("trt.backends.pytorch")

_TENSOR_TYPES = ("Tensor", "Optional[Tensor]")
_DICT_TYPE = "Dict[str, Tensor]"
_UNSUPPORTED_TYPES = {
    model_config_pb2.TYPE_STRING: "TYPE_STRING (BYTES) tensors cannot reach a TorchScript model: "
    "this backend feeds numeric tensors only",
}
_CPU = torch.device("cpu")
_interop_lock = threading.Lock()


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


def _load(path: Path, device: torch.device) -> Any:
    try:
        module = torch.jit.load(str(path), map_location=device)
    except Exception as exc:  # torch raises several types for files that are not TorchScript
        raise ModelLoadError(
            f"torch.jit.load could not read {path} ({exc}); save the model with "
            "torch.jit.script(model).save(path) or torch.jit.trace(model, example).save(path)"
        ) from None
    return module.eval()


def forward_signature(path: Path) -> ForwardSignature:
    """What forward() of a TorchScript file takes and returns (``trt repo add`` names the inputs to give)."""
    return ForwardSignature.of(_load(path, _CPU))


def _incomplete(config: model_config_pb2.ModelConfig) -> list[str]:
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


def _example_names(signature: ForwardSignature) -> str:
    if signature.arguments is None:
        return ""
    names = [a.name for a in signature.arguments if not a.has_default]
    hint = f"; the model is {signature.text}: inputs {', '.join(f'INPUT__{i}' for i in range(len(names)))}"
    if names:
        hint += f" (or {', '.join(names)})"
    if signature.returns is not None:
        hint += f", outputs {', '.join(f'OUTPUT__{i}' for i in range(signature.returns))}"
    return hint


class PyTorchBackend:
    name = "pytorch"
    platform = "pytorch_libtorch"
    default_filename = "model.pt"

    def auto_complete(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, default_max_batch_size: int
    ) -> None:
        """Nothing to fill in a complete config; an incomplete one is refused, saying what to add."""
        problems = _incomplete(config)
        if not problems:
            return
        try:
            hint = _example_names(
                ForwardSignature.of(_load(files.require_artifact(config, self.default_filename), _CPU))
            )
        except ModelLoadError:
            hint = ""  # validate() reports an unreadable file; the config is the problem named here
        raise ModelConfigError(
            "a TorchScript file records no tensor dtypes or shapes, so config.pbtxt must list every input "
            f"and output with name, data_type and dims ({'; '.join(problems)}){hint}"
        )

    def validate(self, config: model_config_pb2.ModelConfig, files: ModelFiles) -> None:
        """The config's types fit TorchScript, the file loads, and its forward() fits the config.
        Nothing runs: that would need real inputs."""
        for kind, tensors in (("input", config.input), ("output", config.output)):
            for tensor in tensors:
                if tensor.data_type in _UNSUPPORTED_TYPES:
                    raise ModelConfigError(f"{kind} '{tensor.name}': {_UNSUPPORTED_TYPES[tensor.data_type]}")
        TorchOptions.of(config)
        module = _load(files.require_artifact(config, self.default_filename), _CPU)
        _plan(config, ForwardSignature.of(module))

    def create_instance(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, spec: InstanceSpec
    ) -> TorchScriptInstance:
        return TorchScriptInstance(files.require_artifact(config, self.default_filename), config, spec)


def _plan(config: model_config_pb2.ModelConfig, signature: ForwardSignature) -> CallPlan:
    # A sequence model's control and state tensors are fed and read by the sequence batcher.
    sequence = config.sequence_batching
    inputs = [t.name for t in config.input]
    inputs += [c.name for c in sequence.control_input] + [s.input_name for s in sequence.state]
    outputs = [t.name for t in config.output]
    outputs += [s.output_name for s in sequence.state if s.output_name not in outputs]
    return plan_call(inputs, [t.name for t in config.input if t.optional], outputs, signature)


def _device(spec: InstanceSpec) -> torch.device:
    if spec.kind != "KIND_GPU":
        return _CPU
    if not torch.cuda.is_available():
        raise ModelLoadError(
            "instance_group asks for KIND_GPU but this torch sees no CUDA device "
            f"(torch {torch.__version__}); install a CUDA build of torch or use KIND_CPU"
        )
    if spec.device_id >= torch.cuda.device_count():
        raise ModelLoadError(
            f"instance_group asks for GPU {spec.device_id} but torch sees {torch.cuda.device_count()}"
        )
    return torch.device(f"cuda:{spec.device_id}")


def _execute_failure(exc: RuntimeError) -> ServerError:
    """Clients get torch's own last line ("RuntimeError: The size of tensor a (3) must match...");
    the TorchScript traceback above it, with the server's file paths, goes to the debug log."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    logger.debug("forward() failed:\n%s", exc)
    return ServerError(f"PyTorch execute failure: {lines[-1] if lines else type(exc).__name__}")


def _set_interop_threads(count: int) -> None:
    """torch has one inter-op pool per process, sized once before it first runs: the first model that
    asks sets it; a later, different request is logged and ignored."""
    with _interop_lock:
        if torch.get_num_interop_threads() == count:
            return
        try:
            torch.set_num_interop_threads(count)
        except RuntimeError:
            logger.warning(
                "INTER_OP_THREAD_COUNT %d ignored: torch's inter-op pool (one per process) already has %d",
                count,
                torch.get_num_interop_threads(),
            )


class TorchScriptInstance:
    """One TorchScript module on one device. The core runs one execution at a time per instance."""

    def __init__(self, path: Path, config: model_config_pb2.ModelConfig, spec: InstanceSpec) -> None:
        options = TorchOptions.of(config)
        self._device = _device(spec)
        self._on_gpu = self._device.type == "cuda"
        self._module = _load(path, self._device)
        self._plan = _plan(config, ForwardSignature.of(self._module))
        self._call = self._caller(self._plan)
        # torch's intra-op thread count belongs to the calling thread (OpenMP): set_num_threads sets
        # it there, plus the default for threads that have not yet run torch. An instance runs in
        # whichever thread the core picks (its pool thread, or the event loop for quick models, shared
        # by every model), so it sets its own count in that thread before each execution, when the
        # thread's differs. Setting it once per process would miss threads that already ran torch.
        self._threads = options.intra_op_threads or spec.cpu_threads
        if options.inter_op_threads:
            _set_interop_threads(options.inter_op_threads)
        # Reused, not rebuilt per call (saves ~3 us): safe because executions of one instance never
        # overlap.
        self._grad_mode: contextlib.AbstractContextManager[Any] = (
            torch.inference_mode() if options.inference_mode else torch.no_grad()
        )
        self._optimization: Callable[[], contextlib.AbstractContextManager[Any]] = (
            contextlib.nullcontext
            if options.optimized_execution
            # A thread-local flag, so set per call; torch.jit does not re-export it in its stubs.
            else lambda: torch.jit.optimized_execution(False)  # type: ignore[attr-defined]
        )
        self._stream = torch.cuda.Stream(self._device) if self._on_gpu else None
        logger.info(
            "instance %s on %s (%s names, %d threads)",
            spec.name, self._device, self._plan.convention, self._threads,
        )  # fmt: skip

    def _caller(self, plan: CallPlan) -> Callable[[dict[str, torch.Tensor]], Any]:
        module = self._module
        if plan.convention == "dict":
            return lambda tensors: module(tensors)
        if plan.keyword:
            return lambda tensors: module(**tensors)
        return lambda tensors: module(*tensors.values())  # built in plan.inputs order

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        if not (array.flags.writeable and array.flags.c_contiguous):
            # torch.from_numpy shares memory and may write to it; a read-only view over the request
            # buffer is copied (np.array then from_numpy is ~3x cheaper than torch.tensor for small arrays).
            array = np.array(array, order="C")
        if array.dtype == BF16_DTYPE:  # torch knows no numpy bfloat16: the same bits, reinterpreted
            tensor = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(array)
        return tensor.to(self._device) if self._on_gpu else tensor

    def execute(self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str]) -> dict[str, np.ndarray]:
        if torch.get_num_threads() != self._threads:
            torch.set_num_threads(self._threads)
        stream = torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext()
        with stream, self._grad_mode, self._optimization():
            tensors = {name: self._tensor(inputs[name]) for name in self._plan.inputs if name in inputs}
            try:
                result = self._call(tensors)
            except RuntimeError as exc:  # torch.jit.Error included: the model itself failed
                raise _execute_failure(exc) from None
            returned = result if isinstance(result, tuple | list) else (result,)
            outputs: dict[str, np.ndarray] = {}
            for name in output_names:
                position = self._plan.outputs[name]
                if position >= len(returned):
                    raise ServerError(
                        f"output '{name}' is value {position} of what forward() returns, "
                        f"but it returned {len(returned)}"
                    )
                value = returned[position]
                if not isinstance(value, torch.Tensor):
                    raise ServerError(
                        f"output '{name}': forward() returned {type(value).__name__} where a tensor belongs"
                    )
                value = value.detach().cpu()  # .cpu() waits for a GPU stream's work
                if value.dtype == torch.bfloat16:
                    outputs[name] = value.view(torch.int16).numpy().view(BF16_DTYPE)
                else:
                    outputs[name] = value.numpy()
        return outputs

    def close(self) -> None:
        del self._module, self._call
