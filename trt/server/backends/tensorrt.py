"""TensorRT backend: serialized engines (``model.plan``), run on the GPU named by the instance.

UNVERIFIED on a GPU: written against the TensorRT 10 and cuda-python APIs, and tested without one
(engine-to-config logic in ``tensorrt_signature``; this module's control flow against a fake
``tensorrt`` and ``cudart`` in ``tests/backends/test_tensorrt.py``).

Device memory and streams come from cuda-python's ``cudart``, which the ``trt-serve[tensorrt]`` extra
installs (torch would be a multi-GB dependency for a few buffers). Each instance deserializes its
own engine and owns its execution context, a non-blocking CUDA stream and one device buffer per
I/O tensor, grown when a larger shape comes and reused otherwise. An execution copies the inputs in,
runs ``execute_async_v3``, copies the outputs out and waits for its stream; the core never runs two
executions of one instance at once. Host copies use pageable memory (no pinned staging buffers).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorrt

from trt import cuda_runtime
from trt.protos import model_config_pb2
from trt.server.backends import tensorrt_signature as signature
from trt.server.core.backends.base import InstanceSpec, ModelFiles
from trt.server.core.errors import InvalidInput, ModelLoadError, ServerError

try:
    cudart = cuda_runtime.runtime()
except cuda_runtime.CudaUnavailable:
    # ModuleNotFoundError is what the registry turns into "pip install 'trt-serve[tensorrt]'".
    raise ModuleNotFoundError("the TensorRT backend needs cuda-python", name="cuda-python") from None

logger = logging.getLogger("trt.backends.tensorrt")
_TRT_LOGGER = tensorrt.Logger(tensorrt.Logger.WARNING)


def _cuda(result: tuple[Any, ...], call: str) -> Any:
    """cuda-python's ``(error, *values)``: the value, or ServerError naming the call."""
    try:
        return cuda_runtime.checked(result, call)
    except cuda_runtime.CudaCallFailed as exc:
        raise ServerError(str(exc)) from None


def _select_device(device_id: int) -> None:
    try:
        count = _cuda(cudart.cudaGetDeviceCount(), "cudaGetDeviceCount")
    except ServerError as exc:
        raise ModelLoadError(f"TensorRT engines need a CUDA GPU, and none is usable here ({exc})") from None
    if device_id >= count:
        raise ModelLoadError(f"the instance asks for GPU {device_id} but CUDA sees {count}")
    _cuda(cudart.cudaSetDevice(device_id), "cudaSetDevice")


def _plan_path(config: model_config_pb2.ModelConfig, files: ModelFiles, device_id: int) -> Path:
    """``cc_model_filenames`` picks a plan per compute capability ("8.0"), as in Triton."""
    if config.cc_model_filenames:
        _select_device(device_id)
        properties = _cuda(cudart.cudaGetDeviceProperties(device_id), "cudaGetDeviceProperties")
        filename: str | None = config.cc_model_filenames.get(f"{properties.major}.{properties.minor}")
        if filename:
            path = files.version_dir / filename
            if not path.is_file():
                raise ModelLoadError(f"model file not found: {path}")
            return path
    return files.require_artifact(config, TensorRTBackend.default_filename)


def _deserialize(path: Path, device_id: int) -> tuple[Any, Any]:
    """(runtime, engine): the runtime is kept alongside the engine it made, as TensorRT asks."""
    _select_device(device_id)
    runtime = tensorrt.Runtime(_TRT_LOGGER)
    engine = runtime.deserialize_cuda_engine(path.read_bytes())
    if engine is None:
        raise ModelLoadError(
            f"TensorRT {tensorrt.__version__} could not deserialize {path}; an engine runs only with the "
            "TensorRT version and GPU model it was built for (see the log for TensorRT's reason)"
        )
    return runtime, engine


@functools.lru_cache(maxsize=32)
def _engine_io(path: str, mtime_ns: int, size: int, device_id: int) -> tuple[signature.EngineTensor, ...]:
    """Auto-complete and validate both need the engine's I/O: deserialize once per file version."""
    _, engine = _deserialize(Path(path), device_id)
    return tuple(signature.read_engine(engine))


