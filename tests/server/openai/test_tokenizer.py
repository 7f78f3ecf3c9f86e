"""Chat templates and token counts from a model's tokenizer files, as Hugging Face lays them out:
rendered in Jinja's sandbox, read only from inside the model's folder, within size limits."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from tests.server.openai.test_chat import RENDERED
from tests.support import ROOT
from trt.server.openai.errors import OpenAIError
from trt.server.openai.schemas import ChatMessage
from trt.server.openai.token_counter import TokenCounter
from trt.server.openai.tokenizer import MAX_TEXT_BYTES, ModelTokenizer, tokenizer_folder

EXAMPLE = ROOT / "model_repository" / "tiny_llm" / "1"
MESSAGES = (ChatMessage("system", "You are terse."), ChatMessage("user", "Name a port."))


def _folder(tmp_path: Path, template: object = None, name: str = "model") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    config = {"bos_token": {"content": "<s>"}, "eos_token": "</s>"}
    if template is not None:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_the_example_models_template_renders_the_conversation() -> None:
    assert tokenizer_folder([EXAMPLE.parent, EXAMPLE]) == EXAMPLE
    assert ModelTokenizer("tiny_llm", EXAMPLE, None).render_chat(MESSAGES) == RENDERED


def _counts(folder: Path | None, texts: list[tuple[str, bool]]) -> list[int | None]:
    """What a model's tokenizer counts for each (text, with special tokens), through the process."""

    async def count_all() -> list[int | None]:
        counter = TokenCounter()
        try:
            tokenizer = ModelTokenizer("m", folder, None, counter=counter)
            return [await tokenizer.count(text, with_special_tokens=special) for text, special in texts]
        finally:
            await counter.close()

    return asyncio.run(count_all())


def test_tokens_are_counted_with_the_models_tokenizer_short_and_long_texts_alike() -> None:
    tokenizer = Tokenizer.from_file(str(EXAMPLE / "tokenizer.json"))
    short, long = "hello there", "general kenobi. " * 50_000
    texts = [(text, special) for text in (short, long) for special in (True, False)]
    expected = [len(tokenizer.encode(text, add_special_tokens=special).ids) for text, special in texts]
    assert _counts(EXAMPLE, texts) == expected


def test_without_a_tokenizer_nothing_is_counted(tmp_path: Path) -> None:
    for folder in (_folder(tmp_path), None):
        assert _counts(folder, [("hello", True)]) == [None]


def test_the_template_sees_the_special_tokens_and_named_templates_pick_default(tmp_path: Path) -> None:
    default = "{{ bos_token }}{{ messages[-1]['content'] }}{{ eos_token }}"
    named = [{"name": "tool_use", "template": "wrong"}, {"name": "default", "template": default}]
    assert ModelTokenizer("m", _folder(tmp_path, named), None).render_chat(MESSAGES) == "<s>Name a port.</s>"


def test_a_chat_template_file_replaces_the_tokenizers(tmp_path: Path) -> None:
    override = tmp_path / "override.jinja"
    override.write_text("{% for m in messages %}[{{ m['role'] }}]{% endfor %}")
    rendered = ModelTokenizer("tiny_llm", EXAMPLE, override).render_chat(MESSAGES)
    assert rendered == "[system][user]"
    beside = _folder(tmp_path)
    (beside / "chat_template.jinja").write_text("{{ messages | length }}")
    assert ModelTokenizer("m", beside, None).render_chat(MESSAGES) == "2"


def test_a_template_that_refuses_the_conversation_is_a_400(tmp_path: Path) -> None:
    template = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system messages here') }}{% endif %}"
    )
    with pytest.raises(OpenAIError) as raised:
        ModelTokenizer("m", _folder(tmp_path, template), None).render_chat(MESSAGES)
    assert raised.value.status == 400 and "no system messages here" in raised.value.message


def test_templates_run_in_the_sandbox(tmp_path: Path) -> None:
    escape = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(OpenAIError) as raised:
        ModelTokenizer("m", _folder(tmp_path, escape), None).render_chat(MESSAGES)
    assert raised.value.status == 400 and "unsafe" in raised.value.message


def test_no_template_or_a_broken_one_says_so(tmp_path: Path) -> None:
    with pytest.raises(OpenAIError) as missing:
        ModelTokenizer("m", _folder(tmp_path, name="plain"), None).render_chat(MESSAGES)
    assert (missing.value.status, missing.value.code) == (400, "no_chat_template")
    with pytest.raises(OpenAIError) as broken:
        ModelTokenizer("m", _folder(tmp_path, "{% for %}", name="broken"), None).render_chat(MESSAGES)
    assert broken.value.status == 500 and "not valid Jinja" in broken.value.message


def test_a_model_folders_files_must_not_lead_out_of_it(tmp_path: Path) -> None:
    outside = _folder(tmp_path, "{{ 'read from elsewhere' }}", name="outside")
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer_config.json").symlink_to(outside / "tokenizer_config.json")
    with pytest.raises(OpenAIError, match="outside its folder"):
        ModelTokenizer("m", model, None).render_chat(MESSAGES)
    # --tokenizer names a folder on purpose, such as a Hugging Face cache snapshot made of links.
    assert ModelTokenizer("m", model, None, confined=False).render_chat(MESSAGES) == "read from elsewhere"


def test_oversized_files_are_refused_before_they_are_read(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "chat_template.jinja").write_text("x" * (MAX_TEXT_BYTES + 1))
    with pytest.raises(OpenAIError, match="over the"):
        ModelTokenizer("m", folder, None).render_chat(MESSAGES)


def test_the_model_folder_is_found_beside_the_version(tmp_path: Path) -> None:
    model = tmp_path / "model"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text("")
    (model / "tokenizer.json").write_text((EXAMPLE / "tokenizer.json").read_text())
    assert tokenizer_folder([model / "1", model]) == model
    assert tokenizer_folder([tmp_path]) is None
