"""A long prompt's tokens are counted off the event loop: tokenizers' ``encode`` holds the GIL for the
whole text (about 1 s a million characters with tiny_llm's tokenizer), and every other request waited
for the count of a model that reports none of its own."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.server.openai.conftest import TOKENIZER, word_echo_server
from tests.support import longest_health_wait_while

PROMPT_CHARS = 2_000_000


def test_counting_a_long_prompts_tokens_leaves_the_loop_free(tmp_path: Path) -> None:
    with word_echo_server(tmp_path, lambda path: shutil.copyfile(TOKENIZER, path)) as server:
        client = server.client(timeout=120)
        prompt = "the quick brown fox jumps over the lazy dog " * (PROMPT_CHARS // 44)
        usages = []

        def complete() -> None:
            usages.append(client.completions.create(model="word_echo", prompt=prompt, max_tokens=2).usage)

        took, worst = longest_health_wait_while(server.process, complete)
        assert usages[0] is not None and usages[0].prompt_tokens > PROMPT_CHARS // 4
        assert worst < max(0.25 * took, 0.2), f"a health check waited {worst:.2f} s of a {took:.2f} s request"
