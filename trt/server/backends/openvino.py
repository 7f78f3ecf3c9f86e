"""OpenVINO backend: ``backend: "openvino"``, an IR ``model.xml`` with its ``model.bin`` beside it in the
version folder, as Triton's openvino_backend lays them out (``default_model_filename`` may also name any
file OpenVINO reads itself: ``model.onnx``, a TensorFlow ``model.saved_model`` folder, ...).

One compiled model per model version, shared by its instances; each instance is one infer request on
it, run synchronously in the core's worker threads (OpenVINO releases the GIL while it computes).
Config parameters and where they differ from Triton's: ``openvino_settings``. Auto-complete follows
Triton's backend: inputs and outputs from the model, ``max_batch_size`` where every tensor's layout has
its batch first; a model whose tensors carry no layout (what OpenVINO's converter makes from ONNX)
batches where every tensor's first dimension is variable, the rule trt's ONNX Runtime backend uses,
where Triton's would not batch it.

OpenVINO is imported with this module, so a missing package fails only the models that need it, with
the registry's message naming the ``trt-serve[openvino]`` extra.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from trt.protos import model_config_pb2
from trt.server.backends.model_signature import ModelSignature, TensorInfo, auto_complete, check_tensors
from trt.server.backends.openvino_settings import OpenVinoSettings, check_device, read_settings
from trt.server.core.backends.base import InstanceSpec, ModelFiles
from trt.server.core.datatypes import BF16_DTYPE
from trt.server.core.errors import ModelConfigError, ModelLoadError, ServerError

logger = logging.getLogger("trt.backends.openvino")

Config = model_config_pb2.ModelConfig

_CONFIG_TYPES = {
    "boolean": "TYPE_BOOL",
    "u8": "TYPE_UINT8",
    "u16": "TYPE_UINT16",
    "u32": "TYPE_UINT32",
    "u64": "TYPE_UINT64",
    "i8": "TYPE_INT8",
    "i16": "TYPE_INT16",
    "i32": "TYPE_INT32",
    "i64": "TYPE_INT64",
    "f16": "TYPE_FP16",
    "bf16": "TYPE_BF16",
    "f32": "TYPE_FP32",
    "f64": "TYPE_FP64",
}


def openvino_error(exc: BaseException) -> str:
    """OpenVINO's exceptions carry a trace of source locations; the last line says what went wrong."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith("Exception from ")]
    return (useful or lines or [type(exc).__name__])[-1]


def _port_name(port: Any, kind: str, index: int) -> str:
    names = sorted(port.get_names())
    if not names:
        raise ModelLoadError(
            f"the model's {kind} {index} has no name; OpenVINO models served by name need one"
        )
    return str(port.get_any_name())


def _info(port: Any, name: str) -> TensorInfo:
    element = port.get_element_type().get_type_name()
    shape = port.get_partial_shape()
    dims = None if shape.rank.is_dynamic else tuple(d.get_length() if d.is_static else -1 for d in shape)
    return TensorInfo(name, _CONFIG_TYPES.get(element, ""), dims, element)


def signature_of(model: Any) -> ModelSignature:
    """The model's inputs and outputs, by name; a port's other names are aliases of it."""
    inputs = {_port_name(p, "input", i): p for i, p in enumerate(model.inputs)}
    outputs = {_port_name(p, "output", i): p for i, p in enumerate(model.outputs)}
    aliases = {
        alias: name
        for ports in (inputs, outputs)
        for name, port in ports.items()
        for alias in port.get_names()
        if alias != name
    }
    return ModelSignature(
        {name: _info(port, name) for name, port in inputs.items()},
        {name: _info(port, name) for name, port in outputs.items()},
        aliases,
    )


def batchable(model: Any, signature: ModelSignature) -> bool:
    """Triton's rule, a batch in every tensor's layout, where the model has layouts; else a variable
    first dimension on every tensor."""
    decided: list[bool] = []
    for port in [*model.inputs, *model.outputs]:
        layout = ov.layout_helpers.get_layout(port)
        if layout.empty:
            continue
        decided.append(bool(ov.layout_helpers.has_batch(layout)) and ov.layout_helpers.batch_idx(layout) == 0)
    if decided and len(decided) == len(model.inputs) + len(model.outputs):
        return all(decided)
    return (not decided or all(decided)) and signature.first_dims_variable()


