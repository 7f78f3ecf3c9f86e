"""A model with less of the vLLM backend's contract than tiny_llm: settings arrive as request
parameters, token counts come from its tokenizer.json (or are left out, with none), and a stream the
model ends without a reason ends with "stop". And an ensemble in TensorRT-LLM's shape, whose
post-process step runs for several tokens at once."""

from __future__ import annotations

import openai
import pytest
from tokenizers import Tokenizer

from tests.server.openai.conftest import TOKENIZER

PROMPT = "alpha beta gamma"


def test_max_tokens_reaches_a_model_without_sampling_parameters(client: openai.OpenAI) -> None:
    completion = client.completions.create(model="word_echo", prompt=PROMPT, max_tokens=5)
    assert completion.choices[0].text == "alpha beta gamma alpha beta"
    assert completion.choices[0].finish_reason == "stop"


def test_tokens_a_model_does_not_report_are_counted_with_its_tokenizer(client: openai.OpenAI) -> None:
    completion = client.completions.create(model="word_echo", prompt=PROMPT, max_tokens=4)
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == len(tokenizer.encode(PROMPT).ids)
    text = completion.choices[0].text
    assert completion.usage.completion_tokens == len(tokenizer.encode(text, add_special_tokens=False).ids)


def test_without_a_tokenizer_usage_is_left_out_and_chat_has_no_template(client: openai.OpenAI) -> None:
    completion = client.completions.create(model="word_echo_untokenized", prompt=PROMPT, max_tokens=3)
    assert completion.choices[0].text == PROMPT and completion.usage is None
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model="word_echo_untokenized", messages=[{"role": "user", "content": "hi"}]
        )
    assert isinstance(raised.value.body, dict) and raised.value.body["code"] == "no_chat_template"


def test_a_stream_the_model_ends_without_a_reason_ends_with_stop(client: openai.OpenAI) -> None:
    chunks = list(
        client.completions.create(
            model="word_echo",
            prompt=PROMPT,
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts = [chunk.choices[0].text for chunk in chunks if chunk.choices]
    assert "".join(texts) == "alpha beta gamma alpha" and len(texts) == 5  # four words, then the end
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


def test_a_list_setting_cannot_go_to_a_model_without_sampling_parameters(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="no sampling_parameters input"):
        client.completions.create(model="word_echo", prompt=PROMPT, stop=["a", "b"])


def test_an_ensemble_in_tensorrt_llm_s_shape_streams_its_tokens_in_order(client: openai.OpenAI) -> None:
    # `shout` finishes every second word first on its two instances; the stream keeps the order.
    chunks = list(client.completions.create(model="word_pipeline", prompt=PROMPT, max_tokens=6, stream=True))
    texts = [chunk.choices[0].text for chunk in chunks if chunk.choices]
    assert "".join(texts) == "ALPHA BETA GAMMA ALPHA BETA GAMMA"
    assert len([text for text in texts if text]) == 6
    whole = client.completions.create(model="word_pipeline", prompt=PROMPT, max_tokens=4)
    assert whole.choices[0].text == "ALPHA BETA GAMMA ALPHA"
