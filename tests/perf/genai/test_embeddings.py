"""``trt perf --endpoint-type embeddings`` against a real ``trt serve`` with its OpenAI front end and the
example ``tiny_embedding``: requests are measured by their latency (genai-perf's embeddings metrics),
with none of the token metrics, and the options that only make sense for generated text are refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from tests.perf.perf_support import run_perf
from tests.support import ROOT, ServerProcess, free_port


@pytest.fixture(scope="module")
def openai_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    process = ServerProcess(
        [ROOT / "model_repository"],
        [
            "--model-control-mode=explicit",
            "--load-model=tiny_embedding",
            "--load-model=simple",
            "--allow-openai=true",
            "--openai-address=127.0.0.1",
            f"--openai-port={port}",
        ],
    ).start(tmp_path_factory.mktemp("embedding_logs"))
    yield f"127.0.0.1:{port}"
    assert process.alive(), process.log()
    process.stop()


def _run(url: str, tokenizer: Path, *extra: str) -> object:
    return run_perf(
        "-m", "tiny_embedding", "-u", url, "--tokenizer", str(tokenizer), "--endpoint-type", "embeddings",
        "--synthetic-input-tokens-mean", "30", "--request-count", "8", *extra,
    )  # fmt: skip


def test_embeddings_are_measured_by_request_latency(
    openai_url: str, tokenizer_path: Path, tmp_path: Path
) -> None:
    run = _run(
        openai_url, tokenizer_path, "--concurrency", "1:2", "--goal", "latency<30s", "--json",
        "--artifact-dir", str(tmp_path / "artifacts"), "--plot-file", str(tmp_path / "plot.png"),
    )  # fmt: skip
    assert run.returncode == 0, run
    report = run.report
    assert report["endpoint_type"] == "embeddings"
    assert [level["input_config"]["concurrency"] for level in report["levels"]] == [1, 2]
    for level in report["levels"]:
        assert level["request_count"]["avg"] == 8 and level["error_count"]["avg"] == 0
        assert level["request_latency"]["avg"] > 0 and level["request_throughput"]["avg"] > 0
        assert level["input_sequence_length"]["avg"] == 30
        for metric in (
            "time_to_first_token",
            "inter_token_latency",
            "output_sequence_length",
            "output_token_throughput",
        ):
            assert metric not in level, metric
        assert level["request_goodput"]["avg"] == level["request_throughput"]["avg"]  # every one met it
    exported = sorted((tmp_path / "artifacts").rglob("profile_export_genai_perf.json"))
    assert len(exported) == 2
    assert "request_latency" in json.loads(exported[0].read_text())
    assert (tmp_path / "plot.png").stat().st_size > 10_000


def test_the_console_shows_embeddings_metrics(openai_url: str, tokenizer_path: Path) -> None:
    run = _run(openai_url, tokenizer_path, "--concurrency", "1:2")
    assert run.returncode == 0, run
    assert "Embeddings metrics: tiny_embedding, embeddings, concurrency 2" in run.stdout
    assert "Request latency (ms)" in run.stdout and "Time to first token" not in run.stdout
    assert "Output token throughput" not in run.stdout
    # The sweep table keeps the columns embeddings have.
    assert "latency p50 ms" in run.stdout and "requests/s" in run.stdout
    assert "TTFT" not in run.stdout and "output tokens/s" not in run.stdout
    # Nor does the progress: no tokens, and no warning about time to first token.
    assert "concurrency 2: " in run.stderr and "requests/s, latency p99" in run.stderr
    assert "tokens/s" not in run.stderr and "time to first token" not in run.stderr


def test_batch_size_text_sends_several_texts_a_request_and_wants_a_vector_for_each(
    openai_url: str, tokenizer_path: Path
) -> None:
    """An answer with fewer vectors than texts would count as an error: none here, so each request
    got its four; the input length is the four texts' together."""
    run = _run(openai_url, tokenizer_path, "--batch-size-text", "4", "--json")
    assert run.returncode == 0, run
    (level,) = run.report["levels"]
    assert level["request_count"]["avg"] == 8 and level["error_count"]["avg"] == 0
    assert level["input_sequence_length"]["avg"] == 4 * 30
    assert level["input_config"]["batch_size_text"] == 4


def test_prompts_come_from_an_input_file_as_they_are(
    openai_url: str, tokenizer_path: Path, tmp_path: Path
) -> None:
    """Three prompts sent together: each request's input length is the three's token counts together,
    as the tokenizer counts them (not the synthetic mean)."""
    texts = ["the cat sat on the mat", "stocks fell sharply today", "a b c"]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokens = sum(len(tokenizer.encode(t, add_special_tokens=False).ids) for t in texts)
    run = _run(openai_url, tokenizer_path, "--input-file", str(prompts), "--batch-size-text", "3", "--json")
    assert run.returncode == 0, run
    (level,) = run.report["levels"]
    assert level["error_count"]["avg"] == 0 and level["request_count"]["avg"] == 8
    assert level["input_sequence_length"]["avg"] == tokens != 3 * 30
    assert level["input_config"]["input_file"] == str(prompts)
    # A line that is not a prompt stops the run before any request, by its number.
    prompts.write_text('{"text": "fine"}\n{"prompt": "wrong key"}\n')
    run = _run(openai_url, tokenizer_path, "--input-file", str(prompts))
    assert run.returncode == 2 and 'line 2: expected an object with a "text" string' in run.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--streaming",), "embeddings are answered whole"),
        (("--output-tokens-mean", "8"), "embeddings generate no tokens"),
        (("--goal", "ttft<1s"), "embeddings have request latency only"),
        (("--batch-size-text", "0"), "--batch-size-text must be between 1 and 2048"),
    ],
)
def test_what_applies_to_generated_text_is_refused(
    openai_url: str, tokenizer_path: Path, extra: tuple[str, ...], message: str
) -> None:
    run = _run(openai_url, tokenizer_path, *extra)
    assert run.returncode == 2, run
    assert message in run.stderr


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("--endpoint-type", "chat"), "only embeddings requests carry several texts"),
        ((), "--batch-size-text is for --endpoint-type embeddings"),
    ],
    ids=["chat", "tensors"],
)
def test_batch_size_text_is_refused_where_requests_carry_no_list_of_texts(
    openai_url: str, tokenizer_path: Path, arguments: tuple[str, ...], message: str
) -> None:
    run = run_perf(
        "-m", "tiny_embedding", "-u", openai_url, "--tokenizer", str(tokenizer_path), "--batch-size-text",
        "2", *arguments,
    )  # fmt: skip
    assert run.returncode == 2, run
    assert message in run.stderr


def test_a_model_that_does_not_embed_fails_in_the_servers_words(
    openai_url: str, tokenizer_path: Path
) -> None:
    run = run_perf(
        "-m", "simple", "-u", openai_url, "--tokenizer", str(tokenizer_path), "--endpoint-type", "embeddings",
        "--synthetic-input-tokens-mean", "8", "--request-count", "2",
    )  # fmt: skip
    assert run.returncode == 4, run
    assert "no request succeeded (HTTP 400: model 'simple' does not embed" in run.stderr
