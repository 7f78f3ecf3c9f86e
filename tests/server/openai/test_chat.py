"""/v1/chat/completions through the official openai client: the model's chat template makes the
prompt, answers whole and streamed with OpenAI's chunks, and the role is sent first."""

from __future__ import annotations

import openai
from tokenizers import Tokenizer

from tests.server.openai.conftest import MODEL, TOKENIZER

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a port."},
]
# What tiny_llm's template (its tokenizer_config.json) makes of MESSAGES.
RENDERED = "<|system|>\nYou are terse.<|end|>\n<|user|>\nName a port.<|end|>\n<|assistant|>\n"


def test_a_chat_completion_is_an_assistant_message_with_usage(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10, temperature=0)
    assert completion.object == "chat.completion" and completion.id.startswith("chatcmpl-")
    (choice,) = completion.choices
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"
    assert completion.usage is not None
    # The prompt is the template's rendering, tokenized with the model's tokenizer.
    assert completion.usage.prompt_tokens == len(Tokenizer.from_file(str(TOKENIZER)).encode(RENDERED).ids)
    assert completion.usage.completion_tokens == 10


def test_the_template_decides_the_prompt(client: openai.OpenAI) -> None:
    """The same question as a completion of the rendered prompt gets the same greedy answer."""
    chat = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0)
    completion = client.completions.create(model=MODEL, prompt=RENDERED, max_tokens=12, temperature=0)
    assert chat.choices[0].message.content == completion.choices[0].text


def test_streamed_chat_sends_the_role_then_the_content(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    content = [chunk for chunk in chunks if chunk.choices]
    assert "".join(c.choices[0].delta.content or "" for c in content) == whole.choices[0].message.content
    assert content[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12


def test_content_parts_are_joined_and_max_completion_tokens_is_taken(client: openai.OpenAI) -> None:
    text_parts = [{"type": "text", "text": "Name"}, {"type": "text", "text": "a port."}]
    parts = [{"role": "user", "content": text_parts}]
    joined = [{"role": "user", "content": "Name\na port."}]
    first = client.chat.completions.create(
        model=MODEL, messages=parts, max_completion_tokens=7, temperature=0
    )
    second = client.chat.completions.create(model=MODEL, messages=joined, max_tokens=7, temperature=0)
    assert first.choices[0].message.content == second.choices[0].message.content
    assert first.usage is not None and first.usage.completion_tokens == 7
