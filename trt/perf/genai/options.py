"""``GenAIOptions``: every setting of a generative ``trt perf`` run, resolved once from the command line."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path

from trt.perf.errors import OptionError
from trt.perf.options import Distribution, LoadKind

# OpenAI's limit on the texts of one embeddings request (trt serve's too).
MAX_BATCH_SIZE_TEXT = 2048
# Prompts are made (or read) up front and kept: at most this many texts in a run.
MAX_PROMPT_TEXTS = 100_000


class EndpointType(StrEnum):
    """What is measured, with genai-perf's names: the OpenAI routes, Triton's generate extension, or
    Triton's gRPC streaming (``kserve``) with the vLLM backend's tensors."""

    CHAT = "chat"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"
    GENERATE = "generate"
    KSERVE = "kserve"

    @property
    def default_url(self) -> str:
        if self.openai:
            return "localhost:9000"  # Triton's OpenAI-compatible front end
        return "localhost:8001" if self is EndpointType.KSERVE else "localhost:8000"

    @property
    def openai(self) -> bool:
        return self in (EndpointType.CHAT, EndpointType.COMPLETIONS, EndpointType.EMBEDDINGS)

    @property
    def generates(self) -> bool:
        """Answers with generated text (token metrics apply); embeddings answer with vectors."""
        return self is not EndpointType.EMBEDDINGS


@dataclass(frozen=True)
class Goal:
    """A service-level objective a request must meet to count towards goodput (``ttft<200ms``)."""

    text: str
    metric: str  # time_to_first_token, inter_token_latency, request_latency, output_token_throughput_per_user
    limit: float  # nanoseconds for times, tokens/s for throughput per user
    higher_is_better: bool = False


@dataclass(frozen=True)
class GenAIOptions:
    model: str
    endpoint_type: EndpointType
    tokenizer: Path
    url: str = ""
    endpoint: str = ""  # a path that replaces the endpoint type's default route
    streaming: bool = False
    load: LoadKind = LoadKind.CONCURRENCY
    concurrency: tuple[int, ...] = (1,)
    request_rates: tuple[float, ...] = ()
    distribution: Distribution = Distribution.CONSTANT
    request_count: int = 0  # per level; 0: max(10, 4 x concurrency) or 4 s of arrivals
    warmup_request_count: int = 0
    input_tokens_mean: int = 550
    input_tokens_stddev: int = 0
    output_tokens_mean: int = 0  # 0: the server decides how many tokens
    output_tokens_stddev: int = 0
    output_tokens_deterministic: bool = False
    num_prompts: int = 100
    batch_size_text: int = 1  # texts a request (embeddings)
    input_file: Path | None = None  # prompts from a JSON-lines file instead of synthetic ones
    goals: tuple[Goal, ...] = ()
    extra_inputs: tuple[tuple[str, str | int | float | bool], ...] = ()
    http_headers: tuple[tuple[str, str], ...] = ()
    request_timeout_s: float = 300.0
    seed: int = 0
    model_version: str = ""
    max_inflight: int = 1024  # open loop: requests in flight at most, a bound on the client's memory
    artifact_dir: Path | None = None
    tags: dict[str, str] = field(default_factory=dict)

    def unused_with_input_file(self) -> list[str]:
        """The synthetic prompts' options given away from their defaults, which a run whose prompts come
        from ``--input-file`` does not use (genai-perf ignores them silently; trt says so)."""
        if self.input_file is None:
            return []
        flags = {
            "input_tokens_mean": "--synthetic-input-tokens-mean",
            "input_tokens_stddev": "--synthetic-input-tokens-stddev",
            "num_prompts": "--num-prompts",
        }
        defaults = {f.name: f.default for f in fields(self) if f.name in flags}
        return [flag for name, flag in flags.items() if getattr(self, name) != defaults[name]]

    def __post_init__(self) -> None:
        if self.input_tokens_mean < 1 or self.input_tokens_stddev < 0:
            raise OptionError("--synthetic-input-tokens-mean must be at least 1 and its stddev not negative")
        if self.output_tokens_mean < 0 or self.output_tokens_stddev < 0:
            raise OptionError("--output-tokens-mean and --output-tokens-stddev may not be negative")
        if self.output_tokens_deterministic and not self.output_tokens_mean:
            raise OptionError("--output-tokens-mean-deterministic needs --output-tokens-mean")
        if self.request_count < 0 or self.warmup_request_count < 0:
            raise OptionError("--request-count and --warmup-request-count may not be negative")
        if not 1 <= self.num_prompts <= MAX_PROMPT_TEXTS:
            raise OptionError(f"--num-prompts must be between 1 and {MAX_PROMPT_TEXTS}")
        if self.load is LoadKind.CUSTOM_INTERVALS:
            raise OptionError("generative runs take --concurrency or --request-rate-range")
        if not 1 <= self.batch_size_text <= MAX_BATCH_SIZE_TEXT:
            raise OptionError(f"--batch-size-text must be between 1 and {MAX_BATCH_SIZE_TEXT}")
        if self.batch_size_text > 1 and self.endpoint_type is not EndpointType.EMBEDDINGS:
            raise OptionError("--batch-size-text: only embeddings requests carry several texts")
        if self.num_prompts * self.batch_size_text > MAX_PROMPT_TEXTS:
            raise OptionError(f"--num-prompts x --batch-size-text may make at most {MAX_PROMPT_TEXTS} texts")
        if self.endpoint_type.generates:
            return
        if self.streaming:
            raise OptionError("--streaming: embeddings are answered whole, in one response")
        if self.output_tokens_mean or self.output_tokens_stddev:
            raise OptionError("--output-tokens-mean / -stddev: embeddings generate no tokens")
        for goal in self.goals:
            if goal.metric != "request_latency":
                raise OptionError(
                    f"--goal '{goal.text}': embeddings have request latency only, e.g. latency<50ms"
                )

    @property
    def host_port(self) -> tuple[str, int]:
        url = self.url or self.endpoint_type.default_url
        for scheme in ("http://", "grpc://"):
            url = url.removeprefix(scheme)
        if url.startswith("https://"):
            raise OptionError("-u: HTTPS is not supported by trt perf; use plain http")
        url = url.split("/", 1)[0]
        host, sep, port = url.rpartition(":")
        if not sep or not (port.isascii() and port.isdigit()):
            raise OptionError(f"-u '{self.url}': expected HOST:PORT")
        return host.strip("[]"), int(port)

    @property
    def route(self) -> str:
        """The HTTP path requests go to (unused for kserve, which is gRPC)."""
        if self.endpoint:
            return self.endpoint if self.endpoint.startswith("/") else "/" + self.endpoint
        if self.endpoint_type is EndpointType.CHAT:
            return "/v1/chat/completions"
        if self.endpoint_type is EndpointType.COMPLETIONS:
            return "/v1/completions"
        if self.endpoint_type is EndpointType.EMBEDDINGS:
            return "/v1/embeddings"
        version = f"/versions/{self.model_version}" if self.model_version else ""
        action = "generate_stream" if self.streaming else "generate"
        return f"/v2/models/{self.model}{version}/{action}"

    @property
    def levels(self) -> tuple[float, ...]:
        if self.load is LoadKind.CONCURRENCY:
            return tuple(float(c) for c in self.concurrency)
        return self.request_rates

    def requests_for(self, level: float) -> int:
        """How many requests a level measures."""
        if self.request_count:
            return self.request_count
        if self.load is LoadKind.CONCURRENCY:
            return max(10, 4 * int(level))
        return max(10, int(4 * level + 0.5))
