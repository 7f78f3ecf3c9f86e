"""An ensemble checked against the models its steps run: each step's model exists, every tensor it
maps is an input or output of that model, every required input is fed, and each ensemble tensor has
the same data type (and, where both sides batch alike, compatible dims) wherever it is used.

The graph's own shape (every tensor produced, no cycle) is the ensemble backend's check
(``server.core.scheduling.ensemble.step_order``). The server makes Triton's own check of the tensors
when it loads an ensemble, once the steps' models serve (``server.core.models.dependencies``); this
one reads the configs on disk, before anything loads, reports every problem, and suggests names.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from trt.protos import model_config_pb2
from trt.server.core.errors import ModelConfigError

Config = model_config_pb2.ModelConfig


@dataclass(frozen=True, slots=True)
class _Tensor:
    data_type: int
    dims: tuple[int, ...]
    batched: bool
    origin: str  # where it comes from, for messages


def check_ensemble(
    config: Config, config_of: Callable[[str], Config | None], model_names: list[str]
) -> Iterator[ModelConfigError]:
    batched = config.max_batch_size > 0
    tensors = {
        t.name: _Tensor(t.data_type, tuple(t.dims), batched, "the ensemble input") for t in config.input
    }
    step_configs: dict[int, Config] = {}
    for index, step in enumerate(config.ensemble_scheduling.step):
        where = f"ensemble_scheduling.step[{index}]"
        label = f"step {index} ('{step.model_name}')"
        if step.model_name == config.name:
            yield ModelConfigError(f"{label} runs the ensemble itself", f"{where}.model_name")
            continue
        if step.model_name not in model_names:
            close = difflib.get_close_matches(step.model_name, model_names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            yield ModelConfigError(
                f"step {index} runs model '{step.model_name}', which is not in the repository{hint}",
                f"{where}.model_name",
            )
            continue
        step_config = config_of(step.model_name)
        if step_config is None:
            continue  # that model's own findings say why it has no config
        step_configs[index] = step_config
        inputs = {t.name: t for t in step_config.input}
        outputs = {t.name: t for t in step_config.output}
        for name in step.input_map:
            if name not in inputs:
                yield ModelConfigError(
                    f"{label}: input_map names input '{name}', which '{step.model_name}' does not have"
                    f"{_closest(name, inputs)}; its inputs are: {', '.join(inputs)}",
                    f"{where}.input_map[{name}]",
                )
        for name, tensor in inputs.items():
            if name not in step.input_map and not tensor.optional:
                yield ModelConfigError(
                    f"{label}: nothing feeds input '{name}' of '{step.model_name}'; map it in input_map",
                    f"{where}.input_map",
                )
        step_batched = step_config.max_batch_size > 0
        for name, tensor_name in step.output_map.items():
            if name not in outputs:
                yield ModelConfigError(
                    f"{label}: output_map names output '{name}', which '{step.model_name}' does not have"
                    f"{_closest(name, outputs)}; its outputs are: {', '.join(outputs)}",
                    f"{where}.output_map[{name}]",
                )
                continue
            output = outputs[name]
            tensors[tensor_name] = _Tensor(
                output.data_type, tuple(output.dims), step_batched, f"output '{name}' of {label}"
            )
    for index, step in enumerate(config.ensemble_scheduling.step):
        step_config = step_configs.get(index)
        if step_config is None:
            continue
        inputs = {t.name: t for t in step_config.input}
        for name, tensor_name in step.input_map.items():
            if name not in inputs or tensor_name not in tensors:
                continue
            produced, wanted = tensors[tensor_name], inputs[name]
            consumer = f"input '{name}' of step {index} ('{step.model_name}')"
            problem = _mismatch(
                produced, wanted.data_type, tuple(wanted.dims), step_config.max_batch_size > 0
            )
            if problem:
                yield ModelConfigError(
                    f"ensemble tensor '{tensor_name}' comes from {produced.origin} as {problem[0]}, "
                    f"but {consumer} takes {problem[1]}",
                    f"ensemble_scheduling.step[{index}].input_map[{name}]",
                )
    for output in config.output:
        produced_tensor = tensors.get(output.name)
        if produced_tensor is None:
            continue
        problem = _mismatch(produced_tensor, output.data_type, tuple(output.dims), batched)
        if problem:
            yield ModelConfigError(
                f"ensemble output '{output.name}' is declared {problem[1]} but comes from "
                f"{produced_tensor.origin} as {problem[0]}",
                f"output[{output.name}]",
            )


def _mismatch(
    produced: _Tensor, data_type: int, dims: tuple[int, ...], batched: bool
) -> tuple[str, str] | None:
    """(what is produced, what is wanted) when they disagree; dims compared only when both sides
    treat the batch dimension alike."""
    name = model_config_pb2.DataType.Name
    if produced.data_type != data_type:
        return name(produced.data_type), name(data_type)
    if produced.batched == batched and produced.dims and dims:
        compatible = len(produced.dims) == len(dims) and all(
            a == b or -1 in (a, b) for a, b in zip(produced.dims, dims, strict=True)
        )
        if not compatible:
            return f"dims {list(produced.dims)}", f"dims {list(dims)}"
    return None


def _closest(name: str, names: dict[str, object]) -> str:
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""
