"""One ``trt serve`` with the streaming test model, and its tokenizer, for the generative perf tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.perf.genai.genai_support import write_streamer, write_tokenizer
from tests.support import ServerProcess

# The model's own pace: what the measured figures must come back as.
FIRST_TOKEN_MS, TOKEN_MS, TOKENS_PER_RESPONSE = 80.0, 10.0, 2


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def streamer_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("genai_repo")
    write_streamer(repo, "streamer", FIRST_TOKEN_MS, TOKEN_MS, TOKENS_PER_RESPONSE)
    proc = ServerProcess([repo]).start(tmp_path_factory.mktemp("genai_logs"))
    yield proc
    assert proc.alive(), f"the server died during the generative perf tests:\n{proc.log()}"
    proc.stop()
