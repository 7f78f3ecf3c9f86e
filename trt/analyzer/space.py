"""The search space: every serving configuration ``trt analyze`` may measure, built from the model's
config and the machine unless the user narrows a dimension."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from trt.protos import model_config_pb2

# Config parameter that sets a backend's intra-op thread pool, by platform (OpenVINO, which has none,
# by backend name); Triton's spellings.
THREAD_PARAMETER = {
    "onnxruntime_onnx": "intra_op_thread_count",
    "pytorch_libtorch": "INTRA_OP_THREAD_COUNT",
    "openvino": "INFERENCE_NUM_THREADS",
    "tensorflow_savedmodel": "TF_NUM_INTRA_THREADS",
    "tensorflow_graphdef": "TF_NUM_INTRA_THREADS",
}
# Where the thread count is for the whole compiled model, shared by its instances, not per instance.
SHARED_THREADS = ("openvino",)
# OpenVINO's own knobs: streams (0 = one per instance, trt's default) and the performance hint.
OPENVINO = "openvino"
HINTS = ("", "LATENCY", "THROUGHPUT")
PRECISIONS = ("fp32", "fp16", "int8", "trt_fp16")
# Served from the FP32 file through ONNX Runtime's TensorRT execution provider in FP16 (GPU only).
TENSORRT_FP16 = "trt_fp16"


@dataclass(frozen=True, order=True)
class Candidate:
    """One serving configuration. ``threads`` 0 leaves the server's default (cores / instances)."""

    precision: str = "fp32"
    max_batch_size: int = 0
    dynamic_batching: bool = False
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    instances: int = 1
    kind: str = "KIND_CPU"
    threads: int = 0
    streams: int = 0  # OpenVINO's NUM_STREAMS; 0 leaves the backend's default
    hint: str = ""  # OpenVINO's PERFORMANCE_HINT; "" sets none

    @property
    def key(self) -> str:
        """Stable identity for checkpoints and reports."""
        batching = (
            f"db{self.max_batch_size}d{self.max_queue_delay_us}"
            + ("p" + "-".join(map(str, self.preferred_batch_sizes)) if self.preferred_batch_sizes else "")
            if self.dynamic_batching
            else f"nb{self.max_batch_size}"
        )
        kind = "gpu" if self.kind == "KIND_GPU" else "cpu"
        knobs = (f"_s{self.streams}" if self.streams else "") + (f"_{self.hint.lower()}" if self.hint else "")
        return f"{self.precision}_{batching}_{kind}x{self.instances}_t{self.threads}{knobs}"

    @property
    def label(self) -> str:
        """What a person reads in a table: only what differs from plain serving."""
        parts = [self.precision]
        if self.dynamic_batching:
            text = f"batch<={self.max_batch_size} delay {self.max_queue_delay_us}us"
            if self.preferred_batch_sizes:
                text += f" pref {','.join(map(str, self.preferred_batch_sizes))}"
            parts.append(text)
        else:
            parts.append("no batching")
        parts.append(f"{self.instances}x{'GPU' if self.kind == 'KIND_GPU' else 'CPU'}")
        if self.threads:
            parts.append(f"{self.threads} thread{'s' if self.threads > 1 else ''}")
        if self.streams:
            parts.append(f"{self.streams} stream{'s' if self.streams > 1 else ''}")
        if self.hint:
            parts.append(self.hint.lower())
        return ", ".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "precision": self.precision,
            "max_batch_size": self.max_batch_size,
            "dynamic_batching": self.dynamic_batching,
            "max_queue_delay_us": self.max_queue_delay_us,
            "preferred_batch_sizes": list(self.preferred_batch_sizes),
            "instances": self.instances,
            "kind": self.kind,
            "threads": self.threads,
            "streams": self.streams,
            "hint": self.hint,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Candidate:
        return cls(
            precision=str(data["precision"]),
            max_batch_size=int(data["max_batch_size"]),  # type: ignore[call-overload]
            dynamic_batching=bool(data["dynamic_batching"]),
            max_queue_delay_us=int(data["max_queue_delay_us"]),  # type: ignore[call-overload]
            preferred_batch_sizes=tuple(data["preferred_batch_sizes"]),  # type: ignore[arg-type]
            instances=int(data["instances"]),  # type: ignore[call-overload]
            kind=str(data["kind"]),
            threads=int(data["threads"]),  # type: ignore[call-overload]
            streams=int(data.get("streams", 0)),  # type: ignore[call-overload]
            hint=str(data.get("hint", "")),
        )