@dataclass
class _Shared:
    """A compiled model and how many instances use it."""

    compiled: Any
    users: int = 0


class OpenVinoBackend:
    name = "openvino"
    platform = ""
    default_filename = "model.xml"

    def __init__(self) -> None:
        self._core = ov.Core()
        self._lock = threading.Lock()
        self._compiled: dict[tuple[str, ...], _Shared] = {}

    # -- reading ---------------------------------------------------------------------------------------

    def _model_path(self, config: Config, files: ModelFiles) -> Path:
        path = files.require_artifact(config, self.default_filename)
        if path.suffix == ".xml" and not path.with_suffix(".bin").is_file():
            raise ModelLoadError(
                f"model weights not found: {path.with_suffix('.bin')} (an OpenVINO IR is {path.name} with "
                f"{path.with_suffix('.bin').name} beside it)"
            )
        return path

    def _core_for(self, settings: OpenVinoSettings, files: ModelFiles) -> Any:
        """The shared core, or one of the model's own where it loads a CPU extension (extensions are
        added to a core for good, and must not reach other models)."""
        if not settings.cpu_extension:
            return self._core
        library = files.model_dir / settings.cpu_extension
        inside = library.resolve().is_relative_to(files.model_dir.resolve())
        if Path(settings.cpu_extension).is_absolute() or not inside or not library.is_file():
            raise ModelConfigError(
                f"parameter CPU_EXTENSION_PATH '{settings.cpu_extension}' must name a library inside the "
                f"model folder {files.model_dir}",
                "parameters[CPU_EXTENSION_PATH]",
            )
        core = ov.Core()
        try:
            core.add_extension(str(library))
        except Exception as exc:
            raise ModelLoadError(
                f"OpenVINO could not load CPU extension {library}: {openvino_error(exc)}"
            ) from None
        return core

    def _read(self, core: Any, config: Config, files: ModelFiles) -> Any:
        path = self._model_path(config, files)
        try:
            if path.suffix == ".xml":
                return core.read_model(str(path), str(path.with_suffix(".bin")))
            return core.read_model(str(path))
        except Exception as exc:  # OpenVINO raises RuntimeError subclasses for unreadable models
            raise ModelLoadError(
                f"OpenVINO could not read the model {path.name}: {openvino_error(exc)}"
            ) from None

    def _prepared(self, config: Config, files: ModelFiles, settings: OpenVinoSettings) -> tuple[Any, Any]:
        """(core, model) with the batch dimension and RESHAPE_IO_LAYERS applied, as it will be compiled."""
        core = self._core_for(settings, files)
        model = self._read(core, config, files)
        shapes = _target_shapes(model, config, settings)
        if shapes:
            try:
                model.reshape(shapes)
            except Exception as exc:
                raise ModelConfigError(
                    f"OpenVINO could not reshape the model's inputs to {_describe(shapes)}: "
                    f"{openvino_error(exc)}"
                    + (
                        ""
                        if settings.fixed_batch
                        else "; SKIP_OV_DYNAMIC_BATCHSIZE=YES fixes the batch instead"
                    ),
                    "max_batch_size",
                ) from None
        return core, model

    # -- the Backend interface ---------------------------------------------------------------------------

    def auto_complete(self, config: Config, files: ModelFiles, default_max_batch_size: int) -> None:
        settings = read_settings(config)
        model = self._read(self._core_for(settings, files), config, files)
        signature = signature_of(model)
        auto_complete(config, signature, batchable(model, signature), default_max_batch_size)

    def validate(self, config: Config, files: ModelFiles) -> None:
        settings = read_settings(config)
        for group in config.instance_group:
            if group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU:
                raise ModelConfigError(
                    f"instance_group '{group.name}' is KIND_GPU, but the OpenVINO backend runs KIND_CPU "
                    "instances only (as Triton's); parameter TARGET_DEVICE picks OpenVINO's device",
                    f"instance_group[{group.name}].kind",
                )
        check_device(settings.target_device, list(self._core.available_devices))
        for tensor in (*config.input, *config.output):
            if tensor.data_type == model_config_pb2.TYPE_STRING:
                raise ModelConfigError(
                    f"'{tensor.name}' is TYPE_STRING; the OpenVINO backend serves numeric tensors only",
                    f"input[{tensor.name}].data_type",
                )
        _, model = self._prepared(config, files, settings)
        check_tensors(config, _served_signature(model, settings), "the OpenVINO backend")

    def create_instance(self, config: Config, files: ModelFiles, spec: InstanceSpec) -> OpenVinoInstance:
        if spec.kind != "KIND_CPU":
            raise ModelLoadError("the OpenVINO backend runs KIND_CPU instances only")
        settings = read_settings(config)
        key, shared = self._compile_shared(config, files, settings)
        try:
            instance = OpenVinoInstance(shared.compiled, config, settings, spec, lambda: self._release(key))
        except BaseException:
            self._release(key)
            raise
        return instance

    # -- compiled models, shared by a version's instances -------------------------------------------------

    def _compile_shared(
        self, config: Config, files: ModelFiles, settings: OpenVinoSettings
    ) -> tuple[tuple[str, ...], _Shared]:
        path = self._model_path(config, files)
        stamps = [
            f"{p.stat().st_mtime_ns}:{p.stat().st_size}"
            for p in (path, path.with_suffix(".bin"))
            if p.is_file()
        ]
        key = (str(path), config.SerializeToString(deterministic=True).hex(), *stamps)
        with self._lock:
            shared = self._compiled.get(key)
            if shared is not None:
                shared.users += 1
                return key, shared
        core, model = self._prepared(config, files, settings)
        properties = _supported(core, settings)
        try:
            compiled = core.compile_model(model, settings.target_device, properties)
        except Exception as exc:
            raise ModelLoadError(
                f"OpenVINO could not compile the model for {settings.target_device}: {openvino_error(exc)}"
            ) from None
        logger.info(
            "'%s' compiled for %s: %s streams, %s threads, %s precision",
            config.name,
            settings.target_device,
            _property(compiled, "NUM_STREAMS"),
            _property(compiled, "INFERENCE_NUM_THREADS"),
            _property(compiled, "INFERENCE_PRECISION_HINT"),
        )
        with self._lock:
            shared = self._compiled.setdefault(key, _Shared(compiled))
            shared.users += 1
        return key, shared

    def _release(self, key: tuple[str, ...]) -> None:
        with self._lock:
            shared = self._compiled.get(key)
            if shared is None:
                return
            shared.users -= 1
            if shared.users <= 0:
                del self._compiled[key]


