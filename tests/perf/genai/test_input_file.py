"""Prompts from a file (``--input-file``), read as hostile input: JSON lines of ``{"text": ...}``,
bounded in size, in count and per prompt, and refused by line number where a line is not a prompt."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.perf.perf_support import run_perf
from trt.perf.errors import OptionError
from trt.perf.genai.input_file import MAX_FILE_BYTES, MAX_PROMPTS, MAX_TEXT_CHARS, read_prompt_texts
from trt.perf.genai.options import EndpointType, GenAIOptions
from trt.perf.genai.profiler import make_prompts
from trt.perf.genai.tokenizer import TokenCounter


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text(text)
    return path


def test_each_line_is_a_prompt_in_order_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = _file(tmp_path, '{"text": "first car"}\n\n{"text_input": "older name"}\r\n  \n{"text": ""}\n')
    assert read_prompt_texts(path) == ["first car", "older name", ""]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"text": "ok"}\n{"text": 3}\n', 'line 2: expected an object with a "text" string'),
        ('{"text": "ok"}\n["text"]\n', "line 2: expected an object"),
        ('{"text": "ok"}\n{"text": "unterminated\n', "line 2: not JSON"),
        ("\n\n", "no prompts in it"),
        ('{"text": "' + "x" * (MAX_TEXT_CHARS + 1) + '"}\n', "line 1: a prompt of more than"),
    ],
)
def test_a_line_that_is_not_a_prompt_is_refused_by_its_number(
    tmp_path: Path, content: str, message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        read_prompt_texts(_file(tmp_path, content))


def test_more_prompts_than_the_bound_are_refused(tmp_path: Path) -> None:
    path = _file(tmp_path, '{"text": "a"}\n' * (MAX_PROMPTS + 1))
    with pytest.raises(OptionError, match=f"more than {MAX_PROMPTS:,} prompts"):
        read_prompt_texts(path)


def test_a_file_past_the_size_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as handle:  # sparse: no disk is used, and nothing is read
        handle.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(OptionError, match="more than the 268,435,456 taken"):
        read_prompt_texts(path)


def test_a_missing_file_or_a_folder_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="No such file"):
        read_prompt_texts(tmp_path / "absent.jsonl")
    with pytest.raises(OptionError, match="a folder"):
        read_prompt_texts(tmp_path)


def test_a_tensor_run_refuses_an_input_file_and_names_its_own_option(tmp_path: Path) -> None:
    run = run_perf("-m", "simple", "-u", "127.0.0.1:1", "--input-file", str(_file(tmp_path, "")))
    assert run.returncode == 2, run
    assert "--input-file holds prompts, for --endpoint-type runs; tensors: --input-data" in run.stderr


def test_options_the_file_makes_unused_and_lines_left_out_are_named(
    tmp_path: Path, tokenizer_path: Path
) -> None:
    path = _file(tmp_path, "".join(f'{{"text": "prompt {i}"}}\n' for i in range(7)))
    options = GenAIOptions(
        model="m",
        endpoint_type=EndpointType.EMBEDDINGS,
        tokenizer=tokenizer_path,
        input_file=path,
        batch_size_text=3,
        num_prompts=40,
        input_tokens_mean=128,
    )
    warned: list[str] = []
    prompts = make_prompts(options, TokenCounter.load(tokenizer_path), warned.append)
    assert [p.batch for p in prompts] == [
        ("prompt 0", "prompt 1", "prompt 2"),
        ("prompt 3", "prompt 4", "prompt 5"),
    ]
    assert warned == [
        "--synthetic-input-tokens-mean, --num-prompts: not used, the prompts are --input-file's",
        "--input-file: the last 1 of 7 prompts do not fill a request of --batch-size-text 3 and are not sent",
    ]
    # Left at their defaults, the synthetic options go unmentioned; a whole number of groups leaves none out.
    warned.clear()
    make_prompts(
        replace(options, num_prompts=100, input_tokens_mean=550, batch_size_text=7),
        TokenCounter.load(tokenizer_path),
        warned.append,
    )
    assert warned == []
