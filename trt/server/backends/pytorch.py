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

This module imports no torch: listing a repository, or auto-completing a complete config, needs
none. torch comes with the ``torchscript`` half when a model is loaded or validated.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from trt.protos import model_config_pb2
from trt.server.backends.catalog import PYTORCH
from trt.server.backends.pytorch_plan import (
    UNSUPPORTED_TYPES,
    ForwardSignature,
    TorchOptions,
    config_plan,
    example_names,
    incomplete,
)
from trt.server.core.backends.base import InstanceSpec, ModelFiles, ModelInstance
from trt.server.core.backends.registry import backend_unavailable
from trt.server.core.errors import ModelConfigError, ModelLoadError


def _torchscript() -> ModuleType:
    """The torch half, imported on first need: a missing torch fails only the models that need it,
    naming the ``trt-serve[torch]`` extra, as a missing backend module would."""
    try:
        from trt.server.backends import torchscript
    except ModuleNotFoundError as exc:
        raise backend_unavailable(PYTORCH, exc) from None
    return torchscript


def forward_signature(path: Path) -> ForwardSignature:
    """What forward() of a TorchScript file takes and returns (``trt repo add`` names the inputs to give)."""
    signature: ForwardSignature = _torchscript().forward_signature(path)
    return signature


class PyTorchBackend:
    name = "pytorch"
    platform = "pytorch_libtorch"
    default_filename = "model.pt"

    def gpu_unavailable_reason(self) -> str | None:
        reason: str | None = _torchscript().gpu_unavailable_reason()
        return reason

    def auto_complete(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, default_max_batch_size: int
    ) -> None:
        """Nothing to fill in a complete config; an incomplete one is refused, saying what to add."""
        problems = incomplete(config)
        if not problems:
            return
        try:
            hint = example_names(self._signature(config, files))
        except ModelLoadError:  # torch missing included
            hint = ""  # validate() reports an unreadable file; the config is the problem named here
        raise ModelConfigError(
            "a TorchScript file records no tensor dtypes or shapes, so config.pbtxt must list every input "
            f"and output with name, data_type and dims ({'; '.join(problems)}){hint}"
        )

    def _signature(self, config: model_config_pb2.ModelConfig, files: ModelFiles) -> ForwardSignature:
        _torchscript()  # a missing torch is named before a missing file, as by other backends
        return forward_signature(files.require_artifact(config, self.default_filename))

    def validate(self, config: model_config_pb2.ModelConfig, files: ModelFiles) -> None:
        """The config's types fit TorchScript, the file loads, and its forward() fits the config.
        Nothing runs: that would need real inputs."""
        for kind, tensors in (("input", config.input), ("output", config.output)):
            for tensor in tensors:
                if tensor.data_type in UNSUPPORTED_TYPES:
                    raise ModelConfigError(f"{kind} '{tensor.name}': {UNSUPPORTED_TYPES[tensor.data_type]}")
        TorchOptions.of(config)
        config_plan(config, self._signature(config, files))

    def create_instance(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, spec: InstanceSpec
    ) -> ModelInstance:
        torchscript = _torchscript()  # as in _signature
        path = files.require_artifact(config, self.default_filename)
        return torchscript.TorchScriptInstance(path, config, spec)  # type: ignore[no-any-return]
