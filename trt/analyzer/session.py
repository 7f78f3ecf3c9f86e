"""One analysis: the model's variants deployed on a server, each (candidate, concurrency) measured once
by the ``trt perf`` engine, remembered in a checkpoint, within a time budget."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trt.analyzer.deployment import Deployment, ScratchServer
from trt.analyzer.errors import AnalyzeError
from trt.analyzer.goals import Measurement
from trt.analyzer.openvino_precision import FP16_PARAMETER
from trt.analyzer.precision import PrecisionCheck
from trt.analyzer.space import OPENVINO, TENSORRT_FP16, THREAD_PARAMETER, Candidate
from trt.perf.errors import PerfError
from trt.perf.options import PerfOptions, Protocol
from trt.perf.profiler import SilentProgress, run_profile
from trt.protos import model_config_pb2
from trt.server.core.models.config import config_from_json, config_to_dict

logger = logging.getLogger("trt.analyze")


class _QuietProgress(SilentProgress):
    """An unsettled level is recorded as ``stable: false`` in the measurement, not printed mid-sweep."""

    def warn(self, message: str) -> None:
        logger.debug("%s", message)


class BudgetExhausted(Exception):
    """``--max-duration`` is spent: the search stops and reports what it has."""


class CandidateFailed(Exception):
    """This candidate does not load or cannot be measured; the search goes on without it."""


@dataclass(frozen=True)
class MeasureSettings:
    protocol: Protocol = Protocol.HTTP
    measurement_interval_ms: int = 1000
    stability_percentage: float = 10.0
    max_trials: int = 6
    warmup_ms: int = 500


@dataclass
class Checkpoint:
    """Measurements on disk, keyed by what produced them, so an interrupted sweep continues."""

    path: Path
    signature: str
    measurements: dict[tuple[str, int], Measurement] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path, signature: str, fresh: bool) -> Checkpoint:
        checkpoint = cls(path, signature)
        if fresh or not path.exists():
            return checkpoint
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            logger.warning("checkpoint %s unreadable; starting afresh", path)
            return checkpoint
        if document.get("signature") != signature:
            logger.info("checkpoint %s is for other settings; starting afresh", path)
            return checkpoint
        for row in document.get("measurements", []):
            measurement = Measurement.from_dict(row)
            checkpoint.measurements[(measurement.candidate_key, measurement.concurrency)] = measurement
        return checkpoint

    def add(self, measurement: Measurement) -> None:
        self.measurements[(measurement.candidate_key, measurement.concurrency)] = measurement
        self.path.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "signature": self.signature,
            "measurements": [m.as_dict() for m in self.measurements.values()],
        }
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(document, indent=1))
        temporary.replace(self.path)


def signature_of(model: str, model_file: Path | None, settings: MeasureSettings, url: str) -> str:
    """What measurements depend on: the model file, the server, and how each level is measured."""
    digest = hashlib.sha256()
    digest.update(f"{model}|{url}|{settings}".encode())
    if model_file is not None and model_file.exists():
        stat = model_file.stat()
        digest.update(f"{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


class AnalysisSession:
    """Deploys candidates and measures them; every search goes through ``measure``."""

    def __init__(
        self,
        model: str,
        deployment: Deployment,
        base_config: model_config_pb2.ModelConfig,
        precisions: dict[str, PrecisionCheck],
        settings: MeasureSettings,
        checkpoint: Checkpoint,
        max_duration_s: float | None,
        scratch_names: dict[str, str],
        on_measurement: Callable[[Candidate, Measurement, bool], None] | None = None,
    ) -> None:
        self.model = model
        self.deployment = deployment
        self.base_config = base_config
        self.precisions = precisions
        self.settings = settings
        self.checkpoint = checkpoint
        self.max_duration_s = max_duration_s
        self.scratch_names = scratch_names  # precision -> model name on the server
        self.on_measurement = on_measurement
        self.started = time.monotonic()
        self.candidates: dict[str, Candidate] = {}
        self.used: dict[tuple[str, int], Measurement] = {}  # what this run consulted, in order
        self.measured_now = 0
        self.budget_hit = False
        self._loaded: tuple[str, str] | None = None  # (server model name, candidate key)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    # -- configs -----------------------------------------------------------------------------------

    def config_for(self, candidate: Candidate, name: str | None = None) -> model_config_pb2.ModelConfig:
        """The base config with the candidate's settings: what is loaded, and what is recommended."""
        config = model_config_pb2.ModelConfig()
        config.CopyFrom(self.base_config)
        config.name = name or self.model
        if self.base_config.max_batch_size > 0:
            config.max_batch_size = candidate.max_batch_size
        if candidate.dynamic_batching:
            config.dynamic_batching.Clear()
            config.dynamic_batching.SetInParent()
            config.dynamic_batching.max_queue_delay_microseconds = candidate.max_queue_delay_us
            config.dynamic_batching.preferred_batch_size.extend(candidate.preferred_batch_sizes)
        elif config.WhichOneof("scheduling_choice") == "dynamic_batching":
            config.ClearField("dynamic_batching")
        del config.instance_group[:]
        group = config.instance_group.add()
        group.count = candidate.instances
        group.kind = model_config_pb2.ModelInstanceGroup.Kind.Value(candidate.kind)
        accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
        if candidate.precision == TENSORRT_FP16:
            del accelerators[:]
            accelerator = accelerators.add()
            accelerator.name = "tensorrt"
            accelerator.parameters["precision_mode"] = "FP16"
        parameter = THREAD_PARAMETER.get(config.platform or config.backend)
        if parameter:
            if candidate.threads:
                config.parameters[parameter].string_value = str(candidate.threads)
            elif parameter in config.parameters:
                del config.parameters[parameter]
        if (config.platform or config.backend) == OPENVINO:
            _set_openvino_knobs(config, candidate)
        return config

    def _deploy(self, candidate: Candidate) -> str:
        name = self.scratch_names[candidate.precision]
        if self._loaded == (name, candidate.key):
            return name
        if self._loaded is not None and self._loaded[0] != name:
            self.deployment.unload(self._loaded[0])
        self._loaded = None
        self.deployment.load(name, config_to_dict(self.config_for(candidate, name)))
        self._loaded = (name, candidate.key)
        return name

    # -- measuring ---------------------------------------------------------------------------------

    def cached(self, candidate: Candidate, concurrency: int) -> Measurement | None:
        return self.checkpoint.measurements.get((candidate.key, concurrency))

    def measure(self, candidate: Candidate, concurrency: int) -> Measurement:
        """``candidate`` at ``concurrency``: from the checkpoint, or deployed and measured now."""
        self.candidates[candidate.key] = candidate
        found = self.cached(candidate, concurrency)
        if found is not None:
            self.used[(candidate.key, concurrency)] = found
            if self.on_measurement:
                self.on_measurement(candidate, found, True)
            return found
        if self.max_duration_s is not None and self.elapsed_s >= self.max_duration_s:
            self.budget_hit = True
            raise BudgetExhausted
        began = time.monotonic()
        try:
            name = self._deploy(candidate)
        except AnalyzeError as exc:
            raise CandidateFailed(f"does not load: {exc}") from None
        options = PerfOptions(
            model=name,
            url=self.deployment.http_url
            if self.settings.protocol is Protocol.HTTP
            else self.deployment.grpc_url,
            protocol=self.settings.protocol,
            concurrency=(concurrency,),
            measurement_interval_ms=self.settings.measurement_interval_ms,
            stability_percentage=self.settings.stability_percentage,
            max_trials=self.settings.max_trials,
            warmup_ms=self.settings.warmup_ms,
            processes=1,
        )
        try:
            report = run_profile(options, _QuietProgress())
        except PerfError as exc:
            raise CandidateFailed(f"measuring at concurrency {concurrency} failed: {exc}") from None
        level = report.results[0]
        latency = level.latency
        server = level.server
        queue = compute = batch = math.nan
        if server is not None:
            queue = server.queue_us
            compute = server.compute_input_us + server.compute_infer_us + server.compute_output_us
            executions = sum(server.batch_sizes.values())
            if executions:
                batch = sum(size * count for size, count in server.batch_sizes.items()) / executions
        measurement = Measurement(
            candidate_key=candidate.key,
            concurrency=concurrency,
            throughput=level.throughput,
            latency_us={
                "avg": latency.avg_us,
                **{f"p{p}": float(v) for p, v in latency.percentiles.items() if p in (50, 90, 95, 99)},
            },
            errors=level.error_count,
            memory_bytes=self.deployment.memory_bytes(),
            gpu_memory_bytes=self.deployment.gpu_memory_bytes() if candidate.kind == "KIND_GPU" else None,
            stable=level.stable,
            seconds=time.monotonic() - began,
            server_queue_us=queue,
            server_compute_us=compute,
            average_batch=batch,
        )
        self.measured_now += 1
        self.checkpoint.add(measurement)
        self.used[(candidate.key, concurrency)] = measurement
        if self.on_measurement:
            self.on_measurement(candidate, measurement, False)
        return measurement

    def close(self) -> None:
        self.deployment.close()


