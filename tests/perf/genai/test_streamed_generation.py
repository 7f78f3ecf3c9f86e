"""``trt perf --endpoint-type kserve|generate`` against a served model whose pace is known: the figures
come back as the model's own delays, with genai-perf's definitions (tokens counted by the tokenizer, not
by responses; the first token left out of inter-token latency)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.perf.genai.conftest import FIRST_TOKEN_MS, TOKEN_MS, TOKENS_PER_RESPONSE
from tests.perf.perf_support import run_perf
from tests.support import ServerProcess

OUTPUT_TOKENS = 10
# The first response carries the first two tokens: it is sent when the second is ready.
TTFT_MS = FIRST_TOKEN_MS + (TOKENS_PER_RESPONSE - 1) * TOKEN_MS
LATENCY_MS = FIRST_TOKEN_MS + (OUTPUT_TOKENS - 1) * TOKEN_MS
ITL_MS = (LATENCY_MS - TTFT_MS) / (OUTPUT_TOKENS - 1)
# Serving overhead on a shared 2-core machine: figures may run this much over the model's pace.
SLACK_MS = 60.0


def _args(server: ServerProcess, tokenizer: Path, endpoint: str, *extra: str) -> list[str]:
    url = server.grpc_url if endpoint == "kserve" else server.http_url
    return [
        "-m", "streamer", "--endpoint-type", endpoint, "-u", url, "--tokenizer", str(tokenizer),
        "--synthetic-input-tokens-mean", "40", "--output-tokens-mean", str(OUTPUT_TOKENS),
        "--warmup-request-count", "2", *extra,
    ]  # fmt: skip


def _ms(level: dict[str, object], metric: str, stat: str = "avg") -> float:
    return float(level[metric][stat])  # type: ignore[index]


@pytest.mark.parametrize("endpoint", ["kserve", "generate"])
def test_streamed_figures_are_the_models_own_pace(
    endpoint: str, streamer_server: ServerProcess, tokenizer_path: Path, tmp_path: Path
) -> None:
    run = run_perf(
        *_args(streamer_server, tokenizer_path, endpoint, "--streaming", "--concurrency", "1:2"),
        "--request-count", "6", "--goal", "ttft<2s", "--goal", f"itl<{ITL_MS / 2:g}ms",
        "--json", "-f", str(tmp_path / "sweep.csv"), "--artifact-dir", str(tmp_path / "artifacts"),
        "--plot-file", str(tmp_path / "plot.png"),
    )  # fmt: skip
    assert run.returncode == 0, run
    document = run.report
    assert document["schema"] == "trt-perf-genai/1" and [lv["level"] for lv in document["levels"]] == [1, 2]
    for level in document["levels"]:
        assert level["request_count"]["avg"] == 6 and level["error_count"]["avg"] == 0
        # Tokens as the tokenizer counts the text: 10, though the model sent them in 5 responses.
        assert (
            level["output_sequence_length"]["min"] == level["output_sequence_length"]["max"] == OUTPUT_TOKENS
        )
        assert level["input_sequence_length"]["min"] == level["input_sequence_length"]["max"] == 40
        assert TTFT_MS <= _ms(level, "time_to_first_token", "p50") < TTFT_MS + SLACK_MS, level
        assert LATENCY_MS <= _ms(level, "request_latency", "p50") < LATENCY_MS + SLACK_MS, level
        # (latency - TTFT) / (tokens - 1): counted by responses it would be twice as long.
        assert ITL_MS - 2 < _ms(level, "inter_token_latency", "p50") < ITL_MS + 3, level
        # The second response, two tokens after the first: a difference of two arrival times, which the
        # scheduling of a busy machine can shift either way.
        assert 4 < level["time_to_second_token"]["p50"] < 45, level
        per_user = level["output_token_throughput_per_user"]["p50"]
        assert 1000 / (ITL_MS + 3) < per_user < 1000 / (ITL_MS - 2)
        # One request of 10 tokens every ~latency per slot.
        expected_tokens_per_s = level["level"] * OUTPUT_TOKENS / (LATENCY_MS / 1000)
        assert (
            0.6 * expected_tokens_per_s
            < level["output_token_throughput"]["avg"]
            <= expected_tokens_per_s * 1.05
        )
        # No request meets an ITL goal half the model's pace, but one whose first token the busy
        # machine delayed, its later tokens then arriving together (seen once in a full suite): at most
        # one of the level's six.
        assert level["request_goodput"]["avg"] <= level["request_throughput"]["avg"] / 6 + 1e-9, level
        assert level["input_config"]["endpoint_type"] == endpoint
    rows = list(csv.DictReader((tmp_path / "sweep.csv").open()))
    assert [r["concurrency"] for r in rows] == ["1", "2"]
    assert float(rows[0]["inter_token_latency_avg_ms"]) == pytest.approx(
        _ms(document["levels"][0], "inter_token_latency"), abs=0.01
    )
    folder = tmp_path / "artifacts" / f"streamer-triton-{endpoint}-concurrency2"
    lines = (folder / "profile_export_genai_perf.csv").read_text().splitlines()
    assert lines[0] == "Metric,avg,min,max,p99,p95,p90,p75,p50,p25"
    assert lines[1].startswith("Request Latency (ms),") and lines[4].startswith("Inter Token Latency (ms),")
    assert "Request Goodput (per sec),0.00" in lines
    exported = json.loads((folder / "profile_export_genai_perf.json").read_text())
    assert exported["time_to_first_token"]["unit"] == "ms" and exported["request_count"]["avg"] == 6
    assert (tmp_path / "plot.png").stat().st_size > 10_000
    assert "Time to first token (ms)" in run.stderr + run.stdout or "Time to first token" in run.stdout


def test_unstreamed_generation_has_one_response_per_request(
    streamer_server: ServerProcess, tokenizer_path: Path
) -> None:
    run = run_perf(*_args(streamer_server, tokenizer_path, "generate"), "--request-count", "4", "--json")
    assert run.returncode == 0, run
    level = run.report["levels"][0]
    assert "not streaming" in run.stderr
    # The whole text in one answer: its first token arrives with its last.
    assert _ms(level, "time_to_first_token") == pytest.approx(_ms(level, "request_latency"), rel=1e-9)
    assert level["output_sequence_length"]["avg"] == OUTPUT_TOKENS
    assert "time_to_second_token" not in level


def test_a_request_rate_level_sends_at_that_rate_and_gates_judge_it(
    streamer_server: ServerProcess, tokenizer_path: Path
) -> None:
    run = run_perf(
        *_args(streamer_server, tokenizer_path, "kserve", "--streaming"),
        "--request-rate-range", "20", "--request-count", "20", "--json",
        "--gate", f"ttft_p99>{TTFT_MS:g}ms", "--gate", "itl_avg<1ms", "--gate", "errors==0",
    )  # fmt: skip
    assert run.returncode == 1, run
    level = run.report["levels"][0]
    assert run.report["mode"] == "request_rate" and level["input_config"]["request_rate"] == 20
    # 20 arrivals 50 ms apart, each lasting LATENCY_MS: about 20 / (0.95 s + LATENCY_MS) requests/s.
    expected = 20 / (19 * 0.05 + LATENCY_MS / 1000)
    assert 0.6 * expected < level["request_throughput"]["avg"] < 1.1 * expected, level
    assert f"PASS gate 'ttft_p99>{TTFT_MS:g}ms' passed: time_to_first_token p99 is" in run.stderr
    assert "FAIL gate 'itl_avg<1ms' FAILED: inter_token_latency avg is" in run.stderr
    assert "PASS gate 'errors==0'" in run.stderr and "1 gate(s) failed" in run.stderr
    assert [g["passed"] for g in run.report["gates"]] == [True, False, True]


def test_bad_generative_options_are_refused_before_measuring(tokenizer_path: Path) -> None:
    run = run_perf("-m", "streamer", "--endpoint-type", "chat")
    assert run.returncode == 2 and "needs --tokenizer PATH" in run.stderr, run
    run = run_perf(
        "-m", "m", "--endpoint-type", "chat", "--tokenizer", str(tokenizer_path), "--goal", "ttft<5"
    )
    assert run.returncode == 2 and "give the time a unit" in run.stderr, run
    run = run_perf("-m", "m", "--endpoint-type", "chat", "--tokenizer", "/nonexistent")
    assert run.returncode == 2 and "no tokenizer.json there" in run.stderr, run
    run = run_perf("-m", "m", "--endpoint-type", "kserve", "--tokenizer", str(tokenizer_path), "-b", "2")
    assert run.returncode == 2 and "-b: not for generative runs" in run.stderr, run
