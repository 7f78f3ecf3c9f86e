"""One ``trt serve`` with the OpenAI front end on, serving the example repository's ``tiny_llm`` (and
``simple``, a model that takes no text), shared by the OpenAI tests; and the official client for it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from tests.support import ROOT, ServerProcess, free_port

MODEL = "tiny_llm"
TOKENIZER = ROOT / "model_repository" / MODEL / "1" / "tokenizer.json"
METRICS_HEADER = ("metrics-key", "secret")  # /metrics on the OpenAI port is restricted in these tests
MAX_INPUT_SIZE = 1 << 20


@dataclass
class OpenAIServer:
    process: ServerProcess
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, **options: object) -> openai.OpenAI:
        """The official client; no retries, so that an error is seen as the server gave it."""
        return openai.OpenAI(
            base_url=f"{self.base_url}/v1", api_key="unused", max_retries=0, timeout=60, **options
        )


@pytest.fixture(scope="session")
def openai_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAIServer]:
    port = free_port()
    process = ServerProcess(
        [ROOT / "model_repository"],
        [
            "--model-control-mode=explicit",
            f"--load-model={MODEL}",
            "--load-model=simple",
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
