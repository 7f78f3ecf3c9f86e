"""Search strategies over the space: ``brute`` measures everything, ``quick`` climbs one dimension at a
time from the plain config, reads each candidate only around the best concurrency found so far, and stops
along an ordered dimension (instances, threads, delay) at the first value that does not pay. Both then
bisect the concurrency of the leading candidates between the last level that met the latency target and
the first that missed it.

Both read a candidate the same way: at client concurrencies from a doubling ladder (1, 2, 4, ...), its
value is the best-scoring measurement that meets the goals. Latency only grows with concurrency, so a
ladder stops at the first level that misses the latency target."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from trt.analyzer.goals import Goals, Measurement
from trt.analyzer.session import AnalysisSession, BudgetExhausted, CandidateFailed
from trt.analyzer.space import Candidate, SearchSpace

# A change must beat the incumbent by this much to be taken: below it, machine noise decides.
MIN_GAIN = 0.03
# quick stops climbing concurrency when a level adds less than this to throughput.
PLATEAU = 0.05
# quick's passes over the dimensions at most.
MAX_PASSES = 3
# Both modes bisect the concurrency of this many leading candidates before naming the winner.
REFINED = 3
# The order quick tries dimensions in: the large wins (device, batching, parallelism) first.
QUICK_DIMENSIONS = (
    "kind", "batching", "instances", "threads", "streams", "hint", "queue_delay", "preferred", "precision",
)  # fmt: skip
# Dimensions whose values have no order to stop along: each value is tried.
UNORDERED = ("batching", "kind", "precision", "streams", "hint")


class Mode(StrEnum):
    QUICK = "quick"
    BRUTE = "brute"


@dataclass
class Reading:
    """What the measurements of one candidate say."""

    candidate: Candidate
    measurements: list[Measurement] = field(default_factory=list)
    best: Measurement | None = None  # the best that meets the goals
    failure: str | None = None  # why the candidate could not be served or measured

    def consider(self, measurement: Measurement, goals: Goals) -> None:
        self.measurements.append(measurement)
        if goals.meets(measurement) and (
            self.best is None or goals.score(measurement) > goals.score(self.best)
        ):
            self.best = measurement


@dataclass
class SearchResult:
    readings: dict[str, Reading]
    best: Reading | None
    complete: bool  # False when the time budget cut the search short


def _better(goals: Goals, challenger: Reading, incumbent: Reading | None, margin: float) -> bool:
    if challenger.best is None:
        return False
    if incumbent is None or incumbent.best is None:
        return True
    new, old = goals.score(challenger.best), goals.score(incumbent.best)
    return new > old + abs(old) * margin


def _winner(goals: Goals, readings: dict[str, Reading]) -> Reading | None:
    meeting = [r for r in readings.values() if r.best is not None]
    return max(meeting, key=lambda r: goals.score(r.best), default=None)  # type: ignore[arg-type]


def ladder_read(session: AnalysisSession, candidate: Candidate, goals: Goals, levels: list[int]) -> Reading:
    """Every level from the bottom, up to the first that misses the latency target (brute's reading)."""
    reading = Reading(candidate)
    try:
        for concurrency in levels:
            measurement = session.measure(candidate, concurrency)
            reading.consider(measurement, goals)
            if goals.latency_limit_us is not None and goals.latency(measurement) > goals.latency_limit_us:
                break
    except CandidateFailed as exc:
        reading.failure = str(exc)
    return reading


def focused_read(
    session: AnalysisSession,
    candidate: Candidate,
    goals: Goals,
    levels: list[int],
    start: int,
) -> Reading:
    """quick's reading: begin at the incumbent's best level, step down while the target is missed, else
    climb one level and on while each adds at least ``PLATEAU`` to throughput."""
    reading = Reading(candidate)
    try:
        _climb(session, reading, goals, levels, levels.index(start))
    except CandidateFailed as exc:
        reading.failure = str(exc)
    return reading


def _climb(session: AnalysisSession, reading: Reading, goals: Goals, levels: list[int], index: int) -> None:
    candidate = reading.candidate
    first = session.measure(candidate, levels[index])
    reading.consider(first, goals)
    if goals.meets(first):
        previous = first
        for concurrency in levels[index + 1 :]:
            measurement = session.measure(candidate, concurrency)
            reading.consider(measurement, goals)
            if not goals.meets(measurement) or measurement.throughput < previous.throughput * (1 + PLATEAU):
                break
            previous = measurement
    else:
        for concurrency in reversed(levels[:index]):
            measurement = session.measure(candidate, concurrency)
            reading.consider(measurement, goals)
            if goals.meets(measurement):
                break


def bisect_concurrency(session: AnalysisSession, reading: Reading, goals: Goals) -> None:
    """Between a candidate's best level and the ladder level above it that missed the latency target,
    binary-search the concurrency (the ladder doubles, so the best point is often in between)."""
    if reading.best is None or goals.latency_limit_us is None:
        return
    low = reading.best.concurrency
    missed = [
        m.concurrency
        for m in reading.measurements
        if m.concurrency > low and goals.latency(m) > goals.latency_limit_us
    ]
    if not missed:
        return
    high = min(missed)
    try:
        while high - low > max(1, low // 4):
            middle = (low + high) // 2
            measurement = session.measure(reading.candidate, middle)
            reading.consider(measurement, goals)
            if goals.meets(measurement):
                low = middle
            else:
                high = middle
    except CandidateFailed as exc:
        reading.failure = str(exc)


def _finish(
    session: AnalysisSession, goals: Goals, readings: dict[str, Reading], complete: bool
) -> SearchResult:
    """Refine the concurrency of the leading candidates, then name the winner."""
    if complete:
        leaders = sorted(
            (r for r in readings.values() if r.best is not None),
            key=lambda r: -goals.score(r.best),  # type: ignore[arg-type]
        )[:REFINED]
        try:
            for reading in leaders:
                bisect_concurrency(session, reading, goals)
        except BudgetExhausted:
            complete = False
    return SearchResult(readings, _winner(goals, readings), complete)


def brute(session: AnalysisSession, space: SearchSpace, goals: Goals, levels: list[int]) -> SearchResult:
    readings: dict[str, Reading] = {}
    try:
        for candidate in space.all():
            readings[candidate.key] = ladder_read(session, candidate, goals, levels)
    except BudgetExhausted:
        return _finish(session, goals, readings, complete=False)
    return _finish(session, goals, readings, complete=True)


def quick(session: AnalysisSession, space: SearchSpace, goals: Goals, levels: list[int]) -> SearchResult:
    readings: dict[str, Reading] = {}
    try:
        incumbent = ladder_read(session, space.baseline, goals, levels)
        readings[incumbent.candidate.key] = incumbent
        # Passes over the dimensions until one changes nothing: a later pass catches interactions
        # (a precision that pays only with more threads) that one dimension at a time misses.
        for _ in range(MAX_PASSES):
            start_of_pass = incumbent
            for dimension in QUICK_DIMENSIONS:
                for candidate in space.neighbours(incumbent.candidate, dimension):
                    if candidate.key in readings:
                        continue
                    start = incumbent.best.concurrency if incumbent.best else levels[0]
                    reading = focused_read(session, candidate, goals, levels, start)
                    readings[candidate.key] = reading
                    if _better(goals, reading, incumbent, MIN_GAIN):
                        incumbent = reading
                    elif dimension not in UNORDERED and _past(candidate, incumbent, dimension):
                        break  # an ordered dimension that stopped paying: larger values will not either
            if incumbent is start_of_pass:
                break
    except BudgetExhausted:
        return _finish(session, goals, readings, complete=False)
    return _finish(session, goals, readings, complete=True)


def _past(candidate: Candidate, incumbent: Reading, dimension: str) -> bool:
    """Whether ``candidate`` lies beyond the incumbent along an ordered dimension."""
    value: Callable[[Candidate], float] = {
        "instances": lambda c: c.instances,
        "threads": lambda c: c.threads,
        "queue_delay": lambda c: c.max_queue_delay_us,
        "preferred": lambda c: len(c.preferred_batch_sizes),
    }[dimension]
    return value(candidate) > value(incumbent.candidate)


def search(
    mode: Mode, session: AnalysisSession, space: SearchSpace, goals: Goals, levels: list[int]
) -> SearchResult:
    return (brute if mode is Mode.BRUTE else quick)(session, space, goals, levels)


def closest(goals: Goals, readings: dict[str, Reading]) -> tuple[Reading, Measurement] | None:
    """Where nothing meets the goals: the measurement nearest to them, and its candidate."""
    pairs = [(r, m) for r in readings.values() for m in r.measurements]
    if not pairs:
        return None
    return min(pairs, key=lambda pair: (goals.shortfall(pair[1]), -pair[1].throughput))
