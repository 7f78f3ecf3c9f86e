"""TensorFlow backend: ``platform: "tensorflow_savedmodel"`` (a ``model.savedmodel`` folder) and
``"tensorflow_graphdef"`` (a frozen ``model.graphdef``), as Triton's tensorflow backend serves them.

Both run as TensorFlow 1-style sessions (``tf.compat.v1``), as Triton's C++ backend runs them: the
SavedModel's signature (``TF_SIGNATURE_DEF``, default ``serving_default``) under its tag
(``TF_GRAPH_TAG``, default ``serve``) names the tensors, a session's callable runs one execution, and
``Session.run`` releases the GIL so instances run in parallel in the core's worker threads. Config
parameters, as Triton's: TF_NUM_INTRA_THREADS, TF_NUM_INTER_THREADS, TF_USE_PER_SESSION_THREADS,
TF_GRAPH_TAG, TF_SIGNATURE_DEF, MAX_SESSION_SHARE_COUNT (instances sharing one session) and
TF_INIT_OPS_FILE (a JSON ``{"init_ops": [...]}`` run once per session, read from the version folder,
else the model folder).

Auto-complete as Triton's: SavedModels from their signature (inputs, outputs, ``max_batch_size`` where
every tensor's first dimension is variable, a dynamic batcher); GraphDefs carry too little, so their
config must list every tensor. Tensor names are the signature's keys for a SavedModel and node names
(``name`` or ``name:0``) for a GraphDef. CPU only: the ``trt-serve[tensorflow]`` extra installs
tensorflow-cpu, and KIND_GPU instances are refused.

TensorFlow is imported with this module (seconds), so only models that need it pay for it, and a
missing package fails only them, with the registry's message naming the extra.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # its start-up chatter, not errors
import tensorflow as tf

from trt.protos import model_config_pb2
from trt.server.backends.model_signature import (
    ModelSignature,
    TensorInfo,
    auto_complete,
    check_tensors,
)
from trt.server.backends.tensorflow_settings import TensorFlowSettings, init_ops, read_settings
from trt.server.core.backends.base import InstanceSpec, ModelFiles
from trt.server.core.errors import ModelConfigError, ModelLoadError, ServerError

logger = logging.getLogger("trt.backends.tensorflow")
tf.get_logger().setLevel(logging.ERROR)  # deprecation notices for the compat.v1 loader, on every load

Config = model_config_pb2.ModelConfig
SAVEDMODEL = "tensorflow_savedmodel"
GRAPHDEF = "tensorflow_graphdef"
_INIT_SIGNATURES = ("__saved_model_init_op", "__saved_model_train_op")
_GRAPHDEF_LISTS = (
    "a GraphDef does not say which tensors are its inputs and outputs: list them in the config "
    "(Triton does not auto-complete GraphDefs either)"
)

_CONFIG_TYPES = {
    "bool": "TYPE_BOOL",
    "uint8": "TYPE_UINT8",
    "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "float16": "TYPE_FP16",
    "float32": "TYPE_FP32",
    "float64": "TYPE_FP64",
    "string": "TYPE_STRING",
}


def _info(name: str, dtype: Any, shape: Any) -> TensorInfo:
    """A tensor from TensorFlow's dtype and shape (a ``TensorShape`` or a ``TensorShapeProto``)."""
    dtype = tf.dtypes.as_dtype(dtype)
    if isinstance(shape, tf.TensorShape):
        dims = None if shape.rank is None else tuple(-1 if d is None else int(d) for d in shape.as_list())
    else:
        dims = None if shape.unknown_rank else tuple(int(d.size) if d.size >= 0 else -1 for d in shape.dim)
    return TensorInfo(name, _CONFIG_TYPES.get(dtype.name, ""), dims, dtype.name)


def _tensor_name(name: str) -> str:
    """A GraphDef tensor: ``node`` means its first output, ``node:0``."""
    return name if ":" in name else f"{name}:0"


@dataclass
class _Graph:
    """A loaded model: its session and the graph tensor behind each config tensor name."""

    session: Any
    inputs: dict[str, str]  # config name -> graph tensor name
    outputs: dict[str, str]
    signature: ModelSignature
    users: int = 0
    callables: dict[tuple[tuple[str, ...], tuple[str, ...]], Any] = field(default_factory=dict)


