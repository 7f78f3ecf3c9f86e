"""tiny_llm's engine in-process (model_repository/tiny_llm/1/tiny_llm_engine.py): what it refuses, the
bound on what waits, and that no one asks about a request once its final response is sent."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from tests.support import ROOT

VERSION = ROOT / "model_repository" / "tiny_llm" / "1"


@pytest.fixture(scope="module")
def engine() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tiny_llm_engine", VERSION / "tiny_llm_engine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def scheduler(engine: ModuleType) -> Iterator[Any]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(VERSION / "tokenizer.json"))
    running = engine.Scheduler(engine.LlamaDecoder(VERSION), tokenizer, max_num_seqs=1, max_waiting=1)
    yield running
    running.stop()


def _sequence(engine: ModuleType, done: threading.Event, tokens: int, **callbacks: Any) -> Any:
    def on_output(sequence: Any, text: str, count: int, finish: str | None) -> None:
        if finish:
            done.set()

    return engine.Sequence(
        prompt_ids=[0, 50, 60],
        params=engine.SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True),
        on_output=callbacks.get("on_output", on_output),
        on_error=lambda sequence, message, cancelled: done.set(),
        **{k: v for k, v in callbacks.items() if k != "on_output"},
    )


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ('{"max_tokens": 0}', "max_tokens must be at least 1"),
        ('{"temperature": -1}', "temperature must be non-negative"),
        ('{"top_p": 0}', "top_p must be in (0, 1]"),
        ('{"n": 2}', "only n=1"),
        ('{"stop": [""]}', "stop must be a non-empty string"),
        ('{"best_of": 2}', "sampling parameter 'best_of' is not supported"),
        ('{"seed": 1.5}', "seed must be an integer"),
        ("[1]", "must be a JSON object"),
    ],
)
def test_sampling_parameters_it_cannot_honour_are_refused(
    engine: ModuleType, document: str, message: str
) -> None:
    with pytest.raises(
        engine.SamplingError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        engine.SamplingParams.from_json(document)


def test_what_waits_is_bounded(engine: ModuleType, scheduler: Any) -> None:
    done = [threading.Event() for _ in range(3)]
    scheduler.submit(_sequence(engine, done[0], 500))  # runs
    scheduler.submit(_sequence(engine, done[1], 5))  # waits
    with pytest.raises(engine.Overloaded, match="max_num_seqs 1 \\+ max_waiting 1"):
        scheduler.submit(_sequence(engine, done[2], 5))
    assert done[0].wait(60) and done[1].wait(60)
    scheduler.submit(_sequence(engine, done[2], 5))  # room again once they ended
    assert done[2].wait(60)


def test_a_prompt_longer_than_the_context_is_refused(engine: ModuleType, scheduler: Any) -> None:
    sequence = _sequence(engine, threading.Event(), 5)
    sequence.prompt_ids = [0] * 1024
    with pytest.raises(engine.SamplingError, match="the prompt is 1024 tokens; this model's context is 1024"):
        scheduler.submit(sequence)


def test_no_one_asks_whether_a_request_was_cancelled_after_its_final_response(
    engine: ModuleType, scheduler: Any
) -> None:
    """Asking then crashed Triton 2.51. Many short requests, asked about while they run (each
    question taking a round trip's time), race their final responses."""
    scheduler.max_num_seqs, scheduler.max_waiting = 4, 64
    late: list[int] = []
    asked = [0]
    events = []
    for index in range(40):
        done, ended = threading.Event(), threading.Event()

        def on_output(
            sequence: Any, text: str, count: int, finish: str | None, ended: Any = ended, done: Any = done
        ) -> None:
            if finish:
                ended.set()
                done.set()

        def is_cancelled(index: int = index, ended: threading.Event = ended) -> bool:
            asked[0] += 1
            time.sleep(0.002)  # a round trip to the server: the sequence may end meanwhile
            if ended.is_set():
                late.append(index)
            return False

        scheduler.submit(_sequence(engine, done, 20, on_output=on_output, is_cancelled=is_cancelled))
        events.append(done)
    assert all(event.wait(60) for event in events)
    assert asked[0] > 0, "the watcher never asked: the test proves nothing"
    assert late == []