def _set_openvino_knobs(config: model_config_pb2.ModelConfig, candidate: Candidate) -> None:
    """Streams, hint and the FP16 hint as OpenVINO parameters; a knob the candidate leaves at its
    default is taken out of the config, as threads are."""
    key, value = FP16_PARAMETER
    wanted = {
        "NUM_STREAMS": str(candidate.streams) if candidate.streams else "",
        "PERFORMANCE_HINT": candidate.hint,
        key: value if candidate.precision == "fp16" else "",
    }
    for name, setting in wanted.items():
        if setting:
            config.parameters[name].string_value = setting
        elif name in config.parameters:
            del config.parameters[name]


def effective_config(deployment: Deployment, name: str) -> model_config_pb2.ModelConfig:
    """The config the server runs ``name`` with, after auto-complete: what candidates start from."""
    document: Any = deployment.model_config(name)
    return config_from_json(json.dumps(document))


def model_file_of(model_dir: Path, config: model_config_pb2.ModelConfig) -> Path | None:
    """The newest version's model file, where the model has one (ensembles and Python models may not)."""
    versions = sorted(
        (int(p.name), p)
        for p in model_dir.iterdir()
        if p.is_dir() and p.name.isascii() and p.name.isdigit() and p.name[0] != "0"
    )
    if not versions:
        return None
    default = {
        "onnxruntime_onnx": "model.onnx",
        "pytorch_libtorch": "model.pt",
        "tensorrt_plan": "model.plan",
        "openvino": "model.xml",  # OpenVINO has no platform: keyed by backend
    }.get(config.platform or config.backend, "")
    filename = config.default_model_filename or default
    if not filename:
        return None
    candidate = versions[-1][1] / filename
    return candidate if candidate.is_file() else None


@contextlib.contextmanager
def scratch_server() -> Any:
    server = ScratchServer()
    try:
        yield server
    finally:
        server.close()