class TensorFlowBackend:
    name = "tensorflow"
    platform = SAVEDMODEL
    default_filename = "model.savedmodel"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, ...], list[_Graph]] = {}

    # -- reading ---------------------------------------------------------------------------------------

    @staticmethod
    def _graphdef(config: Config) -> bool:
        return config.platform == GRAPHDEF

    def _path(self, config: Config, files: ModelFiles) -> Path:
        default = "model.graphdef" if self._graphdef(config) else self.default_filename
        path = files.require_artifact(config, default)
        if self._graphdef(config) and not path.is_file():
            raise ModelLoadError(f"{path} must be a file: a GraphDef is one serialized graph")
        if not self._graphdef(config) and not (path / "saved_model.pb").is_file():
            raise ModelLoadError(
                f"{path} is not a SavedModel folder (no saved_model.pb in it); a frozen graph is served with "
                f'platform: "{GRAPHDEF}" as model.graphdef'
            )
        return path

    def _load(self, config: Config, files: ModelFiles, settings: TensorFlowSettings) -> _Graph:
        """A new session with the model in it, its init ops run."""
        path = self._path(config, files)
        graph = tf.Graph()
        session_config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=settings.intra_threads,
            inter_op_parallelism_threads=settings.inter_threads,
            use_per_session_threads=settings.per_session_threads,
            allow_soft_placement=True,
            device_count={"GPU": 0},
        )
        session = tf.compat.v1.Session(graph=graph, config=session_config)
        try:
            with graph.as_default():
                if self._graphdef(config):
                    loaded = self._import_graphdef(path, config, graph)
                else:
                    loaded = self._load_savedmodel(path, session, settings)
                operations = init_ops(settings, files)
                if operations:
                    session.run([graph.get_operation_by_name(op) for op in operations])
        except (ModelLoadError, ModelConfigError):
            session.close()
            raise
        except Exception as exc:  # TensorFlow raises its own error types for unreadable models
            session.close()
            raise ModelLoadError(f"TensorFlow could not load {path.name}: {_tf_error(exc)}") from None
        inputs, outputs, signature = loaded
        return _Graph(session, inputs, outputs, signature)

    @staticmethod
    def _load_savedmodel(
        path: Path, session: Any, settings: TensorFlowSettings
    ) -> tuple[dict[str, str], dict[str, str], ModelSignature]:
        meta = tf.compat.v1.saved_model.loader.load(session, [settings.graph_tag], str(path))
        signatures = meta.signature_def
        key = settings.signature_def or "serving_default"
        if key not in signatures:
            usable = [k for k in signatures if k not in _INIT_SIGNATURES]
            if settings.signature_def or not usable:
                raise ModelLoadError(
                    f"the SavedModel has no signature '{key}' under tag '{settings.graph_tag}'; it has: "
                    f"{', '.join(usable) or 'none'} (parameter TF_SIGNATURE_DEF picks one)"
                )
            logger.warning("no signature 'serving_default' in %s: using '%s'", path, usable[0])
            key = usable[0]
        chosen = signatures[key]
        inputs = {name: tensor.name for name, tensor in chosen.inputs.items()}
        outputs = {name: tensor.name for name, tensor in chosen.outputs.items()}
        signature = ModelSignature(
            {n: _info(n, t.dtype, t.tensor_shape) for n, t in chosen.inputs.items()},
            {n: _info(n, t.dtype, t.tensor_shape) for n, t in chosen.outputs.items()},
        )
        return inputs, outputs, signature

    @staticmethod
    def _import_graphdef(
        path: Path, config: Config, graph: Any
    ) -> tuple[dict[str, str], dict[str, str], ModelSignature]:
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(path.read_bytes())
        if not graph_def.node:
            raise ModelLoadError(f"{path.name} holds an empty graph")
        tf.import_graph_def(graph_def, name="")
        placeholders = {op.name: op for op in graph.get_operations() if op.type == "Placeholder"}
        inputs = {name: f"{name}:0" for name in placeholders}
        input_infos = {
            name: _info(name, op.outputs[0].dtype, op.outputs[0].shape) for name, op in placeholders.items()
        }
        # Any node can be an output: the config says which; those it names that exist are described.
        outputs: dict[str, str] = {}
        output_infos: dict[str, TensorInfo] = {}
        for tensor in config.output:
            try:
                found = graph.get_tensor_by_name(_tensor_name(tensor.name))
            except (KeyError, ValueError):
                continue
            outputs[tensor.name] = found.name
            output_infos[tensor.name] = _info(tensor.name, found.dtype, found.shape)
        return inputs, outputs, ModelSignature(input_infos, output_infos)

    def _signature(self, config: Config, files: ModelFiles) -> ModelSignature:
        settings = read_settings(config, files)
        loaded = self._load(config, files, settings)
        try:
            return loaded.signature
        finally:
            loaded.session.close()

    # -- the Backend interface ---------------------------------------------------------------------------

    def auto_complete(self, config: Config, files: ModelFiles, default_max_batch_size: int) -> None:
        if self._graphdef(config):
            # A GraphDef does not say which tensors are inputs and outputs: nothing to fill from it.
            if not (config.input and config.output):
                raise ModelConfigError(_GRAPHDEF_LISTS, "input" if not config.input else "output")
            return
        signature = self._signature(config, files)
        auto_complete(config, signature, signature.first_dims_variable(), default_max_batch_size)

    def validate(self, config: Config, files: ModelFiles) -> None:
        for group in config.instance_group:
            if group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU:
                raise ModelConfigError(
                    f"instance_group '{group.name}' is KIND_GPU, but this TensorFlow backend runs on the CPU "
                    "(the trt-serve[tensorflow] extra installs tensorflow-cpu); use KIND_CPU",
                    f"instance_group[{group.name}].kind",
                )
        if self._graphdef(config) and not (config.input and config.output):
            raise ModelConfigError(_GRAPHDEF_LISTS, "input" if not config.input else "output")
        check_tensors(config, self._signature(config, files), "the TensorFlow backend")

    def create_instance(self, config: Config, files: ModelFiles, spec: InstanceSpec) -> TensorFlowInstance:
        if spec.kind != "KIND_CPU":
            raise ModelLoadError("this TensorFlow backend runs KIND_CPU instances only")
        settings = read_settings(config, files)
        key, graph = self._session_for(config, files, settings)
        return TensorFlowInstance(graph, spec, lambda: self._release(key, graph))

    # -- sessions, shared by up to MAX_SESSION_SHARE_COUNT instances ---------------------------------------

    def _session_for(
        self, config: Config, files: ModelFiles, settings: TensorFlowSettings
    ) -> tuple[tuple[str, ...], _Graph]:
        path = self._path(config, files)
        key = (str(path), config.SerializeToString(deterministic=True).hex(), str(_newest_change(path)))
        with self._lock:
            for graph in self._sessions.get(key, []):
                if graph.users < settings.session_share_count:
                    graph.users += 1
                    return key, graph
        graph = self._load(config, files, settings)
        graph.users = 1
        with self._lock:
            self._sessions.setdefault(key, []).append(graph)
        return key, graph

    def _release(self, key: tuple[str, ...], graph: _Graph) -> None:
        with self._lock:
            graph.users -= 1
            if graph.users > 0:
                return
            sessions = self._sessions.get(key, [])
            if graph in sessions:
                sessions.remove(graph)
            if not sessions:
                self._sessions.pop(key, None)
        graph.session.close()


