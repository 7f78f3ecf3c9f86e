"""The OpenVINO backend's config parameters, read and checked without importing OpenVINO.

Triton's openvino_backend names, as its README lists them: PERFORMANCE_HINT, NUM_STREAMS,
INFERENCE_NUM_THREADS, COMPILATION_NUM_THREADS, HINT_BF16, CPU_EXTENSION_PATH, TARGET_DEVICE,
SKIP_OV_DYNAMIC_BATCHSIZE, ENABLE_BATCH_PADDING, RESHAPE_IO_LAYERS. Two more, trt's own, each
OpenVINO's property of that name: INFERENCE_PRECISION_HINT (f32, f16 or bf16), which ``trt analyze``
sets for FP16 on CPUs that compute in it, and ENABLE_CPU_PINNING (YES/NO; OpenVINO pins its threads
to cores by default, which can stall them where other processes share those cores).

Where trt differs from Triton's backend, and why:
- A batching model keeps a variable batch dimension, so the dynamic batcher's batches of any size up
  to ``max_batch_size`` run as they are. Triton's backend fixes the batch at ``max_batch_size`` and
  refuses smaller batches unless ENABLE_BATCH_PADDING pads them. Here SKIP_OV_DYNAMIC_BATCHSIZE=YES
  asks for that fixed batch (for models that cannot be reshaped to a variable one), and only then does
  ENABLE_BATCH_PADDING matter.
- NUM_STREAMS, when neither it nor PERFORMANCE_HINT is given, is the number of instances: each
  instance is one infer request on one compiled model, and a stream runs one request at a time, so
  instances beyond the streams would only queue inside OpenVINO.
- CPU_EXTENSION_PATH must name a file inside the model's folder: a config sent with a load request
  could otherwise load any shared library on the host.
- Yes/no parameters take YES/TRUE/ON/1 and NO/FALSE/OFF/0 and refuse anything else (Triton reads
  anything but YES as no).
- COMPILATION_NUM_THREADS is passed only to devices that accept it (OpenVINO 2026's CPU plugin does
  not); elsewhere it is logged and ignored, so configs written for Triton keep loading.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trt.protos import model_config_pb2
from trt.server.backends.model_signature import parameter, yes
from trt.server.core.errors import ModelConfigError

HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
PRECISIONS = {"f32": "f32", "fp32": "f32", "f16": "f16", "fp16": "f16", "bf16": "bf16"}
# Devices that stand for others: OpenVINO lists only physical ones as available.
VIRTUAL_DEVICES = ("AUTO", "MULTI", "HETERO", "BATCH")


@dataclass(frozen=True)
class OpenVinoSettings:
    """What a model's parameters ask of OpenVINO."""

    properties: dict[str, str] = field(default_factory=dict)  # passed to compile_model
    target_device: str = "CPU"
    fixed_batch: bool = False  # SKIP_OV_DYNAMIC_BATCHSIZE: compiled for max_batch_size exactly
    batch_padding: bool = False  # ENABLE_BATCH_PADDING: smaller batches padded up to it
    reshape_io_layers: bool = False  # RESHAPE_IO_LAYERS: inputs take the config's dims
    cpu_extension: str = ""  # CPU_EXTENSION_PATH, relative to the model folder


def _count(config: model_config_pb2.ModelConfig, key: str, allow: tuple[str, ...] = ()) -> str:
    value = parameter(config, key).strip()
    if value.upper() in allow:
        return value.upper()
    if not (value.isascii() and value.isdigit()) or len(value) > 6:
        choices = f"{'/'.join(allow)} or " if allow else ""
        raise ModelConfigError(
            f"parameter {key} must be {choices}a non-negative whole number, got '{value}'",
            f"parameters[{key}]",
        )
    return str(int(value))


def cpu_instances(config: model_config_pb2.ModelConfig) -> int:
    """How many instances the config's groups make (each group's count, at least 1)."""
    return sum(max(group.count, 1) for group in config.instance_group) or 1


