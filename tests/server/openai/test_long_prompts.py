"""A long prompt's tokens are counted off the event loop: tokenizers' ``encode`` holds the GIL for the
whole text (about 1 s a million characters with tiny_llm's tokenizer), and every other request waited
for the count of a model that reports none of its own."""

from __future__ import annotations

import shutil
from pathlib import Path

import openai

from tests.server.openai.conftest import TOKENIZER, WORD_ECHO, WORD_ECHO_CONFIG
from tests.support import ServerProcess, free_port, longest_health_wait_while, write_python_model

PROMPT_CHARS = 2_000_000


def test_counting_a_long_prompts_tokens_leaves_the_loop_free(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "word_echo", WORD_ECHO, WORD_ECHO_CONFIG)  # reports no token counts
    shutil.copyfile(TOKENIZER, repo / "word_echo" / "1" / "tokenizer.json")
    port = free_port()
    server = ServerProcess(
        [repo], ["--allow-openai=true", "--openai-address=127.0.0.1", f"--openai-port={port}"]
    ).start(tmp_path)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=120)
        prompt = "the quick brown fox jumps over the lazy dog " * (PROMPT_CHARS // 44)
        usages = []

        def complete() -> None:
            usages.append(client.completions.create(model="word_echo", prompt=prompt, max_tokens=2).usage)

        took, worst = longest_health_wait_while(server, complete)
        assert usages[0] is not None and usages[0].prompt_tokens > PROMPT_CHARS // 4
        assert worst < max(0.25 * took, 0.2), f"a health check waited {worst:.2f} s of a {took:.2f} s request"
    finally:
        server.stop()
