"""TensorRT backend: serialized engines (``model.plan``), run on the GPU named by the instance.

UNVERIFIED: written and unit-tested without a GPU (the engine-to-config logic lives in
``tensorrt_signature`` and is tested everywhere); the execution path has not run on a GPU yet.
Device buffers are torch CUDA tensors (torch with CUDA is the one GPU array library this project
already depends on); each instance owns an execution context and a CUDA stream.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorrt

from protos import model_config_pb2
from server.backends import tensorrt_signature as signature
from server.backends.base import InstanceSpec, ModelFiles
from server.core.errors import ModelLoadError

logger = logging.getLogger("trt.backends.tensorrt")
_TRT_LOGGER = tensorrt.Logger(tensorrt.Logger.WARNING)


def _torch_cuda() -> Any:
    try:
        import torch
    except ImportError:
        raise ModelLoadError("the TensorRT backend needs torch with CUDA for device buffers") from None
    if not torch.cuda.is_available():
        raise ModelLoadError("the TensorRT backend needs a CUDA GPU; torch sees none")
    return torch


def _deserialize(path: Path, device_id: int) -> Any:
    torch = _torch_cuda()
    torch.cuda.set_device(device_id)
    runtime = tensorrt.Runtime(_TRT_LOGGER)
    engine = runtime.deserialize_cuda_engine(path.read_bytes())
    if engine is None:
        raise ModelLoadError(
            f"TensorRT could not deserialize {path} (built for another GPU or TensorRT version?)"
        )
    return engine


def engine_tensors(engine: Any) -> list[signature.EngineTensor]:
    tensors = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        is_input = engine.get_tensor_mode(name) == tensorrt.TensorIOMode.INPUT
        profile_max = None
        if is_input and engine.num_optimization_profiles > 0:
            profile_max = tuple(engine.get_tensor_profile_shape(name, 0)[2])
        tensors.append(
            signature.EngineTensor(
                name,
                is_input,
                engine.get_tensor_dtype(name).name,
                tuple(engine.get_tensor_shape(name)),
                profile_max,
            )
        )
    return tensors


class TensorRTBackend:
    name = "tensorrt"
    platform = "tensorrt_plan"
    default_filename = "model.plan"

    def _tensors(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles
    ) -> list[signature.EngineTensor]:
        device = (
            config.instance_group[0].gpus[0] if config.instance_group and config.instance_group[0].gpus else 0
        )
        return engine_tensors(_deserialize(files.require_artifact(config, self.default_filename), device))

    def auto_complete(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, default_max_batch_size: int
    ) -> None:
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
        return TensorRTInstance(files.require_artifact(config, self.default_filename), spec.device_id)


class TensorRTInstance:
    def __init__(self, path: Path, device_id: int) -> None:
        torch = _torch_cuda()
        self._torch = torch
        self._device = torch.device(f"cuda:{device_id}")
        self._engine = _deserialize(path, device_id)
        self._context = self._engine.create_execution_context()
        self._stream = torch.cuda.Stream(device=self._device)
        self._lock = threading.Lock()  # one context runs one inference at a time
        self._types = {t.name: t.trt_type for t in engine_tensors(self._engine)}

    def _torch_dtype(self, trt_type: str) -> Any:
        torch = self._torch
        return {
            "FLOAT": torch.float32, "HALF": torch.float16, "BF16": torch.bfloat16, "INT8": torch.int8,
            "INT32": torch.int32, "INT64": torch.int64, "BOOL": torch.bool, "UINT8": torch.uint8,
        }[trt_type]  # fmt: skip

    def execute(self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str]) -> dict[str, np.ndarray]:
        torch = self._torch
        with self._lock, torch.cuda.stream(self._stream):
            keep_alive = []
            for name, array in inputs.items():
                tensor = torch.from_numpy(np.ascontiguousarray(array)).to(self._device, non_blocking=True)
                keep_alive.append(tensor)
                self._context.set_input_shape(name, tuple(array.shape))
                self._context.set_tensor_address(name, tensor.data_ptr())
            outputs = {}
            for name in output_names:
                shape = tuple(self._context.get_tensor_shape(name))
                buffer = torch.empty(shape, dtype=self._torch_dtype(self._types[name]), device=self._device)
                outputs[name] = buffer
                self._context.set_tensor_address(name, buffer.data_ptr())
            if not self._context.execute_async_v3(self._stream.cuda_stream):
                raise ModelLoadError("TensorRT execute_async_v3 failed")
            self._stream.synchronize()
            return {name: buffer.cpu().numpy() for name, buffer in outputs.items()}

    def close(self) -> None:
        del self._context
        del self._engine