def read_settings(config: model_config_pb2.ModelConfig) -> OpenVinoSettings:
    """Every OpenVINO parameter of ``config``, checked; raises ModelConfigError naming the parameter."""
    properties: dict[str, str] = {}
    hint = parameter(config, "PERFORMANCE_HINT").strip().upper()
    if hint:
        if hint not in HINTS:
            raise ModelConfigError(
                f"parameter PERFORMANCE_HINT must be one of {', '.join(HINTS)}, got '{hint}'",
                "parameters[PERFORMANCE_HINT]",
            )
        properties["PERFORMANCE_HINT"] = hint
    if parameter(config, "NUM_STREAMS"):
        properties["NUM_STREAMS"] = _count(config, "NUM_STREAMS", ("AUTO", "NUMA"))
    elif not hint:
        properties["NUM_STREAMS"] = str(cpu_instances(config))
    for key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
        if parameter(config, key):
            properties[key] = _count(config, key)
    if parameter(config, "ENABLE_CPU_PINNING"):
        pinned = yes(parameter(config, "ENABLE_CPU_PINNING"), "ENABLE_CPU_PINNING")
        properties["ENABLE_CPU_PINNING"] = "YES" if pinned else "NO"
    precision = ""
    if parameter(config, "HINT_BF16"):
        if parameter(config, "HINT_BF16").strip().upper() != "YES":
            raise ModelConfigError(
                f"parameter HINT_BF16 must be YES, got '{parameter(config, 'HINT_BF16')}'",
                "parameters[HINT_BF16]",
            )
        precision = "bf16"
    asked = parameter(config, "INFERENCE_PRECISION_HINT").strip().lower()
    if asked:
        if asked not in PRECISIONS:
            raise ModelConfigError(
                f"parameter INFERENCE_PRECISION_HINT must be f32, f16 or bf16, got '{asked}'",
                "parameters[INFERENCE_PRECISION_HINT]",
            )
        if precision and PRECISIONS[asked] != precision:
            raise ModelConfigError(
                "parameters HINT_BF16 and INFERENCE_PRECISION_HINT disagree; give one of them",
                "parameters[INFERENCE_PRECISION_HINT]",
            )
        precision = PRECISIONS[asked]
    if precision:
        properties["INFERENCE_PRECISION_HINT"] = precision
    device = parameter(config, "TARGET_DEVICE").strip().upper() or "CPU"
    extension = parameter(config, "CPU_EXTENSION_PATH").strip()
    return OpenVinoSettings(
        properties=properties,
        target_device=device,
        fixed_batch=yes(parameter(config, "SKIP_OV_DYNAMIC_BATCHSIZE"), "SKIP_OV_DYNAMIC_BATCHSIZE"),
        batch_padding=yes(parameter(config, "ENABLE_BATCH_PADDING"), "ENABLE_BATCH_PADDING"),
        reshape_io_layers=yes(parameter(config, "RESHAPE_IO_LAYERS"), "RESHAPE_IO_LAYERS"),
        cpu_extension=extension,
    )


def check_device(device: str, available: list[str]) -> None:
    """TARGET_DEVICE must be a device OpenVINO sees here (or a virtual one over them)."""
    physical = device.split(":", 1)[-1] if device.split(":", 1)[0] in VIRTUAL_DEVICES else device
    wanted = [d.strip() for d in physical.replace(",", " ").split() if d.strip()]
    if device in VIRTUAL_DEVICES:
        return
    missing = [d for d in wanted if d not in available and d.split(".")[0] not in available]
    if missing or not wanted:
        raise ModelConfigError(
            f"parameter TARGET_DEVICE '{device}': OpenVINO sees no device {', '.join(missing) or device} "
            f"here; available: {', '.join(available) or 'none'}",
            "parameters[TARGET_DEVICE]",
        )