class TensorRTBackend:
    name = "tensorrt"
    platform = "tensorrt_plan"
    default_filename = "model.plan"

    def _tensors(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles
    ) -> list[signature.EngineTensor]:
        groups = config.instance_group
        device = groups[0].gpus[0] if groups and groups[0].gpus else 0
        path = _plan_path(config, files, device)
        stat = path.stat()
        return list(_engine_io(str(path), stat.st_mtime_ns, stat.st_size, device))

    def auto_complete(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, default_max_batch_size: int
    ) -> None:
        """Inputs, outputs and max_batch_size from the engine (its own profile, not the server default)."""
        signature.auto_complete(config, self._tensors(config, files))

    def validate(self, config: model_config_pb2.ModelConfig, files: ModelFiles) -> None:
        signature.check(config, self._tensors(config, files))

    def create_instance(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, spec: InstanceSpec
    ) -> TensorRTInstance:
        if spec.kind != "KIND_GPU":
            raise ModelLoadError(
                "TensorRT engines run on a GPU: use instance_group kind KIND_GPU (or KIND_AUTO)"
            )
        return TensorRTInstance(_plan_path(config, files, spec.device_id), spec)


class TensorRTInstance:
    def __init__(self, path: Path, spec: InstanceSpec) -> None:
        self._device_id = spec.device_id
        self._runtime, self._engine = _deserialize(path, spec.device_id)
        tensors = signature.read_engine(self._engine)
        self._inputs = {t.name: t for t in tensors if t.is_input}
        self._outputs = [t.name for t in tensors if not t.is_input]
        self._dtypes = {t.name: t.numpy_dtype for t in tensors}
        self._buffers: dict[str, tuple[int, int]] = {}  # tensor name -> (device pointer, bytes)
        self._stream: Any = None
        self._context = self._engine.create_execution_context()
        if self._context is None:
            raise ModelLoadError("TensorRT could not create an execution context (out of GPU memory?)")
        self._stream = _cuda(
            cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking), "cudaStreamCreateWithFlags"
        )
        logger.info("instance %s on GPU %d", spec.name, spec.device_id)

    def _buffer(self, name: str, nbytes: int) -> int:
        pointer, capacity = self._buffers.get(name, (0, 0))
        if nbytes > capacity or not pointer:
            if pointer:
                _cuda(cudart.cudaFree(pointer), "cudaFree")
            capacity = max(nbytes, 1)  # never a null address, even for an empty tensor
            pointer = int(_cuda(cudart.cudaMalloc(capacity), "cudaMalloc"))
            self._buffers[name] = (pointer, capacity)
        return pointer

    def execute(self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str]) -> dict[str, np.ndarray]:
        # CUDA's current device belongs to the calling thread, which the core picks per execution.
        _cuda(cudart.cudaSetDevice(self._device_id), "cudaSetDevice")
        context, stream = self._context, self._stream
        to_device = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        staged = []  # host arrays stay alive until the stream is done with them
        for name, array in inputs.items():
            host = np.ascontiguousarray(array, dtype=self._dtypes[name])
            if not context.set_input_shape(name, host.shape):
                raise InvalidInput(signature.profile_error(self._inputs[name], host.shape))
            pointer = self._buffer(name, host.nbytes)
            if host.nbytes:
                copy = cudart.cudaMemcpyAsync(pointer, host.ctypes.data, host.nbytes, to_device, stream)
                _cuda(copy, "copy in")
            context.set_tensor_address(name, pointer)
            staged.append(host)
        results: dict[str, np.ndarray] = {}
        for name in self._outputs:  # TensorRT writes every output, requested or not
            shape = tuple(context.get_tensor_shape(name))
            if any(dim < 0 for dim in shape):
                raise ServerError(
                    f"output '{name}' has shape {list(shape)} after the inputs were set: data-dependent "
                    "output shapes are not supported by this backend"
                )
            dtype = self._dtypes[name]
            context.set_tensor_address(name, self._buffer(name, math.prod(shape) * dtype.itemsize))
            if name in output_names:
                results[name] = np.empty(shape, dtype)
        if not context.execute_async_v3(int(stream)):
            raise ServerError("TensorRT execute_async_v3 failed; the server log has TensorRT's reason")
        to_host = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for name, host in results.items():
            if host.nbytes:
                pointer = self._buffers[name][0]
                copy = cudart.cudaMemcpyAsync(host.ctypes.data, pointer, host.nbytes, to_host, stream)
                _cuda(copy, "copy out")
        _cuda(cudart.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
        return results

    def close(self) -> None:
        try:
            _cuda(cudart.cudaSetDevice(self._device_id), "cudaSetDevice")
            if self._stream is not None:
                _cuda(cudart.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
            for pointer, _ in self._buffers.values():
                _cuda(cudart.cudaFree(pointer), "cudaFree")
            if self._stream is not None:
                _cuda(cudart.cudaStreamDestroy(self._stream), "cudaStreamDestroy")
        except ServerError as exc:
            logger.warning("releasing a TensorRT instance's CUDA resources failed: %s", exc)
        self._buffers.clear()
        self._stream = None
        # The context goes before the engine, and the engine before the runtime that made it.
        self._context = None
        self._engine = None
        self._runtime = None
