"""ONNX Runtime backend: ``model.onnx`` run by ``onnxruntime.InferenceSession``.

Sessions run on the CPU unless the instance is KIND_GPU, which selects the CUDA execution provider on
the instance's device (and TensorRT's when ``optimization.execution_accelerators`` asks for it).
``InferenceSession.run`` releases the GIL, so instances run concurrently in worker threads.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trt.protos import model_config_pb2
from trt.server.backends.model_signature import ModelSignature, TensorInfo, check_tensors
from trt.server.core.backends.base import InstanceSpec, ModelFiles
from trt.server.core.datatypes import BF16_DTYPE, config_to_wire
from trt.server.core.errors import InvalidInput, ModelLoadError

logger = logging.getLogger("trt.backends.onnxruntime")

_ORT_TO_CONFIG_TYPE = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
    "tensor(bfloat16)": "TYPE_BF16",
}


# Distributions that each install the one module ``onnxruntime``: pip lets them sit side by side, and
# the one installed last has overwritten the other's files (the GPU build's CUDA provider may be gone,
# or a mix of the two left). Installing trt (which needs ``onnxruntime``) beside onnxruntime-gpu does it.
_ONNXRUNTIME_DISTRIBUTIONS = (
    "onnxruntime",
    "onnxruntime-gpu",
    "onnxruntime-openvino",
    "onnxruntime-directml",
    "onnxruntime-qnn",
    "onnxruntime-training",
    "ort-nightly",
    "ort-nightly-gpu",
)
_checked_distributions: list[str] | None = None


def installed_onnxruntime_distributions() -> list[str]:
    """Which of the distributions that provide the ``onnxruntime`` module are installed."""
    installed = []
    for name in _ONNXRUNTIME_DISTRIBUTIONS:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        installed.append(name)
    return installed


def _clash(distributions: list[str]) -> str:
    keep = next(name for name in distributions if name != "onnxruntime")  # the special build was wanted
    return (
        f"{', '.join(distributions)} are installed side by side, and each provides the module "
        "onnxruntime: the one installed last overwrote the others' files. Keep one: "
        f"pip uninstall -y {' '.join(distributions)} && pip install {keep}"
    )


def _import_onnxruntime() -> Any:
    global _checked_distributions
    try:
        import onnxruntime
    except ImportError:
        raise ModelLoadError(
            "onnxruntime is not installed: pip install onnxruntime (or onnxruntime-gpu, never both)"
        ) from None
    if _checked_distributions is None:  # once per process: a few ms of metadata lookups
        _checked_distributions = installed_onnxruntime_distributions()
        if len(_checked_distributions) > 1:
            logger.warning("%s", _clash(_checked_distributions))
    return onnxruntime


def _dims(shape: Sequence[Any]) -> list[int]:
    """ONNX Runtime reports symbolic or unknown dims as strings or None; Triton calls them -1."""
    return [dim if isinstance(dim, int) and dim >= 0 else -1 for dim in shape]


class _Signature:
    """Inputs and outputs as the model file declares them."""

    def __init__(self, session: Any) -> None:
        self.inputs = {arg.name: (arg.type, _dims(arg.shape)) for arg in session.get_inputs()}
        self.outputs = {arg.name: (arg.type, _dims(arg.shape)) for arg in session.get_outputs()}

    def checked(self) -> ModelSignature:
        """The same tensors as the config check of every tensor backend reads them."""

        def infos(found: dict[str, tuple[str, list[int]]]) -> dict[str, TensorInfo]:
            return {
                name: TensorInfo(name, _ORT_TO_CONFIG_TYPE.get(ort_type, ""), tuple(dims), ort_type)
                for name, (ort_type, dims) in found.items()
            }

        return ModelSignature(infos(self.inputs), infos(self.outputs))


class OnnxRuntimeBackend:
    name = "onnxruntime"
    platform = "onnxruntime_onnx"
    default_filename = "model.onnx"

    def gpu_unavailable_reason(self) -> str | None:
        if "CUDAExecutionProvider" in _import_onnxruntime().get_available_providers():
            return None
        return "this onnxruntime has no CUDAExecutionProvider (onnxruntime-gpu, in its place, has)"

    def _model_path(self, config: model_config_pb2.ModelConfig, files: ModelFiles) -> Path:
        path = files.require_artifact(config, self.default_filename)
        if path.is_dir():  # Triton also accepts a directory holding model.onnx (external weights)
            path = path / "model.onnx"
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        return path

    def _signature(self, config: model_config_pb2.ModelConfig, files: ModelFiles) -> _Signature:
        ort = _import_onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            session = ort.InferenceSession(
                str(self._model_path(config, files)), options, providers=["CPUExecutionProvider"]
            )
        except ModelLoadError:
            raise
        except Exception as exc:  # onnxruntime raises its own exception types for broken files
            raise ModelLoadError(f"onnxruntime could not read the model: {exc}") from None
        return _Signature(session)

    def auto_complete(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, default_max_batch_size: int
    ) -> None:
        signature = self._signature(config, files)
        all_shapes = [dims for _, dims in [*signature.inputs.values(), *signature.outputs.values()]]
        can_batch = bool(all_shapes) and all(len(dims) >= 1 and dims[0] == -1 for dims in all_shapes)
        # Only a config that says nothing about batching gets a batch size picked for it.
        declared_dims = [len(t.dims) for t in (*config.input, *config.output)]
        if config.max_batch_size == 0 and can_batch and not declared_dims:
            config.max_batch_size = default_max_batch_size
            if config.WhichOneof("scheduling_choice") is None:
                config.dynamic_batching.SetInParent()
        strip_batch = config.max_batch_size > 0
        self._complete_tensors(config.input, signature.inputs, strip_batch)
        self._complete_tensors(config.output, signature.outputs, strip_batch)

    @staticmethod
    def _complete_tensors(declared: Any, found: dict[str, tuple[str, list[int]]], strip_batch: bool) -> None:
        """Add every tensor when the config lists none; otherwise fill only what listed ones lack."""
        if not declared:
            for name in found:
                declared.add().name = name
        for tensor in declared:
            if tensor.name not in found:
                continue  # validate() reports it with the model's real names
            ort_type, dims = found[tensor.name]
            if tensor.data_type == model_config_pb2.TYPE_INVALID:
                tensor.data_type = model_config_pb2.DataType.Value(
                    _ORT_TO_CONFIG_TYPE.get(ort_type, "TYPE_INVALID")
                )
            if not tensor.dims:
                tensor.dims.extend(dims[1:] if strip_batch else dims)

    def validate(self, config: model_config_pb2.ModelConfig, files: ModelFiles) -> None:
        # Inputs the config leaves out are not refused: an ONNX input may have a default (initializer).
        check_tensors(config, self._signature(config, files).checked(), "ONNX Runtime", all_inputs=False)

    def create_instance(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, spec: InstanceSpec
    ) -> OnnxRuntimeInstance:
        return OnnxRuntimeInstance(self._model_path(config, files), config, spec)


class OnnxRuntimeInstance:
    def __init__(self, path: Path, config: model_config_pb2.ModelConfig, spec: InstanceSpec) -> None:
        ort = _import_onnxruntime()
        options = ort.SessionOptions()
        parameters = {key: value.string_value for key, value in config.parameters.items()}
        options.intra_op_num_threads = int(parameters.get("intra_op_thread_count", spec.cpu_threads) or 0)
        options.inter_op_num_threads = int(parameters.get("inter_op_thread_count", 1) or 0)
        # ONNX Runtime's pool threads spin-wait for work after every run; in a server with gaps
        # between requests that burns a core for nothing. Off unless the config turns it on.
        spinning = parameters.get("allow_spinning", "0")
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if spinning in ("1", "true") else "0"
        )
        options.add_session_config_entry(
            "session.inter_op.allow_spinning", "1" if spinning in ("1", "true") else "0"
        )
        level = config.optimization.graph.level
        options.graph_optimization_level = {
            -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            1: ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        providers = self._providers(ort, config, spec)
        try:
            self._session = ort.InferenceSession(str(path), options, providers=providers)
        except Exception as exc:
            raise ModelLoadError(f"onnxruntime could not create a session: {exc}") from None
        self._string_inputs = {arg.name for arg in self._session.get_inputs() if arg.type == "tensor(string)"}
        self._run = self._session.run
        # ONNX Runtime's Python API takes and gives no bfloat16 arrays: a model with such a tensor runs
        # on OrtValues (the other models keep the cheaper plain run).
        tensors = (*self._session.get_inputs(), *self._session.get_outputs())
        self._bf16 = any(arg.type == "tensor(bfloat16)" for arg in tensors)
        if self._bf16 and self._string_inputs:
            # Measured on onnxruntime 1.32: its Python API makes OrtValues of no string array, and its
            # plain run takes no bfloat16 one, so such a model could only fail every request.
            raise ModelLoadError(
                "onnxruntime's Python API cannot run a model with both BF16 tensors and string inputs "
                f"({', '.join(sorted(self._string_inputs))}): it takes bfloat16 data only as OrtValues, "
                "and makes no OrtValue of strings"
            )
        self._ort_value = ort.OrtValue
        logger.info("instance %s on %s", spec.name, self._session.get_providers()[0])

    @staticmethod
    def _providers(ort: Any, config: model_config_pb2.ModelConfig, spec: InstanceSpec) -> list[Any]:
        if spec.kind != "KIND_GPU":
            return ["CPUExecutionProvider"]
        available = set(ort.get_available_providers())
        if "CUDAExecutionProvider" not in available:
            if _checked_distributions is not None and len(_checked_distributions) > 1:
                raise ModelLoadError(
                    "instance_group asks for KIND_GPU but this onnxruntime has no CUDAExecutionProvider: "
                    + _clash(_checked_distributions)
                )
            raise ModelLoadError(
                "instance_group asks for KIND_GPU but this onnxruntime has no CUDAExecutionProvider; "
                "install onnxruntime-gpu (in place of onnxruntime) or use KIND_CPU"
            )
        providers: list[Any] = []
        for accelerator in config.optimization.execution_accelerators.gpu_execution_accelerator:
            if accelerator.name == "tensorrt":
                if "TensorrtExecutionProvider" not in available:
                    raise ModelLoadError("execution accelerator 'tensorrt' requested but not available")
                options: dict[str, Any] = {"device_id": spec.device_id}
                if accelerator.parameters.get("precision_mode") == "FP16":
                    options["trt_fp16_enable"] = True
                providers.append(("TensorrtExecutionProvider", options))
        providers.append(("CUDAExecutionProvider", {"device_id": spec.device_id}))
        providers.append("CPUExecutionProvider")
        return providers

    def execute(self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str]) -> dict[str, np.ndarray]:
        feeds: dict[str, np.ndarray] = dict(inputs)
        for name in self._string_inputs.intersection(feeds):
            feeds[name] = _as_text(name, feeds[name])
        if self._bf16:
            return self._execute_with_values(feeds, output_names)
        results = self._run(list(output_names), feeds)
        return dict(zip(output_names, results, strict=True))

    def _execute_with_values(
        self, feeds: dict[str, np.ndarray], output_names: Sequence[str]
    ) -> dict[str, np.ndarray]:
        values = {}
        for name, array in feeds.items():
            if array.dtype == BF16_DTYPE:
                values[name] = self._ort_value.ortvalue_from_numpy_with_onnx_type(
                    np.ascontiguousarray(array).view(np.uint16), _ONNX_BFLOAT16
                )
            else:
                values[name] = self._ort_value.ortvalue_from_numpy(np.ascontiguousarray(array))
        results = self._session.run_with_ort_values(list(output_names), values)
        return {name: _array_of(value) for name, value in zip(output_names, results, strict=True)}

    def close(self) -> None:
        del self._session


_ONNX_BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16


def _array_of(value: Any) -> np.ndarray:
    """An OrtValue's data as an array it owns; a bfloat16 one copied out through its data pointer."""
    if value.data_type() != "tensor(bfloat16)":
        array: np.ndarray = value.numpy()
        return array
    shape = tuple(value.shape())
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.empty(shape, BF16_DTYPE)
    words = (ctypes.c_uint16 * count).from_address(value.data_ptr())
    copied: np.ndarray = np.ctypeslib.as_array(words).copy().view(BF16_DTYPE).reshape(shape)
    return copied


def _as_text(name: str, array: np.ndarray) -> np.ndarray:
    """ONNX Runtime's Python API carries string tensors as text (bytes objects would be str()-ed),
    so BYTES elements must be UTF-8; anything else is refused rather than silently altered."""
    text = np.empty(array.shape, dtype=np.object_)
    flat_in, flat_out = array.reshape(-1), text.reshape(-1)
    for index, value in enumerate(flat_in):
        if isinstance(value, bytes):
            try:
                flat_out[index] = value.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidInput(
                    f"input '{name}': element {index} is not valid UTF-8; "
                    "ONNX Runtime string tensors carry text"
                ) from None
        else:
            flat_out[index] = str(value)
    return text


def config_type_of(ort_type: str) -> str:
    """Wire datatype for an ONNX Runtime type string (used by ``trt repo add``)."""
    return config_to_wire(_ORT_TO_CONFIG_TYPE.get(ort_type, "TYPE_INVALID"))
