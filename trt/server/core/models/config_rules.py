"""The rules a complete model config must follow before any backend sees it, as Triton applies them.

``config_problems`` yields every broken rule (``trt repo validate`` reports them all); the loader
raises the first (``check_config``), so a config that ``trt repo validate`` passes loads in
``trt serve`` and in Triton alike. Each problem names its field, e.g. ``input[INPUT0].dims``, which
``trt repo validate`` turns into a line of config.pbtxt. Rules that need the model file (names,
dtypes and dims against the file) belong to the backends' ``validate``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from trt.protos import model_config_pb2
from trt.server.core.datatypes import WIRE_DATATYPES, config_to_wire
from trt.server.core.errors import ModelConfigError
from trt.server.core.extensions.latency_distributions import FIRST_RESPONSE_FAMILY
from trt.server.core.models.config_paths import config_path_problems
from trt.server.core.scheduling.ragged import RaggedBatching

Config = model_config_pb2.ModelConfig
Group = model_config_pb2.ModelInstanceGroup
Control = model_config_pb2.ModelSequenceBatching.Control
QueuePolicy = model_config_pb2.ModelQueuePolicy

_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")
# The most instances one model may have in all (each group's count times its devices). Far above
# what any deployment runs, it stops a slip of the keyboard or a hostile override (count: 1000000)
# before the loader spends the host's memory on it, or, for a Python model, its process table.
MAX_MODEL_INSTANCES = 1024


def check_config(config: Config) -> None:
    """Raise the first broken rule (the loader's check)."""
    for problem in config_problems(config):
        raise problem


def config_problems(config: Config) -> Iterator[ModelConfigError]:
    if config.max_batch_size < 0:
        yield ModelConfigError(
            f"max_batch_size must be 0 or more, got {config.max_batch_size}", "max_batch_size"
        )
    yield from config_path_problems(config)
    yield from _tensor_problems(config)
    yield from _dynamic_batching_problems(config)
    yield from _sequence_batching_problems(config)
    yield from _instance_group_problems(config)
    yield from _model_metrics_problems(config)
    yield from _ragged_problems(config)
    if config.platform == "ensemble" and not config.HasField("ensemble_scheduling"):
        yield ModelConfigError(
            "platform 'ensemble' needs ensemble_scheduling { step [...] } naming the models it runs",
            "platform",
        )


def _tensor_problems(config: Config) -> Iterator[ModelConfigError]:
    if not config.input:
        yield ModelConfigError(
            "the model has no inputs in its config and none could be auto-completed", "input"
        )
    if not config.output:
        yield ModelConfigError(
            "the model has no outputs in its config and none could be auto-completed", "output"
        )
    tensor_backend = config.platform == "tensorrt_plan" or config.backend == "tensorrt"
    for kind, tensors in (("input", config.input), ("output", config.output)):
        names: set[str] = set()
        for index, tensor in enumerate(tensors):
            where = f"{kind}[{tensor.name or index}]"
            if not tensor.name:
                yield ModelConfigError(f"an {kind} in the config has no name", where)
                continue
            if tensor.name in names:  # pointed at by position: its name also names the first one
                yield ModelConfigError(
                    f"{kind} '{tensor.name}' is listed twice in the config", f"{kind}[{index}]"
                )
            names.add(tensor.name)
            wire = config_to_wire(model_config_pb2.DataType.Name(tensor.data_type))
            if wire not in WIRE_DATATYPES:
                yield ModelConfigError(
                    f"{kind} '{tensor.name}' has no valid data_type (e.g. TYPE_FP32)", f"{where}.data_type"
                )
            if not tensor.dims and not tensor.HasField("reshape"):
                yield ModelConfigError(
                    f"{kind} '{tensor.name}' has no dims; give at least one dimension "
                    "(use reshape: { shape: [ ] } for a scalar per batch item)",
                    f"{where}.dims",
                )
            if any(d < -1 or d == 0 for d in tensor.dims):
                yield ModelConfigError(
                    f"{kind} '{tensor.name}' has invalid dims {list(tensor.dims)}: each dimension is a "
                    "size of 1 or more, or -1 for a variable size",
                    f"{where}.dims",
                )
            if tensor.is_shape_tensor and not tensor_backend:
                yield ModelConfigError(
                    f"{kind} '{tensor.name}': is_shape_tensor is only for TensorRT models",
                    f"{where}.is_shape_tensor",
                )
            if kind == "input" and tensor.format in (1, 2) and len(tensor.dims) != 3:
                yield ModelConfigError(
                    f"input '{tensor.name}': format {model_config_pb2.ModelInput.Format.Name(tensor.format)} "
                    f"needs 3 dims, got {list(tensor.dims)}",
                    f"{where}.format",
                )


def _dynamic_batching_problems(config: Config) -> Iterator[ModelConfigError]:
    if not config.HasField("dynamic_batching"):
        return
    batching = config.dynamic_batching
    for size in batching.preferred_batch_size:
        if size <= 0 or size > config.max_batch_size:
            yield ModelConfigError(
                f"dynamic_batching preferred_batch_size {size} must be between 1 and max_batch_size "
                f"({config.max_batch_size})",
                "dynamic_batching.preferred_batch_size",
            )
    levels = batching.priority_levels
    if levels:
        if not 1 <= batching.default_priority_level <= levels:
            yield ModelConfigError(
                f"dynamic_batching default_priority_level must be in [1, {levels}] when priority_levels is "
                f"{levels}, got {batching.default_priority_level}",
                "dynamic_batching.default_priority_level",
            )
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                yield ModelConfigError(
                    f"dynamic_batching priority_queue_policy names level {level}, outside [1, {levels}]",
                    "dynamic_batching.priority_queue_policy",
                )
    if batching.preserve_ordering:
        if levels > 1:
            yield ModelConfigError(
                "dynamic_batching preserve_ordering allows only one priority level",
                "dynamic_batching.preserve_ordering",
            )
        policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
        if any(p.default_timeout_microseconds and p.timeout_action == QueuePolicy.DELAY for p in policies):
            yield ModelConfigError(
                "dynamic_batching preserve_ordering cannot be combined with a queue policy whose "
                "timeout_action is DELAY",
                "dynamic_batching.preserve_ordering",
            )


def _sequence_batching_problems(config: Config) -> Iterator[ModelConfigError]:
    if not config.HasField("sequence_batching"):
        return
    settings = config.sequence_batching
    seen: dict[int, str] = {}
    for control_input in settings.control_input:
        where = f"sequence_batching.control_input[{control_input.name}]"
        if len(control_input.control) != 1:
            yield ModelConfigError(
                f"sequence control input '{control_input.name}' must have exactly one control, "
                f"got {len(control_input.control)}",
                where,
            )
        for control in control_input.control:
            kind = Control.Kind.Name(control.kind)
            if control.kind in seen:
                yield ModelConfigError(
                    f"sequence control {kind} is given twice ('{seen[control.kind]}' and "
                    f"'{control_input.name}')",
                    where,
                )
            seen[control.kind] = control_input.name
            if control.kind == Control.CONTROL_SEQUENCE_CORRID:
                data_type = model_config_pb2.DataType.Name(control.data_type)
                if data_type not in _CORRID_TYPES:
                    yield ModelConfigError(
                        f"sequence control '{control_input.name}' ({kind}) needs data_type "
                        f"{', '.join(_CORRID_TYPES)}; got {data_type}",
                        where,
                    )
                continue
            given = [
                (field, len(values))
                for field, values in (
                    ("int32_false_true", control.int32_false_true),
                    ("fp32_false_true", control.fp32_false_true),
                    ("bool_false_true", control.bool_false_true),
                )
                if values
            ]
            if len(given) != 1 or given[0][1] != 2:
                yield ModelConfigError(
                    f"sequence control '{control_input.name}' ({kind}) needs exactly one of "
                    "int32_false_true, fp32_false_true or bool_false_true, with two values: [false, true]",
                    where,
                )
    if settings.HasField("oldest"):
        for size in settings.oldest.preferred_batch_size:
            if size <= 0 or size > config.max_batch_size:
                yield ModelConfigError(
                    f"sequence_batching oldest preferred_batch_size {size} must be between 1 and "
                    f"max_batch_size ({config.max_batch_size})",
                    "sequence_batching.oldest.preferred_batch_size",
                )
    if settings.HasField("direct") and not 0.0 <= settings.direct.minimum_slot_utilization <= 1.0:
        yield ModelConfigError(
            "sequence_batching direct minimum_slot_utilization must be within (0.0, 1.0], got "
            f"{settings.direct.minimum_slot_utilization}",
            "sequence_batching.direct.minimum_slot_utilization",
        )


def _instance_group_problems(config: Config) -> Iterator[ModelConfigError]:
    tensorrt = config.platform == "tensorrt_plan" or config.backend == "tensorrt"
    for index, group in enumerate(config.instance_group):
        where = f"instance_group[{index}]"
        label = f"instance_group {group.name or index}"
        if group.kind in (Group.KIND_CPU, Group.KIND_MODEL) and group.gpus:
            yield ModelConfigError(
                f"{label} has kind {Group.Kind.Name(group.kind)} but lists gpus {list(group.gpus)}; "
                "remove gpus or use KIND_GPU",
                f"{where}.gpus",
            )
        if group.profile and not tensorrt:
            yield ModelConfigError(f"{label}: profile is only for TensorRT models", f"{where}.profile")
    total = sum(group.count * max(1, len(group.gpus)) for group in config.instance_group)
    if total > MAX_MODEL_INSTANCES:
        yield ModelConfigError(
            f"instance_group asks for {total} instances in all; "
            f"a model may have at most {MAX_MODEL_INSTANCES}",
            "instance_group",
        )


def _model_metrics_problems(config: Config) -> Iterator[ModelConfigError]:
    """Histogram buckets as Prometheus takes them: finite and strictly increasing. (A family that
    takes no options is only warned about, at load, as Triton does.)"""
    for index, control in enumerate(config.model_metrics.metric_control):
        if control.metric_identifier.family != FIRST_RESPONSE_FAMILY:
            continue
        buckets = list(control.histogram_options.buckets)
        increasing = all(a < b for a, b in itertools.pairwise(buckets))
        if not increasing or not all(math.isfinite(b) for b in buckets):
            yield ModelConfigError(
                f"model_metrics: the buckets of {FIRST_RESPONSE_FAMILY} must be finite and strictly "
                f"increasing, got {buckets}",
                f"model_metrics.metric_control[{index}].histogram_options.buckets",
            )


def _ragged_problems(config: Config) -> Iterator[ModelConfigError]:
    """allow_ragged_batch, batch_input and batch_output (``scheduling.ragged`` reads them). A Python
    model gets each request whole and ignores them, as Triton's Python backend does."""
    if config.backend == "python":
        return
    try:
        ragged = RaggedBatching.from_config(config)
    except ModelConfigError as problem:
        yield problem
        return
    if ragged is not None and config.HasField("sequence_batching"):
        yield ModelConfigError(
            "allow_ragged_batch, batch_input and batch_output work with the dynamic batcher or none "
            "here, not with sequence_batching",
            "sequence_batching",
        )
