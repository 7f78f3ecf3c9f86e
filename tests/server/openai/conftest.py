"""One ``trt serve`` with the OpenAI front end on, serving the example repository's ``tiny_llm`` and
``tiny_embedding`` (and ``simple``, a model that takes no text), shared by the OpenAI tests; and the
official client for it."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from tests.support import ROOT, ServerProcess, free_port, write_python_model

MODEL = "tiny_llm"
TOKENIZER = ROOT / "model_repository" / MODEL / "1" / "tokenizer.json"
METRICS_HEADER = ("metrics-key", "secret")  # /metrics on the OpenAI port is restricted in these tests
MAX_INPUT_SIZE = 1 << 20

# The least of the vLLM backend's contract: text_input and stream in, text_output out, settings as
# request parameters (it declares no sampling_parameters), no token counts and no finish reason. It
# streams the prompt's words back, max_tokens of them, cycling.
WORD_ECHO = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0]
            prompt = prompt.decode()
            stream = pb_utils.get_input_tensor_by_name(request, "stream")
            stream = bool(stream.as_numpy().reshape(-1)[0]) if stream is not None else False
            words = prompt.split()
            count = json.loads(request.parameters()).get("max_tokens", 16)
            out = [(" " if i else "") + words[i % len(words)] for i in range(count)]
            pieces = out if stream else ["".join(out)]
            for index, piece in enumerate(pieces):
                text = pb_utils.Tensor("text_output", np.array([piece.encode()], dtype=np.object_))
                final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if index == len(pieces) - 1 else 0
                sender.send(pb_utils.InferenceResponse([text]), final)
        return None
"""
WORD_ECHO_CONFIG = """
backend: "python"
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
"""

# The least of the vLLM backend's embedding contract: embedding_request in, text_output out, no token
# counts. It answers [number of characters, 1, 0] whatever dimensions are asked, and what is not a
# vector when the input is "garbage".
EMBEDDING_ECHO = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "embedding_request").as_numpy().reshape(-1)[0]
            given = json.loads(raw)["input"]
            text = "[1, 2, NaN]" if given == "garbage" else json.dumps([float(len(given)), 1.0, 0.0])
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))
            ]))
        return responses
"""
EMBEDDING_ECHO_CONFIG = """
backend: "python"
input [ { name: "embedding_request" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


# The shape of TensorRT-LLM's ensemble (pre-process -> decoupled generator -> post-process) with
# Python models: `split_words` splits the prompt, `cycle_words` streams max_tokens of its words (a
# request parameter), `shout` upper-cases each on two instances, slower for earlier words so that
# later ones finish first.
SPLIT_WORDS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0]
            words = np.array(prompt.split(), dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("WORDS", words)]))
        return responses
"""
CYCLE_WORDS = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            words = pb_utils.get_input_tensor_by_name(request, "WORDS").as_numpy()
            count = json.loads(request.parameters()).get("max_tokens", 16)
            for index in range(count):
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("WORD", words[index % len(words):][:1]),
                    pb_utils.Tensor("INDEX", np.array([index], np.int32)),
                ]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
SHOUT = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            word = pb_utils.get_input_tensor_by_name(request, "WORD").as_numpy()[0].decode()
            index = int(pb_utils.get_input_tensor_by_name(request, "INDEX").as_numpy()[0])
            time.sleep(0.02 * (2 - index % 2))
            text = (" " if index else "") + word.upper()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))
            ]))
        return responses
"""
WORD_PIPELINE_MODELS = {
    "split_words": (
        SPLIT_WORDS,
        """
backend: "python"
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "WORDS" data_type: TYPE_STRING dims: [ -1 ] } ]
""",
    ),
    "cycle_words": (
        CYCLE_WORDS,
        """
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "WORDS" data_type: TYPE_STRING dims: [ -1 ] } ]
output [
  { name: "WORD" data_type: TYPE_STRING dims: [ 1 ] }, { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] }
]
""",
    ),
    "shout": (
        SHOUT,
        """
backend: "python"
input [
  { name: "WORD" data_type: TYPE_STRING dims: [ 1 ] }, { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
""",
    ),
}
WORD_PIPELINE_CONFIG = """
platform: "ensemble"
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "split_words" model_version: -1 input_map { key: "text_input" value: "text_input" }
    output_map { key: "WORDS" value: "words" } },
  { model_name: "cycle_words" model_version: -1 input_map { key: "WORDS" value: "words" }
    output_map { key: "WORD" value: "word" } output_map { key: "INDEX" value: "index" } },
  { model_name: "shout" model_version: -1 input_map { key: "WORD" value: "word" }
    input_map { key: "INDEX" value: "index" } output_map { key: "text_output" value: "text_output" } }
] }
"""