def _property(compiled: Any, name: str) -> str:
    try:
        return str(compiled.get_property(name))
    except Exception:
        return "?"


def _supported(core: Any, settings: OpenVinoSettings) -> dict[str, str]:
    """The properties the device accepts; COMPILATION_NUM_THREADS is dropped where it does not (see
    ``openvino_settings``)."""
    properties = dict(settings.properties)
    if "COMPILATION_NUM_THREADS" in properties:
        device = settings.target_device.split(":")[0].split(".")[0]
        try:
            supported = core.get_property(device, "SUPPORTED_PROPERTIES")
        except Exception:
            supported = {}
        if "COMPILATION_NUM_THREADS" not in supported:
            logger.info("COMPILATION_NUM_THREADS ignored: %s does not take it", settings.target_device)
            del properties["COMPILATION_NUM_THREADS"]
    return properties


def _target_shapes(model: Any, config: Config, settings: OpenVinoSettings) -> dict[str, Any]:
    """New input shapes: the batch dimension variable (or fixed at max_batch_size), and with
    RESHAPE_IO_LAYERS the config's dims. Empty where the model already fits."""
    batch = config.max_batch_size
    declared = {
        t.name: list(t.reshape.shape) if t.HasField("reshape") else list(t.dims) for t in config.input
    }
    shapes: dict[str, Any] = {}
    for index, port in enumerate(model.inputs):
        name = _port_name(port, "input", index)
        current = port.get_partial_shape()
        listed = next((declared[n] for n in sorted(port.get_names()) if n in declared), None)
        dims: list[Any]
        if settings.reshape_io_layers and listed is not None:
            dims = [ov.Dimension(d) if d > 0 else ov.Dimension() for d in listed]
            if batch > 0:
                dims.insert(0, ov.Dimension())
        elif current.rank.is_static:
            dims = list(current)
        else:
            continue
        if batch > 0 and dims:
            dims[0] = ov.Dimension(batch) if settings.fixed_batch else ov.Dimension()
        target = ov.PartialShape(dims)
        if target != current:
            shapes[name] = target
    return shapes


