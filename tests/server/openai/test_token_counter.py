"""Token counts come from a process of their own: loading a tokenizer there holds none of the server's
requests (``tokenizers`` holds the GIL while it reads one: about 1 s for an 8 MB tokenizer.json, every
request of every model waiting), a tokenizer it cannot read is refused in words, and a process that
dies costs the counts it owed, never a hang."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import psutil
import pytest

from tests.server.openai.conftest import word_echo_server
from tests.support import longest_health_wait_while
from trt.server.openai.token_counter import PROCESS_MODULE, TokenCounter, TokenizerUnreadable
from trt.server.openai.token_counter_process import MAX_TOKENIZER_BYTES


def _word_level_tokenizer(path: Path, words: int) -> None:
    """A tokenizer.json of ``words`` words (w1, w2, ...), one token each: 500,000 make 8 MB."""
    vocab = {"[UNK]": 0} | {f"w{i:x}": i for i in range(1, words)}
    path.write_text(
        json.dumps(
            {
                "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
                "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
            }
        )
    )  # fmt: skip


def test_loading_a_large_tokenizer_holds_no_request_of_the_server(tmp_path: Path) -> None:
    with word_echo_server(tmp_path, lambda path: _word_level_tokenizer(path, 500_000)) as server:
        client = server.client(timeout=120)
        usages = []

        def complete() -> None:
            answer = client.completions.create(model="word_echo", prompt="w1 w2 w3 zzz", max_tokens=2)
            usages.append(answer.usage)

        took, worst = longest_health_wait_while(server.process, complete)
        assert usages[0] is not None and usages[0].prompt_tokens == 4
        assert took > 0.3, f"the tokenizer loaded in {took:.2f} s: too small to tell"
        waited = f"a health check waited {worst:.2f} s of a {took:.2f} s request"
        assert worst < max(0.25 * took, 0.15), waited
        assert server.process.process is not None
        counters = [
            child
            for child in psutil.Process(server.process.process.pid).children(recursive=True)
            if PROCESS_MODULE in " ".join(child.cmdline())
        ]
        assert len(counters) == 1
    assert not counters[0].is_running() or counters[0].status() == psutil.STATUS_ZOMBIE


def _run(work) -> object:  # type: ignore[no-untyped-def]
    async def with_counter() -> object:
        counter = TokenCounter()
        try:
            return await work(counter)
        finally:
            await counter.close()

    return asyncio.run(with_counter())


def test_a_tokenizer_that_cannot_be_read_is_refused_in_words(tmp_path: Path) -> None:
    malformed = tmp_path / "malformed.json"
    malformed.write_text('{"model": ')
    oversized = tmp_path / "oversized.json"
    with oversized.open("wb") as file:
        file.truncate(MAX_TOKENIZER_BYTES + 1)  # sparse: the size is refused before anything is read

    async def refusals(counter: TokenCounter) -> list[str]:
        reasons = []
        for path in (malformed, oversized, tmp_path / "missing.json"):
            with pytest.raises(TokenizerUnreadable) as refused:
                await counter.count(path, "hello", True)
            reasons.append(str(refused.value))
        return reasons

    malformed_reason, oversized_reason, missing_reason = _run(refusals)  # type: ignore[misc]
    assert malformed_reason.startswith("Exception: EOF while parsing")
    assert f"over the {MAX_TOKENIZER_BYTES}-byte limit" in oversized_reason
    assert missing_reason.startswith("FileNotFoundError")


def test_a_process_that_dies_costs_the_counts_it_owed_and_the_next_count_starts_another(
    tmp_path: Path,
) -> None:
    tokenizer = tmp_path / "tokenizer.json"
    _word_level_tokenizer(tokenizer, 500_000)

    async def through_a_death(counter: TokenCounter) -> tuple[int | None, int | None, bool]:
        loading = asyncio.ensure_future(counter.count(tokenizer, "w1 w2", True))  # about 1 s to load
        while counter.pid is None:
            await asyncio.sleep(0.01)
        first = counter.pid
        await asyncio.sleep(0.2)
        os.kill(first, signal.SIGKILL)
        owed = await asyncio.wait_for(loading, 10)
        again = await asyncio.wait_for(counter.count(tokenizer, "w1 w2 w3", True), 30)
        return owed, again, counter.pid != first

    assert _run(through_a_death) == (None, 3, True)
