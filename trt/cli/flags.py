"""Parsers for tritonserver-style flags (``--flag=true|false``, ``--backend-config=b,k=v``,
``--trace-config``, ``--cache-config``, ``--metrics-config``, ``--rate-limit-resource``): the command
line's own forms, turned into the core's options. A parser's ValueError is the usage error the command
prints."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import typer

from trt.server.core.errors import InvalidArgument, Unsupported
from trt.server.core.extensions.latency_distributions import LatencyMetricsSettings
from trt.server.core.extensions.tracing import TraceSettings, with_setting

_TRUE = {"true", "1", "yes", "on", "t", "y"}
_FALSE = {"false", "0", "no", "off", "f", "n"}


def parse_bool(value: str, flag: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise typer.BadParameter(f"{flag} takes true or false, got '{value}'")


def parse_backend_config(values: list[str]) -> dict[str, dict[str, str]]:
    """``--backend-config=onnxruntime,k=v`` (or ``k=v`` for every backend, keyed by "")."""
    result: dict[str, dict[str, str]] = {}
    for value in values:
        backend, _, setting = value.partition(",") if "," in value else ("", "", value)
        key, sep, setting_value = setting.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--backend-config expects [BACKEND,]KEY=VALUE, got '{value}'")
        result.setdefault(backend, {})[key] = setting_value
    return result


_FLAG_KEYS = {
    "level": "trace_level",
    "rate": "trace_rate",
    "count": "trace_count",
    "mode": "trace_mode",
    "file": "trace_file",
    "log-frequency": "log_frequency",
}


def parse_trace_config(values: list[str]) -> TraceSettings:
    """tritonserver's ``--trace-config [triton,]<setting>=<value>`` flags (``level`` may repeat);
    ValueError says what is wrong."""
    settings, levels = TraceSettings(), []
    for text in values:
        mode, _, assignment = text.rpartition(",")
        name, equals, value = assignment.partition("=")
        if not equals or mode not in ("", "triton", "opentelemetry"):
            raise ValueError(f"--trace-config takes [triton,]<setting>=<value>, got '{text}'")
        if mode == "opentelemetry" or (name == "mode" and value != "triton"):
            raise ValueError("--trace-config: only the triton trace mode is supported")
        if name not in _FLAG_KEYS:
            raise ValueError(f"--trace-config: unknown setting '{name}' (one of {', '.join(_FLAG_KEYS)})")
        if name == "level":
            levels.append(value)
            continue
        try:
            settings = with_setting(settings, _FLAG_KEYS[name], value)
        except (InvalidArgument, Unsupported) as exc:
            raise ValueError(f"--trace-config: {exc.message}") from None
    if levels:
        try:
            settings = with_setting(
                settings, "trace_level", [level for level in levels if level != "OFF"] or ["OFF"]
            )
        except (InvalidArgument, Unsupported) as exc:
            raise ValueError(f"--trace-config: {exc.message}") from None
    return settings


def parse_cache_config(values: list[str]) -> int | None:
    """``--cache-config local,size=BYTES`` (Triton's form) -> the byte budget, or None for no cache."""
    size: int | None = None
    for value in values:
        kind, _, setting = value.partition(",")
        key, _, number = setting.partition("=")
        if kind != "local" or key != "size" or not (number.isascii() and number.isdigit()):
            raise ValueError(f"--cache-config expects local,size=BYTES, got '{value}'")
        size = int(number)
    return size


_METRICS_SWITCHES = {
    "counter_latencies": "counters",
    "summary_latencies": "summaries",
    "histogram_latencies": "histograms",
}


def parse_metrics_config(values: list[str]) -> LatencyMetricsSettings:
    """tritonserver's ``--metrics-config <setting>=<value>`` flags. Triton skips what it cannot read;
    here a malformed value is an error, so that a summary asked for is never silently missing. A
    setting Triton does not know either is warned about and left alone."""
    settings: dict[str, object] = {}
    for text in values:
        setting, equals, value = text.partition("=")
        if not equals or not setting or not value or "," in setting:
            raise ValueError(f"--metrics-config option format is <setting>=<value>. Got {text}")
        if setting in _METRICS_SWITCHES:
            if value not in ("true", "false"):  # Triton compares with these two words
                raise ValueError(f"--metrics-config {setting} takes true or false, got '{value}'")
            settings[_METRICS_SWITCHES[setting]] = value == "true"
        elif setting == "summary_quantiles":
            settings["quantiles"] = _quantiles(value)
        else:
            logging.getLogger("trt.serve").warning("--metrics-config: unknown setting '%s' ignored", setting)
    return LatencyMetricsSettings(**settings)  # type: ignore[arg-type]


def _quantiles(value: str) -> tuple[tuple[float, float], ...]:
    """``0.5:0.05,0.9:0.01``: each quantile and its allowed error, both between 0 and 1."""
    pairs = []
    for pair in value.split(","):
        quantile, colon, error = pair.strip().partition(":")
        try:
            q, e = float(quantile), float(error)
        except ValueError:
            q = e = math.nan
        if not colon or not (0.0 <= q <= 1.0 and 0.0 <= e <= 1.0):
            raise ValueError(
                f"--metrics-config summary_quantiles takes <quantile>:<error>,... with both between 0 "
                f"and 1, got '{pair}'"
            )
        pairs.append((q, e))
    return tuple(pairs)


def parse_model_config_name(name: str) -> str:
    """``--model-config-name``: a file name, without spaces (Triton's rule) or a way out of ``configs/``."""
    if any(c.isspace() for c in name) or "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"--model-config-name takes a name without spaces or slashes, got {name!r}")
    return name


def parse_rate_limit_resources(values: Sequence[str]) -> dict[str, int]:
    """``NAME:COUNT[:DEVICE]`` -> counts by name (the device part applies to GPUs; none here)."""
    counts: dict[str, int] = {}
    for value in values:
        parts = value.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not (parts[1].isascii() and parts[1].isdigit()):
            raise ValueError(f"--rate-limit-resource expects NAME:COUNT[:DEVICE], got '{value}'")
        counts[parts[0]] = int(parts[1])
    return counts


# tritonserver flags a launch script may carry that have no counterpart here, and why: taken with a
# warning, so that the script still starts the server. Any other unknown flag is an error.
IGNORED_TRITON_FLAGS = {
    "--pinned-memory-pool-byte-size": "tensors stay in pageable memory",
    "--cuda-memory-pool-byte-size": "CUDA memory is the backends' own (ONNX Runtime, PyTorch, TensorRT)",
    "--cuda-virtual-address-size": "implicit states are held in host memory",
    "--min-supported-compute-capability": "every GPU the backends can use is used",
    "--enable-peer-access": "GPU peer access is the backends' own",
    "--model-load-gpu-limit": "loads are not refused by GPU memory use",
    "--host-policy": "instances are not bound to NUMA nodes or cores",
    "--backend-directory": "backends are Python modules of trt",
    "--repoagent-directory": "the checksum repository agent is built in; trt loads no others",
    "--cache-directory": "the local response cache is built in (--cache-config)",
    "--buffer-manager-thread-count": "no buffer manager threads",
    "--http-thread-count": "HTTP runs on the event loop",
    "--grpc-infer-thread-count": "gRPC runs on the event loop",
    "--grpc-infer-allocation-pool-size": "a call's state is a few Python objects, made per call",
    "--metrics-interval-ms": "metrics are read when Prometheus scrapes",
}

# tritonserver's deprecated flags (it still takes them, with a warning), each as the flag that replaced
# it: (that flag, its value with ``{}`` for the old flag's). The old ones come first, so that the new
# flag, where both are given, decides (Triton's "Overriding deprecated ..."); trace levels add up.
DEPRECATED_TRITON_FLAGS = {
    "--trace-file": ("--trace-config", "triton,file={}"),
    "--trace-level": ("--trace-config", "level={}"),
    "--trace-rate": ("--trace-config", "rate={}"),
    "--trace-count": ("--trace-config", "count={}"),
    "--trace-log-frequency": ("--trace-config", "triton,log-frequency={}"),
    "--response-cache-byte-size": ("--cache-config", "local,size={}"),
}


@dataclass(frozen=True)
class TritonOnlyFlags:
    """What ``triton_only_flags`` made of the flags trt serve has no option for."""

    ignored: list[tuple[str, str]]  # (flag, why it has no effect)
    replaced: list[tuple[str, str, str]]  # (deprecated flag, the flag it became, that flag's value)

    def values_of(self, flag: str) -> list[str]:
        return [value for _, target, value in self.replaced if target == flag]


def triton_only_flags(args: list[str]) -> TritonOnlyFlags:
    """The tritonserver flags among ``args`` that trt takes without effect or as the flags that
    replaced them; any other is an error."""
    ignored, replaced, index = [], [], 0
    while index < len(args):
        flag, equals, value = args[index].partition("=")
        if flag not in IGNORED_TRITON_FLAGS and flag not in DEPRECATED_TRITON_FLAGS:
            raise typer.BadParameter(f"no such option: {args[index]}")
        if not equals and index + 1 < len(args) and not args[index + 1].startswith("--"):
            index += 1  # its value came as the next argument
            value = args[index]
        if flag in IGNORED_TRITON_FLAGS:
            ignored.append((flag, IGNORED_TRITON_FLAGS[flag]))
        else:
            target, form = DEPRECATED_TRITON_FLAGS[flag]
            replaced.append((flag, target, form.format(value)))
        index += 1
    return TritonOnlyFlags(ignored, replaced)