@dataclass(frozen=True)
class SpaceLimits:
    """What the user fixed or narrowed; None lets the model and the machine decide."""

    max_batch_sizes: tuple[int, ...] | None = None
    queue_delays_us: tuple[int, ...] | None = None
    preferred_batch_sizes: tuple[tuple[int, ...], ...] | None = None
    instances: tuple[int, ...] | None = None
    kinds: tuple[str, ...] | None = None
    precisions: tuple[str, ...] | None = None
    threads: tuple[int, ...] | None = None
    dynamic_batching: tuple[bool, ...] | None = None
    streams: tuple[int, ...] | None = None
    hints: tuple[str, ...] | None = None


@dataclass(frozen=True)
class SearchSpace:
    """Each dimension's values, in the order a search should try them (the plain setting first)."""

    platform: str
    batchable: bool
    max_batch_sizes: tuple[int, ...]
    queue_delays_us: tuple[int, ...]
    preferred_batch_sizes: tuple[tuple[int, ...], ...]
    dynamic_batching: tuple[bool, ...]
    instances: tuple[int, ...]
    kinds: tuple[str, ...]
    precisions: tuple[str, ...]
    threads: tuple[int, ...]
    cores: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    streams: tuple[int, ...] = (0,)  # OpenVINO only; (0,) elsewhere
    hints: tuple[str, ...] = ("",)

    @property
    def baseline(self) -> Candidate:
        """Where a search starts: the model served plainly, one instance, the first of each dimension."""
        return Candidate(
            precision=self.precisions[0],
            max_batch_size=self.max_batch_sizes[0] if self.batchable else 0,
            dynamic_batching=False if False in self.dynamic_batching else self.dynamic_batching[0],
            max_queue_delay_us=self.queue_delays_us[0],
            preferred_batch_sizes=self.preferred_batch_sizes[0],
            instances=self.instances[0],
            kind=self.kinds[0],
            threads=self.threads[0],
            streams=self.streams[0],
            hint=self.hints[0],
        )

    def allows(self, candidate: Candidate) -> bool:
        """Instances x threads may not oversubscribe the cores (a thread count of 0 adapts by itself);
        the TensorRT execution provider exists on GPU instances only."""
        if candidate.precision == TENSORRT_FP16 and candidate.kind != "KIND_GPU":
            return False
        if candidate.hint and candidate.streams:
            return False  # a hint picks the streams; explicit streams are swept without one
        threads = candidate.threads * (1 if self.platform in SHARED_THREADS else candidate.instances)
        return not (candidate.kind == "KIND_CPU" and threads > self.cores)

    def all(self) -> list[Candidate]:
        """Every distinct candidate (brute force). Batching settings only vary where batching is on."""
        batching: list[tuple[bool, int, int, tuple[int, ...]]] = []
        for enabled in self.dynamic_batching:
            if not self.batchable:
                batching.append((False, 0, 0, ()))
                break
            if not enabled:
                batching.append((False, self.max_batch_sizes[0], 0, ()))
                continue
            for size, delay, preferred in itertools.product(
                self.max_batch_sizes, self.queue_delays_us, self.preferred_batch_sizes
            ):
                if all(p <= size for p in preferred):
                    batching.append((True, size, delay, preferred))
        found: dict[str, Candidate] = {}
        for precision, (
            enabled,
            size,
            delay,
            preferred,
        ), instances, kind, threads, streams, hint in itertools.product(
            self.precisions, batching, self.instances, self.kinds, self.threads, self.streams, self.hints
        ):
            candidate = Candidate(
                precision, size, enabled, delay, preferred, instances, kind, threads, streams, hint
            )
            if self.allows(candidate):
                found.setdefault(candidate.key, candidate)
        return list(found.values())

    def neighbours(self, candidate: Candidate, dimension: str) -> list[Candidate]:
        """Candidates that differ from ``candidate`` in one dimension only, in the dimension's order."""
        options: list[Candidate] = []
        if dimension == "batching" and self.batchable:
            for enabled in self.dynamic_batching:
                sizes = self.max_batch_sizes if enabled else self.max_batch_sizes[:1]
                for size in sizes:
                    options.append(
                        replace(
                            candidate,
                            dynamic_batching=enabled,
                            max_batch_size=size,
                            max_queue_delay_us=candidate.max_queue_delay_us if enabled else 0,
                            preferred_batch_sizes=(),
                        )
                    )
        elif dimension == "queue_delay" and candidate.dynamic_batching:
            options = [replace(candidate, max_queue_delay_us=d) for d in self.queue_delays_us]
        elif dimension == "preferred" and candidate.dynamic_batching:
            options = [
                replace(candidate, preferred_batch_sizes=p)
                for p in self.preferred_batch_sizes
                if all(size <= candidate.max_batch_size for size in p)
            ]
        elif dimension == "instances":
            options = [replace(candidate, instances=n) for n in self.instances]
        elif dimension == "threads":
            options = [replace(candidate, threads=t) for t in self.threads]
        elif dimension == "kind":
            options = [replace(candidate, kind=k) for k in self.kinds]
        elif dimension == "precision":
            options = [replace(candidate, precision=p) for p in self.precisions]
        elif dimension == "streams":
            options = [replace(candidate, streams=n) for n in self.streams]
        elif dimension == "hint":
            options = [replace(candidate, hint=h, streams=0 if h else candidate.streams) for h in self.hints]
        return [c for c in options if self.allows(c) and c != candidate]


