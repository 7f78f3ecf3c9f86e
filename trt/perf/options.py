"""``PerfOptions``: every trt perf setting, resolved once from the command line (or built by a caller)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from trt.perf.errors import OptionError


class Protocol(StrEnum):
    HTTP = "http"
    GRPC = "grpc"


class LoadKind(StrEnum):
    CONCURRENCY = "concurrency"
    REQUEST_RATE = "request_rate"
    CUSTOM_INTERVALS = "custom_intervals"


class Distribution(StrEnum):
    CONSTANT = "constant"
    POISSON = "poisson"


class TensorFormat(StrEnum):
    BINARY = "binary"
    JSON = "json"


class MeasurementMode(StrEnum):
    TIME_WINDOWS = "time_windows"
    COUNT_WINDOWS = "count_windows"


class SharedMemoryKind(StrEnum):
    NONE = "none"
    SYSTEM = "system"
    CUDA = "cuda"


@dataclass(frozen=True)
class SequenceOptions:
    """perf_analyzer's sequence flags: lengths vary by +-variation percent; ids cycle through a range."""

    length: int = 20
    length_variation: float = 20.0
    length_given: bool = False
    num_sequences: int = 4
    id_start: int = 1
    id_count: int = 2**32 - 2


@dataclass(frozen=True)
class PerfOptions:
    """What to measure, how to load the server, and how long to measure each level."""

    model: str
    model_version: str = ""
    url: str = ""
    protocol: Protocol = Protocol.HTTP
    load: LoadKind = LoadKind.CONCURRENCY
    concurrency: tuple[int, ...] = (1,)
    request_rates: tuple[float, ...] = ()
    request_intervals_us: tuple[int, ...] = ()
    distribution: Distribution = Distribution.CONSTANT
    batch_size: int = 1
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    input_data: tuple[str, ...] = ("random",)
    string_length: int = 128
    string_data: str | None = None
    async_mode: bool | None = None  # None: sync, or async for sequence models (as perf_analyzer)
    streaming: bool = False
    input_format: TensorFormat | None = None  # None: binary when the server lists binary_tensor_data
    output_format: TensorFormat | None = None
    measurement_interval_ms: int = 5000
    measurement_mode: MeasurementMode = MeasurementMode.TIME_WINDOWS
    measurement_request_count: int = 50
    stability_percentage: float = 10.0
    max_trials: int = 10
    percentile: int | None = None
    latency_threshold_ms: float = 0.0
    warmup_ms: int | None = None  # None: min(measurement interval, 1000 ms)
    sequence: SequenceOptions = field(default_factory=SequenceOptions)
    shared_memory: SharedMemoryKind = SharedMemoryKind.NONE
    output_shared_memory_size: int = 102400
    processes: int = 0  # 0: one per four CPU cores, at most 8
    max_threads: int = 16
    request_timeout_s: float = 30.0
    http_headers: tuple[tuple[str, str], ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise OptionError("-b/--batch-size must be at least 1")
        if self.measurement_interval_ms < 1:
            raise OptionError("-p/--measurement-interval must be a positive number of milliseconds")
        if self.max_trials < 1:
            raise OptionError("-r/--max-trials must be at least 1")
        if self.stability_percentage <= 0:
            raise OptionError("-s/--stability-percentage must be positive")
        if self.percentile is not None and not 1 <= self.percentile <= 99:
            raise OptionError("--percentile must be between 1 and 99")
        if self.streaming and self.protocol is not Protocol.GRPC:
            raise OptionError("--streaming needs -i grpc (Triton streams over gRPC ModelStreamInfer only)")
        if self.load is LoadKind.REQUEST_RATE and not self.request_rates:
            raise OptionError("--request-rate-range needs at least one rate")
        if self.load is LoadKind.CUSTOM_INTERVALS and not self.request_intervals_us:
            raise OptionError("--request-intervals file holds no intervals")

    @property
    def endpoint(self) -> tuple[str, int]:
        """(host, port) from ``-u``, defaulting to localhost:8000 (HTTP) or :8001 (gRPC)."""
        url = self.url or ("localhost:8001" if self.protocol is Protocol.GRPC else "localhost:8000")
        for scheme in ("http://", "grpc://"):
            if url.startswith(scheme):
                url = url[len(scheme) :]
        if url.startswith("https://"):
            raise OptionError("-u: HTTPS is not supported by trt perf; use plain http")
        url = url.split("/", 1)[0]
        host, sep, port = url.rpartition(":")
        if not sep or not (port.isascii() and port.isdigit()):
            raise OptionError(f"-u '{self.url}': expected HOST:PORT")
        return host.strip("[]"), int(port)

    @property
    def levels(self) -> tuple[float, ...]:
        """The load levels in order: concurrencies, request rates, or one custom-interval run."""
        if self.load is LoadKind.CONCURRENCY:
            return tuple(float(c) for c in self.concurrency)
        if self.load is LoadKind.REQUEST_RATE:
            return self.request_rates
        return (0.0,)

    @property
    def warmup_seconds(self) -> float:
        warmup = self.warmup_ms if self.warmup_ms is not None else min(self.measurement_interval_ms, 1000)
        return warmup / 1000