def _describe(shapes: dict[str, Any]) -> str:
    return ", ".join(f"{name} {shape}" for name, shape in shapes.items())


def _served_signature(model: Any, settings: OpenVinoSettings) -> ModelSignature:
    """The prepared model's signature as the server feeds it: a batch fixed at max_batch_size is fed
    smaller batches (padded), so it counts as variable."""
    signature = signature_of(model)
    if not settings.fixed_batch:
        return signature

    def variable_first(info: TensorInfo) -> TensorInfo:
        dims = info.dims
        return TensorInfo(info.name, info.data_type, (-1, *dims[1:]) if dims else dims, info.model_type)

    return ModelSignature(
        {n: variable_first(i) for n, i in signature.inputs.items()},
        {n: variable_first(i) for n, i in signature.outputs.items()},
        signature.aliases,
    )


def _tensor(array: np.ndarray) -> Any:
    """An OpenVINO tensor over ``array`` without a copy where it can be shared (writable, contiguous);
    read-only views of a request's bytes are copied."""
    if array.dtype == BF16_DTYPE:  # OpenVINO shows bf16 data as float16-typed bits: copied in as such
        tensor = ov.Tensor(ov.Type.bf16, ov.Shape(list(array.shape)))
        tensor.data[...] = array.view(np.float16)
        return tensor
    if array.flags.c_contiguous and array.flags.writeable:
        return ov.Tensor(array, shared_memory=True)
    return ov.Tensor(np.ascontiguousarray(array))


def _data(tensor: Any) -> np.ndarray:
    """A tensor's data as numpy sees it; bf16 (float16-typed bits in OpenVINO) as bfloat16."""
    data: np.ndarray = tensor.data
    return data.view(BF16_DTYPE) if tensor.element_type == ov.Type.bf16 else data


class OpenVinoInstance:
    """One infer request on the version's compiled model."""

    def __init__(
        self,
        compiled: Any,
        config: Config,
        settings: OpenVinoSettings,
        spec: InstanceSpec,
        release: Callable[[], None],
    ) -> None:
        try:
            self._request = compiled.create_infer_request()
        except Exception as exc:
            raise ModelLoadError(
                f"OpenVINO could not create an infer request: {openvino_error(exc)}"
            ) from None
        self._release = release
        self._max_batch = config.max_batch_size if settings.fixed_batch else 0
        self._padding = settings.batch_padding
        self._name = spec.name
        logger.info("instance %s on %s", spec.name, settings.target_device)

    def execute(self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str]) -> dict[str, np.ndarray]:
        batch = 0
        if self._max_batch:
            batch = next(iter(inputs.values())).shape[0] if inputs else 0
            if batch != self._max_batch:
                if not self._padding:
                    raise ServerError(
                        f"expected requests with batch size '{self._max_batch}', got '{batch}': the model is "
                        "compiled for max_batch_size (SKIP_OV_DYNAMIC_BATCHSIZE); set parameter "
                        "ENABLE_BATCH_PADDING to YES to pad smaller batches, at a cost in speed"
                    )
                inputs = {name: _padded(array, self._max_batch) for name, array in inputs.items()}
        request = self._request
        try:
            for name, array in inputs.items():
                request.set_tensor(name, _tensor(array))
            request.infer()
            results = {name: _data(request.get_tensor(name)) for name in output_names}
        except Exception as exc:
            raise ServerError(f"OpenVINO inference failed: {openvino_error(exc)}") from None
        # The request's output buffers are overwritten by its next inference: copy them out.
        if batch and batch != self._max_batch:
            return {name: data[:batch].copy() for name, data in results.items()}
        return {name: data.copy() for name, data in results.items()}

    def close(self) -> None:
        del self._request
        self._release()


def _padded(array: np.ndarray, size: int) -> np.ndarray:
    padded = np.zeros((size, *array.shape[1:]), dtype=array.dtype)
    padded[: array.shape[0]] = array
    return padded