def _batching_sizes(base: int) -> tuple[int, ...]:
    """Powers of two from 4 up to the model's declared maximum (at least 8): what batching may gain."""
    ceiling = max(base, 8)
    sizes = [size for size in (4, 8, 16, 32, 64, 128) if size <= ceiling]
    return tuple(sizes)


def build_space(
    config: model_config_pb2.ModelConfig,
    cores: int,
    gpus: int,
    limits: SpaceLimits,
    precisions_available: tuple[str, ...],
) -> SearchSpace:
    """The space for ``config`` (the model's effective config) on a machine with ``cores`` and ``gpus``."""
    notes: list[str] = []
    platform = config.platform or config.backend
    batchable = config.max_batch_size > 0
    sequence = config.HasField("sequence_batching")
    if not batchable:
        notes.append("max_batch_size is 0: the model takes no batch dimension, so batching is not swept")
    if sequence:
        notes.append("a sequence model: dynamic batching does not apply, so batching is not swept")
    max_batch_sizes = limits.max_batch_sizes or _batching_sizes(config.max_batch_size)
    if batchable and not limits.max_batch_sizes:
        # The configured size stays the value used when batching is off.
        max_batch_sizes = (config.max_batch_size, *(s for s in max_batch_sizes if s != config.max_batch_size))
    dynamic = limits.dynamic_batching or ((False, True) if batchable and not sequence else (False,))
    instances = limits.instances or tuple(range(1, min(4, cores) + 1))
    kinds = limits.kinds or (("KIND_GPU", "KIND_CPU") if gpus else ("KIND_CPU",))
    # Precisions the caller could not make (or refused) are its to explain.
    precisions = tuple(p for p in (limits.precisions or PRECISIONS) if p in precisions_available)
    if not precisions:
        precisions = ("fp32",)
    thread_parameter = THREAD_PARAMETER.get(platform)
    if limits.threads:
        threads = limits.threads if thread_parameter else (0,)
        if not thread_parameter:
            notes.append(f"{platform} has no intra-op thread setting; --threads ignored")
    elif thread_parameter:
        threads = tuple(sorted({1, cores}))
    else:
        threads = (0,)
    streams: tuple[int, ...] = (0,)
    hints: tuple[str, ...] = ("",)
    if platform == OPENVINO:
        # 0 (one stream per instance) first: the plain config; then one stream, and one per core.
        streams = limits.streams or tuple(dict.fromkeys((0, 1, cores)))
        hints = limits.hints or HINTS
    elif limits.streams or limits.hints:
        notes.append(f"{platform} has no streams or performance hint (OpenVINO's); --streams/--hint ignored")
    return SearchSpace(
        platform=platform,
        batchable=batchable and not sequence,
        max_batch_sizes=max_batch_sizes if batchable else (0,),
        queue_delays_us=limits.queue_delays_us or (0, 500),
        preferred_batch_sizes=limits.preferred_batch_sizes or ((),),
        dynamic_batching=dynamic,
        instances=instances,
        kinds=kinds,
        precisions=precisions,
        threads=threads,
        cores=cores,
        notes=tuple(notes),
        streams=streams,
        hints=hints,
    )