@dataclass
class OpenAIServer:
    process: ServerProcess
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, **options: object) -> openai.OpenAI:
        """The official client; no retries, so that an error is seen as the server gave it."""
        settings: dict[str, object] = {"max_retries": 0, "timeout": 60, **options}
        return openai.OpenAI(base_url=f"{self.base_url}/v1", api_key="unused", **settings)  # type: ignore[arg-type]


@contextmanager
def word_echo_server(tmp_path: Path, tokenizer_json: Callable[[Path], None]) -> Iterator[OpenAIServer]:
    """A server of its own for word_echo (which reports no token counts), whose tokenizer.json
    ``tokenizer_json`` writes at the path it is given."""
    repo = tmp_path / "repo"
    write_python_model(repo, "word_echo", WORD_ECHO, WORD_ECHO_CONFIG)
    tokenizer_json(repo / "word_echo" / "1" / "tokenizer.json")
    port = free_port()
    process = ServerProcess(
        [repo], ["--allow-openai=true", "--openai-address=127.0.0.1", f"--openai-port={port}"]
    ).start(tmp_path)
    try:
        yield OpenAIServer(process, port)
    finally:
        process.stop()


@pytest.fixture(scope="session")
def openai_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAIServer]:
    """The example repository's tiny_llm, tiny_embedding and simple, two word_echo models (one with
    tiny_llm's tokenizer.json beside it: the front end counts its tokens; one with none),
    embedding_echo and the word_pipeline ensemble."""
    echoes = tmp_path_factory.mktemp("echo_repo")
    for name in ("word_echo", "word_echo_untokenized"):
        write_python_model(echoes, name, WORD_ECHO, WORD_ECHO_CONFIG)
    write_python_model(echoes, "embedding_echo", EMBEDDING_ECHO, EMBEDDING_ECHO_CONFIG)
    for name, (source, config) in WORD_PIPELINE_MODELS.items():
        write_python_model(echoes, name, source, config)
    (echoes / "word_pipeline" / "1").mkdir(parents=True)
    (echoes / "word_pipeline" / "config.pbtxt").write_text(WORD_PIPELINE_CONFIG)
    shutil.copyfile(TOKENIZER, echoes / "word_echo" / "1" / "tokenizer.json")
    port = free_port()
    process = ServerProcess(
        [ROOT / "model_repository", echoes],
        [
            "--model-control-mode=explicit",
            f"--load-model={MODEL}",
            "--load-model=simple",
            "--load-model=tiny_embedding",
            "--load-model=embedding_echo",
            "--load-model=word_echo",
            "--load-model=word_echo_untokenized",
            "--load-model=word_pipeline",
            "--allow-openai=true",
            "--openai-address=127.0.0.1",
            f"--openai-port={port}",
            f"--openai-restricted-api=metrics:{METRICS_HEADER[0]}={METRICS_HEADER[1]}",
            f"--http-max-input-size={MAX_INPUT_SIZE}",
        ],
    ).start(tmp_path_factory.mktemp("openai_logs"))
    yield OpenAIServer(process, port)
    assert process.alive(), f"the server died during the tests:\n{process.log()}"
    process.stop()


@pytest.fixture(scope="session")
def client(openai_server: OpenAIServer) -> openai.OpenAI:
    return openai_server.client()