def _newest_change(path: Path) -> int:
    """When the model last changed on disk (a SavedModel is a folder of files)."""
    if path.is_file():
        return path.stat().st_mtime_ns
    return max((p.stat().st_mtime_ns for p in path.rglob("*") if p.is_file()), default=0)


def _tf_error(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return str(message).strip().splitlines()[0] if str(message).strip() else type(exc).__name__


class TensorFlowInstance:
    """Executions on the (possibly shared) session; ``Session.run`` is thread-safe."""

    def __init__(self, graph: _Graph, spec: InstanceSpec, release: Any) -> None:
        self._graph = graph
        self._release = release
        logger.info("instance %s on CPU", spec.name)

    def _callable(self, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> Any:
        graph = self._graph
        call = graph.callables.get((inputs, outputs))
        if call is None:
            try:
                call = graph.session.make_callable(
                    [graph.outputs[name] for name in outputs], [graph.inputs[name] for name in inputs]
                )
            except KeyError as exc:
                raise ServerError(f"the model has no tensor {exc}") from None
            graph.callables[(inputs, outputs)] = call  # a benign race: two threads may both make one
        return call

    def execute(self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str]) -> dict[str, np.ndarray]:
        names = tuple(inputs)
        outputs = tuple(output_names)
        call = self._callable(names, outputs)
        try:
            results = call(*(inputs[name] for name in names))
        except tf.errors.OpError as exc:
            raise ServerError(f"TensorFlow execution failed: {_tf_error(exc)}") from None
        return dict(zip(outputs, results, strict=True))

    def close(self) -> None:
        self._release()
