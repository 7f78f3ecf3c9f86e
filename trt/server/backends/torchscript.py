"""The torch half of the PyTorch backend: loading a TorchScript file and running it on a device.
Imported when a model first needs torch (loading, validating, or naming the inputs an incomplete config
lacks). torch releases the GIL while it computes, so instances run in parallel in the core's worker
threads."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trt.protos import model_config_pb2
from trt.server.backends.pytorch_plan import CallPlan, ForwardSignature, TorchOptions, config_plan
from trt.server.core.backends.base import InstanceSpec
from trt.server.core.datatypes import BF16_DTYPE, config_to_wire, numpy_to_wire
from trt.server.core.errors import InvalidInput, ModelLoadError, ServerError

logger = logging.getLogger("trt.backends.pytorch")

CPU = torch.device("cpu")
_interop_lock = threading.Lock()


def load(path: Path, device: torch.device) -> Any:
    try:
        module = torch.jit.load(str(path), map_location=device)
    except Exception as exc:  # torch raises several types for files that are not TorchScript
        raise ModelLoadError(
            f"torch.jit.load could not read {path} ({exc}); save the model with "
            "torch.jit.script(model).save(path) or torch.jit.trace(model, example).save(path)"
        ) from None
    return module.eval()


def forward_signature(path: Path) -> ForwardSignature:
    """What forward() of a TorchScript file declares (its arguments, how many values it returns)."""
    return ForwardSignature.of(load(path, CPU))


def gpu_unavailable_reason() -> str | None:
    if torch.cuda.is_available():
        return None
    return f"this torch ({torch.__version__}) sees no CUDA device (a CPU build, or no driver it can use)"


def _device(spec: InstanceSpec) -> torch.device:
    if spec.kind != "KIND_GPU":
        return CPU
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
        self._module = load(path, self._device)
        self._plan = config_plan(config, ForwardSignature.of(self._module))
        self._call = self._caller(self._plan)
        # A TorchScript file declares no output types, so each answer is checked against the config's.
        declared = [(t.name, t.data_type) for t in config.output]
        declared += [(s.output_name, s.data_type) for s in config.sequence_batching.state]
        self._output_types = {
            name: config_to_wire(model_config_pb2.DataType.Name(data_type)) for name, data_type in declared
        }
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
                    array = value.view(torch.int16).numpy().view(BF16_DTYPE)
                else:
                    array = value.numpy()
                self._check_type(name, array)
                outputs[name] = array
        return outputs

    def _check_type(self, name: str, array: np.ndarray) -> None:
        """Triton's pytorch backend refuses an output whose type is not the config's, in these words."""
        expected = self._output_types.get(name)
        provided = numpy_to_wire(array.dtype)
        if expected is not None and provided != expected:
            raise InvalidInput(
                f"configuration expects datatype TYPE_{expected} for output '{name}', "
                f"model provides TYPE_{provided}"
            )

    def close(self) -> None:
        del self._module, self._call
