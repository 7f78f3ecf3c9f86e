"""/v1/completions through the official openai client: whole and streamed, token counts from the
model's tokenizer, max_tokens, stop, echo, and seeds that make sampling repeatable."""

from __future__ import annotations

import openai
from tokenizers import Tokenizer

from tests.server.openai.conftest import MODEL, TOKENIZER

PROMPT = "trt serve speaks Triton's protocol"


def _tokens(text: str) -> int:
    return len(Tokenizer.from_file(str(TOKENIZER)).encode(text).ids)


def _streamed(client: openai.OpenAI, **settings: object) -> tuple[str, list[str | None]]:
    pieces, reasons = [], []
    for chunk in client.completions.create(model=MODEL, prompt=PROMPT, stream=True, **settings):
        pieces.append(chunk.choices[0].text)
        reasons.append(chunk.choices[0].finish_reason)
    return "".join(pieces), reasons


def test_a_completion_has_the_text_the_finish_reason_and_the_tokens_counted(client: openai.OpenAI) -> None:
    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0)
    assert completion.object == "text_completion" and completion.model == MODEL
    assert completion.id.startswith("cmpl-")
    (choice,) = completion.choices
    assert choice.text and choice.finish_reason == "length"
    # Word salad from untrained weights, but text: the generation config keeps stray bytes out.
    assert all(ch.isprintable() or ch in "\n\t" for ch in choice.text), repr(choice.text)
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == _tokens(PROMPT)
    assert completion.usage.completion_tokens == 12
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 12


def test_max_tokens_defaults_to_sixteen_as_in_triton(client: openai.OpenAI) -> None:
    completion = client.completions.create(model=MODEL, prompt=PROMPT, temperature=0)
    assert completion.usage is not None and completion.usage.completion_tokens == 16


def test_the_stream_adds_up_to_the_whole_answer(client: openai.OpenAI) -> None:
    whole = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0)
    text, reasons = _streamed(client, max_tokens=24, temperature=0)
    assert text == whole.choices[0].text
    assert len(reasons) > 2, "one chunk per token, not one for the whole answer"
    assert reasons[-1] == "length" and set(reasons[:-1]) == {None}


def test_the_stream_ends_with_usage_when_asked(client: openai.OpenAI) -> None:
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=6,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (_tokens(PROMPT), 6)
    assert all(chunk.usage is None for chunk in chunks[:-1])


def test_stop_ends_the_text_before_the_stop_sequence_whole_and_streamed(client: openai.OpenAI) -> None:
    free = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=40, temperature=0).choices[0].text
    stop = free[12:15]
    expected = free[: free.index(stop)]
    stopped = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=40, temperature=0, stop=[stop])
    assert stopped.choices[0].text == expected
    assert stopped.choices[0].finish_reason == "stop"
    text, reasons = _streamed(client, max_tokens=40, temperature=0, stop=stop)
    assert text == expected, "a stream never shows what turns out to be the start of a stop sequence"
    assert reasons[-1] == "stop"


def test_echo_puts_the_prompt_first(client: openai.OpenAI) -> None:
    plain = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5, temperature=0)
    echoed = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5, temperature=0, echo=True)
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text
    text, _ = _streamed(client, max_tokens=5, temperature=0, echo=True)
    assert text == PROMPT + plain.choices[0].text


def test_a_seed_makes_sampling_repeatable_and_different_seeds_differ(client: openai.OpenAI) -> None:
    def sample(seed: int) -> str:
        return client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, seed=seed).choices[0].text

    assert sample(7) == sample(7)
    assert len({sample(seed) for seed in (1, 2, 3)}) == 3


def test_temperature_and_top_p_reach_the_model(client: openai.OpenAI) -> None:
    greedy = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, temperature=0)
    # top_p this small keeps only the likeliest token: sampling becomes greedy whatever the seed.
    narrow = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, top_p=1e-6, seed=5)
    assert narrow.choices[0].text == greedy.choices[0].text
    for seed in (5, 6):
        hot = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=20, temperature=2, seed=seed)
        assert hot.choices[0].text != greedy.choices[0].text
