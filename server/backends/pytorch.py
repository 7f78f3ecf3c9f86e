"""PyTorch backend: TorchScript ``model.pt`` files, as Triton's ``pytorch_libtorch`` platform runs them.

Tensor names follow Triton's rules. Inputs named ``<anything>__<i>`` (``INPUT__0``, ``INPUT__1``...)
are the i-th argument of ``forward``; otherwise, names that match ``forward``'s argument names go by
argument position; otherwise the config's order is the argument order. Outputs named ``<x>__<i>``
are the i-th element of what ``forward`` returns; otherwise the config's order.

torch is imported with this module, so a missing torch fails only the models that need it, with the
registry's message naming the ``trt[torch]`` extra.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from protos import model_config_pb2
from server.backends.base import InstanceSpec, ModelFiles
from server.core.errors import ModelConfigError, ModelLoadError

logger = logging.getLogger("trt.backends.pytorch")

_INDEXED_NAME = re.compile(r"^(.+)__(\d+)$")
# torch's thread pools are per process: the first model to load sets them (see _configure_threads).
_threads_lock = threading.Lock()
_threads_configured = False


def _indexed(names: Sequence[str]) -> list[int] | None:
    """Positions from Triton's ``NAME__<i>`` convention, or None if the names do not follow it."""
    positions = []
    for name in names:
        match = _INDEXED_NAME.match(name)
        if match is None:
            return None
        positions.append(int(match.group(2)))
    return positions if sorted(positions) == list(range(len(positions))) else None


def input_order(config_names: Sequence[str], forward_arguments: Sequence[str]) -> list[str]:
    """Config input names in the order ``forward`` takes them."""
    positions = _indexed(config_names)
    if positions is not None:
        return [name for _, name in sorted(zip(positions, config_names, strict=True))]
    if set(config_names) <= set(forward_arguments):
        return sorted(config_names, key=forward_arguments.index)
    return list(config_names)


def output_positions(config_names: Sequence[str]) -> dict[str, int]:
    """Where each configured output is in what ``forward`` returns."""
    positions = _indexed(config_names)
    if positions is None:
        positions = list(range(len(config_names)))
    return dict(zip(config_names, positions, strict=True))


def _configure_threads(config: model_config_pb2.ModelConfig, spec: InstanceSpec) -> None:
    global _threads_configured
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    with _threads_lock:
        if _threads_configured:
            return
        intra = int(parameters.get("INTRA_OP_THREAD_COUNT", spec.cpu_threads) or spec.cpu_threads)
        torch.set_num_threads(max(1, intra))
        inter = parameters.get("INTER_OP_THREAD_COUNT")
        if inter:
            try:
                torch.set_num_interop_threads(int(inter))
            except RuntimeError:  # only allowed before torch's first parallel work
                logger.warning("INTER_OP_THREAD_COUNT ignored: torch's inter-op pool is already running")
        _threads_configured = True


class PyTorchBackend:
    name = "pytorch"
    platform = "pytorch_libtorch"
    default_filename = "model.pt"

    def auto_complete(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, default_max_batch_size: int
    ) -> None:
        """TorchScript carries no tensor shapes or dtypes: the config must give them (as in Triton)."""
        incomplete = [
            t.name or "(unnamed)"
            for t in (*config.input, *config.output)
            if not t.dims or t.data_type == model_config_pb2.TYPE_INVALID
        ]
        if not config.input or not config.output or incomplete:
            raise ModelConfigError(
                "a PyTorch (TorchScript) model needs every input and output in config.pbtxt with name, "
                "data_type and dims, because the model file does not record them"
                + (f"; incomplete: {', '.join(incomplete)}" if incomplete else "")
            )

    def validate(self, config: model_config_pb2.ModelConfig, files: ModelFiles) -> None:
        for tensor in (*config.input, *config.output):
            if tensor.data_type in (model_config_pb2.TYPE_STRING, model_config_pb2.TYPE_BF16):
                kind = model_config_pb2.DataType.Name(tensor.data_type)
                raise ModelConfigError(f"'{tensor.name}': {kind} tensors cannot reach a TorchScript model")
        files.require_artifact(config, self.default_filename)

    def create_instance(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, spec: InstanceSpec
    ) -> TorchScriptInstance:
        _configure_threads(config, spec)
        return TorchScriptInstance(files.require_artifact(config, self.default_filename), config, spec)


class TorchScriptInstance:
    def __init__(self, path: Any, config: model_config_pb2.ModelConfig, spec: InstanceSpec) -> None:
        if spec.kind == "KIND_GPU":
            if not torch.cuda.is_available():
                raise ModelLoadError("instance_group asks for KIND_GPU but torch sees no CUDA device")
            self._device = torch.device(f"cuda:{spec.device_id}")
        else:
            self._device = torch.device("cpu")
        try:
            self._module = torch.jit.load(str(path), map_location=self._device)
        except Exception as exc:  # torch raises several types for files that are not TorchScript
            raise ModelLoadError(f"torch.jit.load could not read {path}: {exc}") from None
        self._module.eval()
        try:
            arguments = [argument.name for argument in self._module.forward.schema.arguments[1:]]
        except (AttributeError, RuntimeError):
            arguments = []
        self._inputs = input_order([t.name for t in config.input], arguments)
        self._outputs = output_positions([t.name for t in config.output])

    def execute(self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str]) -> dict[str, np.ndarray]:
        arguments = []
        for name in self._inputs:
            array = inputs[name]
            if not array.flags.writeable or not array.flags.c_contiguous:
                array = np.array(array)  # torch.from_numpy needs memory it may write to
            arguments.append(torch.from_numpy(array).to(self._device))
        with torch.inference_mode():
            result = self._module(*arguments)
        returned = list(result) if isinstance(result, list | tuple) else [result]
        outputs: dict[str, np.ndarray] = {}
        for name in output_names:
            position = self._outputs[name]
            if position >= len(returned):
                raise ModelLoadError(
                    f"output '{name}' is position {position} but forward() returned {len(returned)} values"
                )
            outputs[name] = returned[position].detach().cpu().numpy()
        return outputs

    def close(self) -> None:
        del self._module
