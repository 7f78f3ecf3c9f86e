"""The search strategies on a known landscape: quick must find brute's best with far fewer readings.

The landscape is a formula, not a server: what is under test here is the search, which only sees
measurements. The served path is tested end to end in test_analyze.py."""

from __future__ import annotations

import math

from trt.analyzer.goals import Goals, Measurement
from trt.analyzer.search import brute, quick
from trt.analyzer.session import BudgetExhausted
from trt.analyzer.space import Candidate, SearchSpace


def _space() -> SearchSpace:
    return SearchSpace(
        platform="onnxruntime_onnx",
        batchable=True,
        max_batch_sizes=(8, 4, 16, 32),
        queue_delays_us=(0, 500, 2000),
        preferred_batch_sizes=((),),
        dynamic_batching=(False, True),
        instances=(1, 2, 3, 4),
        kinds=("KIND_CPU",),
        precisions=("fp32", "fp16"),
        threads=(0,),
        cores=4,
    )


class LandscapeSession:
    """Throughput rises with concurrency to a ceiling set by the config; latency follows Little's law."""

    def __init__(self, budget: int | None = None) -> None:
        self.measured: set[tuple[str, int]] = set()
        self.budget = budget

    @staticmethod
    def ceiling(c: Candidate) -> float:
        batching = 1.0 + (math.log2(c.max_batch_size) * 0.4 if c.dynamic_batching else 0.0)
        instances = [1.0, 1.6, 1.8, 1.7][c.instances - 1]
        delay = 1.0 + (0.05 if c.max_queue_delay_us == 500 else -0.1 if c.max_queue_delay_us else 0.0)
        precision = 1.3 if c.precision == "fp16" else 1.0
        return 1000 * batching * instances * delay * precision

    def measure(self, candidate: Candidate, concurrency: int) -> Measurement:
        if self.budget is not None and len(self.measured) >= self.budget:
            raise BudgetExhausted
        self.measured.add((candidate.key, concurrency))
        throughput = self.ceiling(candidate) * concurrency / (concurrency + 2)
        latency_us = concurrency / throughput * 1e6 + candidate.max_queue_delay_us
        latency = {
            "avg": latency_us,
            "p50": latency_us,
            "p90": latency_us,
            "p95": latency_us,
            "p99": latency_us,
        }
        return Measurement(candidate.key, concurrency, throughput, latency, 0, None, True, 1.0)


LEVELS = [1, 2, 4, 8, 16, 32, 64]


def test_quick_finds_brutes_best_with_at_most_a_third_of_the_measurements() -> None:
    goals = Goals(latency_limit_us=20_000)
    exhaustive, searched = LandscapeSession(), LandscapeSession()
    best_brute = brute(exhaustive, _space(), goals, LEVELS).best  # type: ignore[arg-type]
    best_quick = quick(searched, _space(), goals, LEVELS).best  # type: ignore[arg-type]
    assert best_brute is not None and best_quick is not None and best_brute.best and best_quick.best
    assert best_quick.best.throughput >= 0.95 * best_brute.best.throughput
    assert len(searched.measured) * 3 <= len(exhaustive.measured), (
        len(searched.measured),
        len(exhaustive.measured),
    )
    assert best_brute.candidate.precision == "fp16" and best_brute.candidate.dynamic_batching


def test_every_chosen_measurement_meets_the_target() -> None:
    goals = Goals(latency_limit_us=5_000)
    result = quick(LandscapeSession(), _space(), goals, LEVELS)  # type: ignore[arg-type]
    assert result.best is not None and result.best.best is not None
    assert result.best.best.latency_us["p99"] <= 5_000
    for reading in result.readings.values():
        if reading.best is not None:
            assert goals.meets(reading.best)


def test_a_spent_budget_returns_the_best_so_far_as_incomplete() -> None:
    result = brute(LandscapeSession(budget=10), _space(), Goals(latency_limit_us=20_000), LEVELS)  # type: ignore[arg-type]
    assert not result.complete
    assert result.best is not None


def test_the_space_never_oversubscribes_the_cores() -> None:
    space = SearchSpace(
        platform="onnxruntime_onnx", batchable=False, max_batch_sizes=(0,), queue_delays_us=(0,),
        preferred_batch_sizes=((),), dynamic_batching=(False,), instances=(1, 2), kinds=("KIND_CPU",),
        precisions=("fp32",), threads=(1, 2), cores=2,
    )  # fmt: skip
    pairs = sorted((c.instances, c.threads) for c in space.all())
    assert pairs == [(1, 1), (1, 2), (2, 1)]


def test_tensorrt_fp16_is_a_gpu_config_of_the_fp32_file() -> None:
    from pathlib import Path

    from trt.analyzer.session import AnalysisSession, Checkpoint, MeasureSettings
    from trt.server.core.models.config import parse_config_text

    base = parse_config_text(
        'name: "m" platform: "onnxruntime_onnx" max_batch_size: 8 '
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ] '
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]'
    )
    session = AnalysisSession(
        "m",
        None,
        base,
        {},
        MeasureSettings(),
        Checkpoint(Path("unused"), ""),
        None,
        {},  # type: ignore[arg-type]
    )
    candidate = Candidate(precision="trt_fp16", max_batch_size=8, instances=1, kind="KIND_GPU")
    config = session.config_for(candidate)
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt" and accelerator.parameters["precision_mode"] == "FP16"
    assert config.instance_group[0].kind == config.instance_group[0].KIND_GPU
    space = _space()
    assert not space.allows(Candidate(precision="trt_fp16", kind="KIND_CPU"))
    assert space.allows(candidate)
