"""Reduced precision for OpenVINO models, as OpenVINO offers it on the CPU.

INT8: NNCF's post-training quantization of the IR (``nncf.quantize``), calibrated on sample inputs;
the variant is a new ``model.xml``/``model.bin`` pair. Needs ``pip install nncf``. FP16: no new file,
the compile-time hint ``INFERENCE_PRECISION_HINT=f16`` (trt's OpenVINO parameter of that name), and
only on CPUs whose OpenVINO reports FP16 among its optimization capabilities: elsewhere OpenVINO
quietly computes in FP32, so the hint would measure nothing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from trt.protos import model_config_pb2

# What the FP16 candidate adds to the config.
FP16_PARAMETER = ("INFERENCE_PRECISION_HINT", "f16")
CALIBRATION_SAMPLES = 32


def _core() -> Any:
    import openvino

    return openvino.Core()


def available(device: str = "CPU") -> tuple[str, ...]:
    """The precisions this machine can make and run for OpenVINO models."""
    try:
        capabilities = list(_core().get_property(device, "OPTIMIZATION_CAPABILITIES"))
    except Exception:  # OpenVINO missing, or no such device
        return ("fp32",)
    found = ["fp32"]
    if "FP16" in capabilities:
        found.append("fp16")
    if "INT8" in capabilities and importlib.util.find_spec("nncf") is not None:
        found.append("int8")
    return tuple(found)


def unavailable_reason(precision: str, device: str = "CPU") -> str:
    """Why ``available`` leaves ``precision`` out here."""
    try:
        capabilities = list(_core().get_property(device, "OPTIMIZATION_CAPABILITIES"))
    except Exception as exc:
        return f"OpenVINO cannot tell what {device} computes in: {exc}"
    named = precision.upper()
    if named not in capabilities:
        return (
            f"OpenVINO's {device} here does not compute in {named} (capabilities: {', '.join(capabilities)})"
        )
    if precision == "int8":
        return "INT8 for OpenVINO models is made by NNCF: pip install nncf"
    return f"no {precision} for OpenVINO models"


_LONG_TYPE_NAMES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def _type_name(value: Any) -> str:
    """An OpenVINO element type by its short name ("f16"), whether the release gives the hint as a
    ``Type`` (whose ``str`` is "<Type: 'float16'>") or as a string."""
    name = getattr(value, "get_type_name", None)
    text = str(name()) if callable(name) else str(value)
    return _LONG_TYPE_NAMES.get(text, text)


@contextlib.contextmanager
def _quiet_nncf() -> Iterator[Any]:
    """NNCF, imported without its telemetry (it would send usage data to Intel from the user's machine
    unless told this is a CI run) and run without its progress bars on standard output (where
    ``trt analyze --json`` prints its summary)."""
    previous = os.environ.get("CI")
    os.environ["CI"] = "true"
    try:
        import nncf
    finally:
        if previous is None:
            os.environ.pop("CI", None)
        else:
            os.environ["CI"] = previous
    nncf.set_log_level(logging.ERROR)
    with contextlib.redirect_stdout(io.StringIO()):
        yield nncf


def make_int8_variant(source: Path, destination: Path, calibration: list[dict[str, np.ndarray]]) -> None:
    """``source`` (an IR) quantized to INT8 by NNCF, written as an IR at ``destination``."""
    import openvino

    model = _core().read_model(str(source))
    with _quiet_nncf() as nncf:
        quantized = nncf.quantize(model, nncf.Dataset(calibration), subset_size=len(calibration))
    destination.parent.mkdir(parents=True, exist_ok=True)
    openvino.save_model(quantized, str(destination), compress_to_fp16=False)


def run(
    path: Path,
    config: model_config_pb2.ModelConfig,
    inputs: dict[str, np.ndarray],
    properties: dict[str, str] | None = None,
) -> dict[str, np.ndarray]:
    """Outputs by config name; with ``properties`` (the FP16 hint) the compiled model must really use
    them, or a ValueError says it does not."""
    core = _core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU", properties or {})
    for key, wanted in (properties or {}).items():
        if key == "INFERENCE_PRECISION_HINT" and (runs := _type_name(compiled.get_property(key))) != wanted:
            raise ValueError(f"this CPU runs {runs}, not {wanted}")
    request = compiled.create_infer_request()
    request.infer({name: inputs[name] for name in inputs})
    return {t.name: np.array(request.get_tensor(t.name).data) for t in config.output}
