"""The generation engine behind tiny_llm's model.py: a Llama decoder in plain torch, sampling, stop
conditions, and a scheduler thread that decodes every running sequence together.

The weights are a Hugging Face Llama checkpoint (``config.json`` + ``model.safetensors``), so
``transformers`` loads the same folder; scripts/generate_model_repository.py checks that its logits
and ours agree. The forward pass is written out here rather than taken from ``transformers`` because
importing that library costs 5-15 s of CPU per model process on these machines, and its
per-token Python overhead is several times this one's for a model this small.

Scheduling is continuous batching in miniature: up to ``max_num_seqs`` sequences run at once, each
with its own KV cache; a new one is prefilled as soon as a slot frees, and every step decodes one
token for all running sequences, the projections and MLPs batched, attention per sequence.
"""

from __future__ import annotations

import collections
import json
import math
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# isort: off
# tokenizers and safetensors come with the genai extra only (which brings torch too): imported first,
# so that on an install without it the missing module, and the hint trt gives, name that extra.
from tokenizers import Tokenizer
from safetensors.torch import load_file
import torch
from torch.nn import functional

# isort: on

GREEDY_BELOW = 1e-5  # a temperature under this is greedy decoding, as in vLLM


class SamplingError(ValueError):
    """A sampling parameter or a prompt the engine cannot take (the message says which)."""


class Overloaded(Exception):
    """As many sequences wait as the scheduler keeps: the request is refused, not queued."""


@dataclass(frozen=True)
class SamplingParams:
    """The subset of vLLM's ``SamplingParams`` this engine implements, with vLLM's defaults."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: every token
    min_tokens: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    @classmethod
    def from_json(cls, text: str) -> SamplingParams:
        """Parse the ``sampling_parameters`` input (a JSON object), refusing what is not understood."""
        try:
            document = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            raise SamplingError(f"sampling_parameters is not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise SamplingError("sampling_parameters must be a JSON object")
        values: dict[str, Any] = {}
        for key, value in document.items():
            if key == "n":
                if _integer(key, value) != 1:
                    raise SamplingError("only n=1 is supported")
            elif key in ("max_tokens", "top_k", "min_tokens", "seed"):
                values[key] = _integer(key, value)
            elif key in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
                values[key] = _number(key, value)
            elif key == "ignore_eos":
                if not isinstance(value, bool):
                    raise SamplingError("ignore_eos must be true or false")
                values[key] = value
            elif key == "stop":
                stops = [value] if isinstance(value, str) else value
                if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
                    raise SamplingError("stop must be a non-empty string or a list of them")
                values[key] = tuple(stops)
            elif key == "stop_token_ids":
                if not isinstance(value, list):
                    raise SamplingError("stop_token_ids must be a list of integers")
                values[key] = tuple(_integer(key, item) for item in value)
            else:
                raise SamplingError(f"sampling parameter '{key}' is not supported by this model")
        params = cls(**values)
        params._check()
        return params

    def _check(self) -> None:
        if self.max_tokens < 1:
            raise SamplingError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise SamplingError(f"temperature must be non-negative, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise SamplingError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise SamplingError(f"top_k must be -1 (off) or at least 1, got {self.top_k}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise SamplingError(f"min_tokens must be in [0, max_tokens], got {self.min_tokens}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                raise SamplingError(f"{name} must be in [-2, 2], got {getattr(self, name)}")


def _integer(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SamplingError(f"{key} must be an integer, got {value!r}")
    return value


def _number(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SamplingError(f"{key} must be a number, got {value!r}")
    return float(value)


# -- the decoder -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecoderShape:
    """What ``config.json`` says about the network (a Llama config, as transformers writes it)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    max_positions: int
    rms_norm_eps: float
    rope_theta: float
    eos_token_ids: tuple[int, ...]
    suppressed_token_ids: tuple[int, ...]  # never generated (generation_config.json's suppress_tokens)

    @classmethod
    def from_config(cls, path: Path) -> DecoderShape:
        config = json.loads(path.read_text(encoding="utf-8"))
        generation_path = path.with_name("generation_config.json")
        generation = (
            json.loads(generation_path.read_text(encoding="utf-8")) if generation_path.exists() else {}
        )
        if config.get("model_type") != "llama":
            raise ValueError(f"{path}: model_type must be 'llama', got {config.get('model_type')!r}")
        eos = generation.get("eos_token_id", config.get("eos_token_id"))
        rope = config.get("rope_parameters") or {}
        return cls(
            vocab_size=int(config["vocab_size"]),
            hidden_size=int(config["hidden_size"]),
            intermediate_size=int(config["intermediate_size"]),
            num_layers=int(config["num_hidden_layers"]),
            num_heads=int(config["num_attention_heads"]),
            num_kv_heads=int(config.get("num_key_value_heads") or config["num_attention_heads"]),
            max_positions=int(config["max_position_embeddings"]),
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            rope_theta=float(config.get("rope_theta", rope.get("rope_theta", 10000.0))),
            eos_token_ids=tuple(eos if isinstance(eos, list) else [eos] if eos is not None else []),
            suppressed_token_ids=tuple(generation.get("suppress_tokens") or ()),
        )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


