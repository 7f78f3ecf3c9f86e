"""Support for the generative trt perf tests: a decoupled Python model that streams tokens at known
delays under the vLLM backend's contract, and a byte-level BPE tokenizer trained here on the prompt
corpus, in which every word the model emits is one token."""

from __future__ import annotations

from pathlib import Path

from tests.support import write_python_model
from trt.perf.genai.prompts import WORDS, corpus_text

# The model emits " " + one of these per token (frequent in the corpus, so whole tokens of the BPE).
EMITTED = ("the", "of", "and", "to", "in", "is", "that", "it")

# Follows the vLLM backend's I/O contract: text_input, stream, sampling_parameters (JSON: max_tokens),
# exclude_input_in_output -> text_output. Token i is ready first_token_delay_ms + i * token_delay_ms after
# the request; a streamed response carries tokens_per_response tokens (sent when its last one is ready), so
# that responses and tokens differ. Every request runs on its own thread, as a continuous batching engine
# serves requests side by side.
STREAMER = """
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

WORDS = __WORDS__


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.first = float(parameters["first_token_delay_ms"]["string_value"]) / 1000
        self.step = float(parameters["token_delay_ms"]["string_value"]) / 1000
        self.group = int(parameters["tokens_per_response"]["string_value"])

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.generate, args=(request,), daemon=True).start()
        return None

    def generate(self, request):
        sender = request.get_response_sender()
        stream_tensor = pb_utils.get_input_tensor_by_name(request, "stream")
        stream = bool(stream_tensor.as_numpy().reshape(-1)[0]) if stream_tensor is not None else False
        sampling = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
        parameters = json.loads(sampling.as_numpy().reshape(-1)[0]) if sampling is not None else {}
        count = int(parameters.get("max_tokens", 16))
        began = time.perf_counter()
        pieces = []
        group = []
        for index in range(count):
            due = began + self.first + index * self.step
            time.sleep(max(0.0, due - time.perf_counter()))
            group.append(" " + WORDS[index % len(WORDS)])
            if stream and (len(group) == self.group or index == count - 1):
                out = pb_utils.Tensor("text_output", np.array(["".join(group).encode()], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse([out]))
            if len(group) == self.group or index == count - 1:
                pieces.extend(group)
                group = []
        if not stream:
            out = pb_utils.Tensor("text_output", np.array(["".join(pieces).encode()], dtype=np.object_))
            sender.send(pb_utils.InferenceResponse([out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }},
  {{ name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true }}
]
output [ {{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "first_token_delay_ms" value: {{ string_value: "{first}" }} }}
parameters {{ key: "token_delay_ms" value: {{ string_value: "{step}" }} }}
parameters {{ key: "tokens_per_response" value: {{ string_value: "{group}" }} }}
"""


def write_streamer(
    repo: Path, name: str, first_token_delay_ms: float, token_delay_ms: float, tokens_per_response: int = 1
) -> None:
    source = STREAMER.replace("__WORDS__", repr(EMITTED))
    config = CONFIG.format(
        name=name, first=first_token_delay_ms, step=token_delay_ms, group=tokens_per_response
    )
    write_python_model(repo, name, source, config)


def write_tokenizer(path: Path) -> Path:
    """A byte-level BPE trained on the prompt corpus and the model's words; returns tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    text = corpus_text(0)
    tokenizer.train_from_iterator([text, " ".join(WORDS), " ".join(EMITTED) * 50], trainer)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path / "tokenizer.json"))
    return path / "tokenizer.json"
