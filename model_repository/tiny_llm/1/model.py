"""tiny_llm: text generation with the I/O contract of Triton's vLLM backend.

Inputs: ``text_input`` (the prompt), and optionally ``stream``, ``sampling_parameters`` (a JSON
object: max_tokens, temperature, top_p, top_k, seed, stop, stop_token_ids, min_tokens, ignore_eos,
presence_penalty, frequency_penalty), ``exclude_input_in_output`` and the ``return_*`` flags.
Outputs: ``text_output``, and when asked ``finish_reason``, ``num_input_tokens``,
``num_output_tokens``. Streamed, each response carries the text and tokens new since the last one;
otherwise one response carries the whole text (after the prompt unless
``exclude_input_in_output``). A cancelled request stops generating and ends with a CANCELLED error,
as vLLM's backend does. The network and its scheduler are in tiny_llm_engine.py.
"""

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tiny_llm_engine as engine
import torch
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer

FLAGS = ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")


@dataclass
class _Request:
    """What a sequence's callbacks need to answer its request."""

    sender: object
    prompt: str
    stream: bool
    prepend_prompt: bool
    flags: dict


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("tiny_llm streams: its config needs decoupled: true")
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        torch.set_num_threads(int(parameters.get("torch_threads", "1")))
        folder = Path(__file__).resolve().parent
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        decoder = engine.LlamaDecoder(folder)
        self.scheduler = engine.Scheduler(
            decoder,
            self.tokenizer,
            max_num_seqs=int(parameters.get("max_num_seqs", "8")),
            max_waiting=int(parameters.get("max_waiting", "256")),
        )
        # A token is at least one byte: a prompt longer than the context times the longest token's
        # bytes cannot fit, and is refused before the tokenizer spends time on it.
        vocabulary = range(self.tokenizer.get_vocab_size())
        longest = max(len(self.tokenizer.decode([token]).encode()) for token in vocabulary)
        self.context = decoder.shape.max_positions
        self.max_prompt_bytes = self.context * longest
        self.metrics = None
        if parameters.get("REPORT_CUSTOM_METRICS", "").lower() == "true":
            self.metrics = _VllmMetrics({"model": args["model_name"], "version": args["model_version"]})

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                self._submit(request, sender)
            except (engine.SamplingError, ValueError) as exc:
                _refuse(sender, str(exc), pb_utils.TritonError.INVALID_ARG)
            except engine.Overloaded as exc:
                _refuse(sender, str(exc), pb_utils.TritonError.UNAVAILABLE)
        return None  # the scheduler thread answers, through each request's sender

    def _submit(self, request, sender):
        prompt = _text(_input(request, "text_input"))
        if len(prompt.encode()) > self.max_prompt_bytes:
            raise ValueError(f"the prompt is longer than this model's context of {self.context} tokens")
        stream = bool(_input(request, "stream", False))
        exclude = _input(request, "exclude_input_in_output")
        # vLLM's defaults: the prompt leads a whole answer, never a stream of deltas.
        prepend = (not bool(exclude)) if exclude is not None else not stream
        if prepend and stream:
            raise ValueError("When streaming, `exclude_input_in_output` = False is not allowed.")
        parameters = _input(request, "sampling_parameters")
        params = engine.SamplingParams.from_json(_text(parameters) if parameters is not None else "{}")
        flags = {name: bool(_input(request, name, False)) for name in FLAGS}
        answer = _Request(sender, prompt, stream, prepend, flags)
        sequence = engine.Sequence(
            prompt_ids=self.tokenizer.encode(prompt).ids,
            params=params,
            on_output=lambda s, text, count, finish: self._on_output(answer, s, text, count, finish),
            on_error=lambda s, message, cancelled: self._on_error(answer, message, cancelled),
            is_cancelled=sender.is_cancelled,
        )
        self.scheduler.submit(sequence)

    def _on_output(self, request, sequence, text, count, finish):
        """Called on the scheduler thread with what is new; streams it, or the whole text at the end."""
        if self.metrics is not None:
            self.metrics.record(sequence, count, finish)
        if request.stream:
            tokens = count
        elif finish is None:
            return
        else:
            text = request.prompt + sequence.text if request.prepend_prompt else sequence.text
            tokens = sequence.generated
        outputs = [pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))]
        if request.flags["return_finish_reason"]:
            outputs.append(
                pb_utils.Tensor("finish_reason", np.array([str(finish).encode()], dtype=np.object_))
            )
        if request.flags["return_num_input_tokens"]:
            outputs.append(
                pb_utils.Tensor("num_input_tokens", np.array([len(sequence.prompt_ids)], np.uint32))
            )
        if request.flags["return_num_output_tokens"]:
            outputs.append(pb_utils.Tensor("num_output_tokens", np.array([tokens], np.uint32)))
        flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if finish else 0
        request.sender.send(pb_utils.InferenceResponse(output_tensors=outputs), flags)

    def _on_error(self, request, message, cancelled):
        code = pb_utils.TritonError.CANCELLED if cancelled else pb_utils.TritonError.INTERNAL
        response = pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))
        request.sender.send(response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        self.scheduler.stop()


def _refuse(sender, message, code):
    response = pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))
    sender.send(response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def _input(request, name, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    values = tensor.as_numpy().reshape(-1)
    if values.size != 1:
        raise ValueError(f"input '{name}' must hold one element, got {values.size}")
    return values[0]


def _text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class _VllmMetrics:
    """The families vLLM's Triton backend reports (REPORT_CUSTOM_METRICS), with its bucket bounds."""

    def __init__(self, labels):
        def family(name, description, kind):
            return pb_utils.MetricFamily(name=name, description=description, kind=kind)

        counter, histogram = pb_utils.MetricFamily.COUNTER, pb_utils.MetricFamily.HISTOGRAM
        # The families must outlive their metrics: a dropped family releases its series.
        self.families = [
            family("vllm:prompt_tokens_total", "Number of prefill tokens processed.", counter),
            family("vllm:generation_tokens_total", "Number of generation tokens processed.", counter),
            family(
                "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", histogram
            ),
            family(
                "vllm:time_per_output_token_seconds",
                "Histogram of time per output token in seconds.",
                histogram,
            ),
            family(
                "vllm:e2e_request_latency_seconds",
                "Histogram of end to end request latency in seconds.",
                histogram,
            ),
        ]
        prompt, generation, first, per_token, e2e = self.families
        self.prompt_tokens = prompt.Metric(labels=labels)
        self.generation_tokens = generation.Metric(labels=labels)
        self.time_to_first_token = first.Metric(
            labels=labels,
            buckets=[
                0.001,
                0.005,
                0.01,
                0.02,
                0.04,
                0.06,
                0.08,
                0.1,
                0.25,
                0.5,
                0.75,
                1.0,
                2.5,
                5.0,
                7.5,
                10.0,
            ],
        )
        self.time_per_output_token = per_token.Metric(
            labels=labels, buckets=[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
        )
        self.e2e_latency = e2e.Metric(
            labels=labels, buckets=[1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0]
        )

    def record(self, sequence, count, finish):
        """Counters as tokens come out, latencies once the request ends."""
        self.generation_tokens.increment(count)
        if finish is None:
            return
        self.prompt_tokens.increment(len(sequence.prompt_ids))
        now = time.monotonic()
        self.time_to_first_token.observe(sequence.first_token_at - sequence.submitted)
        if sequence.generated > 1:
            self.time_per_output_token.observe((now - sequence.first_token_at) / (sequence.generated - 1))
        self.e2e_latency.observe(now - sequence.submitted)