class KVCache:
    """One sequence's keys and values, every layer, allocated once for the model's whole context."""

    def __init__(self, shape: DecoderShape) -> None:
        size = (shape.num_kv_heads, shape.max_positions, shape.head_dim)
        self.keys = [torch.empty(size) for _ in range(shape.num_layers)]
        self.values = [torch.empty(size) for _ in range(shape.num_layers)]
        self.length = 0


class LlamaDecoder:
    """The forward pass of ``LlamaForCausalLM`` (RMSNorm, rotary attention, SwiGLU), inference only."""

    def __init__(self, folder: Path) -> None:
        self.shape = shape = DecoderShape.from_config(folder / "config.json")
        weights = load_file(str(folder / "model.safetensors"))
        self.embed = weights["model.embed_tokens.weight"]
        self.final_norm = weights["model.norm.weight"]
        self.lm_head = weights.get("lm_head.weight", self.embed)  # tied when the file has none
        self.layers = []
        for index in range(shape.num_layers):
            prefix = f"model.layers.{index}."
            self.layers.append({name: weights[prefix + name] for name in _LAYER_WEIGHTS})
        positions = torch.arange(shape.max_positions, dtype=torch.float32)
        inverse = 1.0 / shape.rope_theta ** (
            torch.arange(0, shape.head_dim, 2, dtype=torch.float32) / shape.head_dim
        )
        angles = torch.outer(positions, inverse)
        angles = torch.cat((angles, angles), dim=-1)
        self.cos, self.sin = angles.cos(), angles.sin()

    def new_cache(self) -> KVCache:
        return KVCache(self.shape)

    @torch.inference_mode()
    def prefill(self, token_ids: list[int], cache: KVCache) -> torch.Tensor:
        """Run the prompt into an empty cache; the logits after its last token."""
        count = len(token_ids)
        x = self.embed[torch.tensor(token_ids)]
        cos, sin = self.cos[:count], self.sin[:count]
        for index, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, x, cos[:, None], sin[:, None])  # [T, heads, dim]
            cache.keys[index][:, :count] = k.transpose(0, 1)
            cache.values[index][:, :count] = v.transpose(0, 1)
            attended = functional.scaled_dot_product_attention(
                q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                is_causal=True, enable_gqa=self._grouped,
            )  # fmt: skip
            x = self._finish_layer(layer, x, attended.transpose(0, 1).reshape(count, -1))
        cache.length = count
        return self._logits(x[-1:])[0]

    @torch.inference_mode()
    def decode(self, token_ids: list[int], caches: list[KVCache]) -> torch.Tensor:
        """One token for each sequence (each at its own position): logits [sequences, vocab]."""
        positions = torch.tensor([cache.length for cache in caches])
        x = self.embed[torch.tensor(token_ids)]
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]
        for index, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, x, cos, sin)  # [B, heads, dim]
            rows = []
            for row, cache in enumerate(caches):
                end = cache.length + 1
                keys, values = cache.keys[index], cache.values[index]
                keys[:, end - 1] = k[row]
                values[:, end - 1] = v[row]
                rows.append(
                    functional.scaled_dot_product_attention(
                        q[row][:, None], keys[:, :end], values[:, :end], enable_gqa=self._grouped
                    ).reshape(-1)
                )
            x = self._finish_layer(layer, x, torch.stack(rows))
        for cache in caches:
            cache.length += 1
        return self._logits(x)

    @property
    def _grouped(self) -> bool:
        return self.shape.num_kv_heads != self.shape.num_heads

    def _qkv(
        self, layer: dict[str, torch.Tensor], x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        shape = self.shape
        h = _rms_norm(x, layer["input_layernorm.weight"], shape.rms_norm_eps)
        q = (h @ layer["self_attn.q_proj.weight"].T).view(-1, shape.num_heads, shape.head_dim)
        k = (h @ layer["self_attn.k_proj.weight"].T).view(-1, shape.num_kv_heads, shape.head_dim)
        v = (h @ layer["self_attn.v_proj.weight"].T).view(-1, shape.num_kv_heads, shape.head_dim)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def _finish_layer(
        self, layer: dict[str, torch.Tensor], x: torch.Tensor, attended: torch.Tensor
    ) -> torch.Tensor:
        x = x + attended @ layer["self_attn.o_proj.weight"].T
        h = _rms_norm(x, layer["post_attention_layernorm.weight"], self.shape.rms_norm_eps)
        gate = functional.silu(h @ layer["mlp.gate_proj.weight"].T)
        return x + (gate * (h @ layer["mlp.up_proj.weight"].T)) @ layer["mlp.down_proj.weight"].T

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return _rms_norm(x, self.final_norm, self.shape.rms_norm_eps) @ self.lm_head.T


_LAYER_WEIGHTS = (
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


# -- sequences and the scheduler -------------------------------------------------------------------


@dataclass(eq=False)  # compared and hashed as itself: sequences are kept in a set
class Sequence:
    """One request being generated. The scheduler thread owns it once submitted."""

    prompt_ids: list[int]
    params: SamplingParams
    # Called on the scheduler thread: (sequence, new text, new token count, finish reason or None).
    on_output: Callable[[Sequence, str, int, str | None], None]
    # (sequence, message, whether it ended because its client went away): the sequence is over.
    on_error: Callable[[Sequence, str, bool], None]
    is_cancelled: Callable[[], bool] = lambda: False
    submitted: float = field(default_factory=time.monotonic)
    first_token_at: float = 0.0
    output_ids: list[int] = field(default_factory=list)  # shown tokens (a stopping token is not)
    generated: int = 0  # tokens sampled, the stopping one included
    text: str = ""  # the output so far, stop strings removed
    emitted_chars: int = 0  # how much of ``text`` was handed to on_output
    unsent_tokens: int = 0  # tokens not yet counted in an on_output call
    cache: KVCache | None = None
    generator: torch.Generator | None = None
    token_counts: torch.Tensor | None = None  # per vocabulary entry, for the penalties
    cancelled: bool = False  # set by the scheduler's watcher thread once is_cancelled() says so
    ended: bool = False  # its last answer is sent (under ``lock``): nothing may be asked about it now
    lock: threading.Lock = field(default_factory=threading.Lock)


class Scheduler:
    """A thread that admits submitted sequences (up to ``max_num_seqs`` at once) and decodes them,
    and one that watches them for cancellation.

    Asking whether a request was cancelled is a round trip to the server. Asked from the decoding
    thread, every running sequence's question stalled every other sequence's next token (at 8
    sequences, a fifth of the server's time went to answering); a watcher thread asks instead, and
    the decoding thread reads the flag it sets.
    """

    CANCEL_CHECK_INTERVAL_S = 0.02

    def __init__(
        self, decoder: LlamaDecoder, tokenizer: Tokenizer, max_num_seqs: int, max_waiting: int
    ) -> None:
        self.decoder = decoder
        self.tokenizer = tokenizer
        self.max_num_seqs = max_num_seqs
        self.max_waiting = max_waiting
        self._submitted: queue.SimpleQueue[Sequence | None] = queue.SimpleQueue()
        self._waiting: collections.deque[Sequence] = collections.deque()
        self._running: list[Sequence] = []
        self._stopping = False
        suppressed = decoder.shape.suppressed_token_ids
        self._suppressed = torch.tensor(suppressed) if suppressed else None
        self._live: set[Sequence] = set()  # submitted and not ended: what the watcher asks about
        self._live_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tiny_llm-scheduler", daemon=True)
        self._thread.start()
        self._watcher = threading.Thread(target=self._watch, name="tiny_llm-cancellations", daemon=True)
        self._watcher.start()

    def submit(self, sequence: Sequence) -> None:
        limit = self.decoder.shape.max_positions
        if len(sequence.prompt_ids) >= limit:
            raise SamplingError(
                f"the prompt is {len(sequence.prompt_ids)} tokens; this model's context is {limit} tokens"
            )
        with self._live_lock:
            if len(self._live) >= self.max_num_seqs + self.max_waiting:
                raise Overloaded(
                    f"{len(self._live)} requests are in progress or waiting, as many as this model keeps "
                    f"(max_num_seqs {self.max_num_seqs} + max_waiting {self.max_waiting}): try again later"
                )
            self._live.add(sequence)
        self._submitted.put(sequence)

    def stop(self) -> None:
        self._stopping = True
        self._submitted.put(None)
        self._thread.join(timeout=30)
        self._watcher.join(timeout=30)

    def _watch(self) -> None:
        while not self._stopping:
            time.sleep(self.CANCEL_CHECK_INTERVAL_S)
            with self._live_lock:
                live = [sequence for sequence in self._live if not sequence.cancelled]
            for sequence in live:
                with sequence.lock:
                    if not sequence.ended:
                        sequence.cancelled = sequence.is_cancelled()

    def _end(self, sequence: Sequence, last: Callable[[], None]) -> None:
        """Send the sequence's last answer (``last``) and forget it. The watcher asks about a sequence
        under its lock and never once it has ended: after the final response a request is gone, and
        asking then crashed Triton 2.51 (TRITONBACKEND_ResponseFactoryIsCancelled, SIGSEGV)."""
        with sequence.lock:
            sequence.ended = True
            last()
        sequence.cache = None
        with self._live_lock:
            self._live.discard(sequence)

    def _fail(self, sequence: Sequence, message: str, cancelled: bool = False) -> None:
        self._end(sequence, lambda: sequence.on_error(sequence, message, cancelled))

    @property
    def running(self) -> int:
        return len(self._running)

    def _run(self) -> None:
        while not self._stopping:
            self._take_submissions(block=not self._running and not self._waiting)
            if self._stopping:
                break
            try:
                self._admit()
                self._drop_cancelled()
                if self._running:
                    self._step()
            except Exception as exc:  # a bug must end the requests in flight, not the thread
                for sequence in self._running:
                    self._fail(sequence, f"generation failed: {type(exc).__name__}: {exc}")
                self._running.clear()
        for sequence in [*self._running, *self._waiting]:
            self._fail(sequence, "the model is being unloaded")

    def _take_submissions(self, block: bool) -> None:
        try:
            item = self._submitted.get(block=block)
            while True:
                if item is None:
                    return
                self._waiting.append(item)
                item = self._submitted.get_nowait()
        except queue.Empty:
            return

    def _admit(self) -> None:
        while self._waiting and len(self._running) < self.max_num_seqs:
            sequence = self._waiting.popleft()
            if sequence.cancelled:
                self._fail(sequence, "the request was cancelled", cancelled=True)
                continue
            seed = sequence.params.seed
            sequence.generator = torch.Generator().manual_seed(
                seed if seed is not None else random.getrandbits(63)
            )
            sequence.token_counts = torch.zeros(self.decoder.shape.vocab_size)
            sequence.cache = self.decoder.new_cache()
            try:
                logits = self.decoder.prefill(sequence.prompt_ids, sequence.cache)
            except Exception as exc:  # this prompt's failure is this request's alone
                self._fail(sequence, f"prefill failed: {type(exc).__name__}: {exc}")
                continue
            self._running.append(sequence)
            self._advance(sequence, logits)
        self._running = [s for s in self._running if not self._finished(s)]

    def _drop_cancelled(self) -> None:
        for sequence in self._running:
            if sequence.cancelled:
                self._fail(sequence, "the request was cancelled", cancelled=True)
        self._running = [s for s in self._running if not self._finished(s)]

    def _step(self) -> None:
        running = self._running
        caches = [s.cache for s in running if s.cache is not None]
        logits = self.decoder.decode([s.output_ids[-1] for s in running], caches)
        for row, sequence in enumerate(running):
            self._advance(sequence, logits[row])
        self._running = [s for s in running if not self._finished(s)]

    @staticmethod
    def _finished(sequence: Sequence) -> bool:
        return sequence.cache is None  # released when the sequence ends

    def _advance(self, sequence: Sequence, logits: torch.Tensor) -> None:
        """Pick the next token, update the text, report what is new, and end the sequence if done."""
        token = self._sample(sequence, logits)
        if not sequence.first_token_at:
            sequence.first_token_at = time.monotonic()
        params = sequence.params
        sequence.generated += 1
        sequence.unsent_tokens += 1
        finish = None
        eos = token in self.decoder.shape.eos_token_ids and not params.ignore_eos
        if eos or token in params.stop_token_ids:
            finish = "stop"  # the stopping token is counted but not shown, as vLLM does
        else:
            sequence.output_ids.append(token)
            assert sequence.token_counts is not None
            sequence.token_counts[token] += 1
            sequence.text = self.tokenizer.decode(sequence.output_ids, skip_special_tokens=True)
            if params.stop and self._cut_at_stop(sequence):
                finish = "stop"
            elif sequence.generated >= params.max_tokens:
                finish = "length"
            elif len(sequence.prompt_ids) + len(sequence.output_ids) >= self.decoder.shape.max_positions:
                finish = "length"  # the context is full
        ready = len(sequence.text) if finish else self._safe_length(sequence)
        delta = sequence.text[sequence.emitted_chars : ready]
        if not delta and not finish:
            return
        sequence.emitted_chars = max(ready, sequence.emitted_chars)
        counted, sequence.unsent_tokens = sequence.unsent_tokens, 0
        if finish:
            self._end(sequence, lambda: sequence.on_output(sequence, delta, counted, finish))
        else:
            sequence.on_output(sequence, delta, counted, None)

    def _cut_at_stop(self, sequence: Sequence) -> bool:
        """Truncate the text before the first stop string, looking only where a new one can be."""
        longest = max(len(stop) for stop in sequence.params.stop)
        start = max(0, sequence.emitted_chars - longest)
        found = [i for i in (sequence.text.find(stop, start) for stop in sequence.params.stop) if i >= 0]
        if not found:
            return False
        sequence.text = sequence.text[: min(found)]
        return True

    @staticmethod
    def _safe_length(sequence: Sequence) -> int:
        """How much text can be streamed now: not a trailing partial UTF-8 character, and not what
        may turn out to be the start of a stop string."""
        text = sequence.text
        end = len(text)
        while end and text[end - 1] == "\ufffd":
            end -= 1
        if sequence.params.stop:
            end = max(sequence.emitted_chars, end - (max(len(s) for s in sequence.params.stop) - 1))
        return end

    def _sample(self, sequence: Sequence, logits: torch.Tensor) -> int:
        params = sequence.params
        logits = logits.clone()
        if self._suppressed is not None:
            logits[self._suppressed] = -math.inf
        counts = sequence.token_counts
        assert counts is not None
        if params.presence_penalty or params.frequency_penalty:
            logits -= params.presence_penalty * (counts > 0) + params.frequency_penalty * counts
        if len(sequence.output_ids) < params.min_tokens:
            logits[list(self.decoder.shape.eos_token_ids + params.stop_token_ids)] = -math.inf
        if params.temperature < GREEDY_BELOW:
            return int(torch.argmax(logits))
        logits /= params.temperature
        if params.top_k > 0:
            kth = torch.topk(logits, min(params.top_k, logits.numel())).values[-1]
            logits[logits < kth] = -math.inf
        probabilities = torch.softmax(logits, dim=-1)
        if params.top_p < 1:
            ordered, order = torch.sort(probabilities, descending=True)
            outside = torch.cumsum(ordered, dim=-1) - ordered > params.top_p
            probabilities[order[outside]] = 0.0
        return int(torch.multinomial(probabilities, 1, generator=sequence.generator))
