"""The generative engine's parts on their own: the event-stream parser, genai-perf's metric definitions
on records of known timing, goals, prompts of exact token counts, and the missing-extra message."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from trt.perf.errors import OptionError
from trt.perf.genai.endpoints import check_embeddings
from trt.perf.genai.goals import parse_goal
from trt.perf.genai.metrics import level_metrics
from trt.perf.genai.prompts import Prompt, PromptMaker, batched
from trt.perf.genai.records import RequestRecord
from trt.perf.genai.sse import MAX_EVENT_BYTES, EventParser, EventStreamError
from trt.perf.genai.tokenizer import TokenCounter
from trt.perf.transport import RequestFailed

MS = 1_000_000


def test_events_are_whole_however_the_bytes_are_cut() -> None:
    stream = (
        b'data: {"a": 1}\r\n\r\n: keep-alive\n\nevent: error\ndata: line one\ndata: line two\n\n'
        b"data: [DONE]\r\r: a comment after CR-only lines\n"
    )
    for cut in range(1, len(stream)):
        parser = EventParser()
        events = parser.feed(stream[:cut]) + parser.feed(stream[cut:])
        assert [(e.name, e.data) for e in events] == [
            ("message", '{"a": 1}'),
            ("error", "line one\nline two"),
            ("message", "[DONE]"),
        ], cut


def test_an_endless_event_line_is_refused() -> None:
    with pytest.raises(EventStreamError):
        EventParser().feed(b"data: " + b"x" * (MAX_EVENT_BYTES + 1))


def _record(prompt_tokens: int, start_ms: float, arrivals: list[tuple[float, str]]) -> RequestRecord:
    record = RequestRecord(Prompt("p", prompt_tokens, 0), start_ns=int(start_ms * MS))
    for at_ms, text in arrivals:
        record.received(text, int(at_ms * MS))
    record.end_ns = record.times_ns[-1] if record.times_ns else 0
    return record


def test_metrics_follow_genai_perfs_definitions(tokenizer_path: Path) -> None:
    counter = TokenCounter.load(tokenizer_path)
    records = [
        # 4 tokens in 2 responses, the empty final one ignored: TTFT 100, latency 160, ITL (160-100)/3 = 20.
        _record(7, 0, [(100, " the of"), (160, " and to"), (170, "")]),
        # 1 token: no inter-token latency at all (nor a second token).
        _record(5, 50, [(130, " in")]),
        # 3 tokens, 3 responses: TTFT 40, ITL (100-40)/2 = 30, second token after 30.
        _record(9, 200, [(240, " is"), (270, " that"), (300, " it")]),
    ]
    failed = RequestRecord(Prompt("p", 3, 0), start_ns=0, error="HTTP 500: boom")
    goals = (parse_goal("ttft<110ms"), parse_goal("itl<25ms"))
    level = level_metrics(4, [*records, failed], counter, goals)
    assert level.request_count == 3 and level.error_count == 1 and level.error_samples == ("HTTP 500: boom",)
    assert [r.output_sequence_length for r in level.requests] == [4, 1, 3]
    assert [r.time_to_first_token / MS for r in level.requests] == [100, 80, 40]
    assert [r.inter_token_latency and r.inter_token_latency / MS for r in level.requests] == [20, None, 30]
    assert (
        level.requests[0].time_to_second_token == 60 * MS and level.requests[1].time_to_second_token is None
    )
    assert level.requests[0].output_token_throughput_per_user == pytest.approx(50.0)
    itl = level.stats["inter_token_latency"]
    assert itl.count == 2 and itl.avg == 25 * MS and itl.std == 5 * MS  # population std, as numpy's default
    ttft = level.stats["time_to_first_token"]
    # numpy's interpolated percentile: p50 of (40, 80, 100) is 80, p25 is 60 (nearest rank would give 40).
    assert ttft.percentiles[50] == 80 * MS and ttft.percentiles[25] == 60 * MS
    assert level.stats["input_sequence_length"].avg == 7.0
    # From the first request sent (0 ms) to the last text (300 ms).
    assert level.benchmark_duration_s == pytest.approx(0.3)
    assert level.output_token_throughput == pytest.approx(8 / 0.3)
    assert level.request_throughput == pytest.approx(3 / 0.3)
    # The first meets both goals; the third misses the ITL one (30 > 25); the second has no ITL at all,
    # so it cannot meet an ITL goal (AIPerf's rule).
    assert level.good_request_count == 1 and level.request_goodput == pytest.approx(1 / 0.3)


def test_goals_take_units_and_genai_perfs_form() -> None:
    assert parse_goal("ttft<200ms").limit == 200 * MS
    assert parse_goal("time_to_first_token:150").limit == 150 * MS  # --goodput's milliseconds
    assert parse_goal("itl<=0.05s").metric == "inter_token_latency"
    per_user = parse_goal("tps_per_user>20")
    assert per_user.higher_is_better and per_user.limit == 20
    for bad in ("ttft>200ms", "ttft<200", "speed<3ms", "tps_per_user<5"):
        with pytest.raises(OptionError):
            parse_goal(bad)


def test_prompts_have_the_token_counts_asked_for(tokenizer_path: Path) -> None:
    counter = TokenCounter.load(tokenizer_path)
    prompts = PromptMaker(counter, seed=3).make(20, 64, 16, 32, 8)
    assert all(counter.count(p.text) == p.tokens for p in prompts)
    lengths = [p.tokens for p in prompts]
    assert len(set(lengths)) > 5 and 40 < sum(lengths) / len(lengths) < 90
    assert all(p.max_tokens >= 1 for p in prompts)
    exact = PromptMaker(counter, seed=3).make(5, 100, 0, 0, 0)
    assert [p.tokens for p in exact] == [100] * 5 and all(p.max_tokens == 0 for p in exact)
    assert PromptMaker(counter, seed=3).make(3, 10, 0, 0, 0) == PromptMaker(counter, seed=3).make(
        3, 10, 0, 0, 0
    )


def test_batched_prompts_carry_their_group_and_its_tokens_together() -> None:
    prompts = [Prompt(f"t{i}", i, 0) for i in range(1, 8)]
    groups = batched(prompts, 3)
    assert [g.batch for g in groups] == [("t1", "t2", "t3"), ("t4", "t5", "t6")]  # t7 left over
    assert [g.tokens for g in groups] == [6, 15] and [g.texts for g in groups] == [3, 3]
    assert batched(prompts, 1) is prompts and prompts[0].texts == 1


def test_an_embeddings_answer_needs_a_vector_for_every_text() -> None:
    two = b'{"data": [{"embedding": [0.5]}, {"embedding": "AAAAPw=="}]}'
    check_embeddings(two, 2)
    with pytest.raises(RequestFailed, match="1 items in 'data' for 2 texts"):
        check_embeddings(b'{"data": [{"embedding": [0.5]}]}', 2)
    with pytest.raises(RequestFailed, match="has no 'embedding'"):
        check_embeddings(b'{"data": [{"embedding": [0.5]}, {"embedding": []}]}', 2)


def test_without_tokenizers_the_error_names_the_extra(
    tokenizer_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(OptionError, match=re.escape("pip install 'trt-serve[genai]'")):
        TokenCounter.load(tokenizer_path)


def test_a_file_that_is_not_a_tokenizer_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(OptionError, match=re.escape("not a tokenizers tokenizer.json")):
        TokenCounter.load(tmp_path)
