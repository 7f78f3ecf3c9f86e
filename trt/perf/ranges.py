"""Parsing of perf_analyzer's range and shape arguments (``1:64[:step]``, ``NAME:d1,d2``)."""

from __future__ import annotations

from trt.perf.errors import OptionError


def concurrency_levels(text: str, doubling_by_default: bool) -> list[int]:
    """``start[:end[:step]]`` as the concurrency levels to measure.

    Without a step, ``--concurrency 1:64`` doubles (1, 2, 4, ... 64, then ``end`` if doubling skips it);
    ``--concurrency-range`` keeps perf_analyzer's step of 1 so existing scripts get the same rows.
    """
    parts = text.split(":")
    if not 1 <= len(parts) <= 3 or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise OptionError(f"concurrency range '{text}': expected START[:END[:STEP]] with whole numbers")
    start = int(parts[0])
    end = int(parts[1]) if len(parts) > 1 else start
    if start < 1 or end < start:
        raise OptionError(f"concurrency range '{text}': need 1 <= START <= END")
    if len(parts) == 3:
        step = int(parts[2])
        if step < 1:
            raise OptionError(f"concurrency range '{text}': STEP must be at least 1")
        return list(range(start, end + 1, step))
    if not doubling_by_default:
        return list(range(start, end + 1))
    levels = [start]
    while levels[-1] * 2 <= end:
        levels.append(levels[-1] * 2)
    if levels[-1] != end:
        levels.append(end)
    return levels


def rate_levels(text: str) -> list[float]:
    """``start[:end[:step]]`` request rates (requests per second), step 1 as in perf_analyzer."""
    parts = text.split(":")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise OptionError(f"request-rate range '{text}': expected START[:END[:STEP]] numbers") from None
    if not 1 <= len(values) <= 3:
        raise OptionError(f"request-rate range '{text}': expected START[:END[:STEP]]")
    start = values[0]
    end = values[1] if len(values) > 1 else start
    step = values[2] if len(values) > 2 else 1.0
    if start <= 0 or end < start or step <= 0:
        raise OptionError(f"request-rate range '{text}': need 0 < START <= END and STEP > 0")
    levels: list[float] = []
    index = 0
    while start + index * step <= end + 1e-9:
        levels.append(round(start + index * step, 6))
        index += 1
    return levels


def parse_shapes(values: list[str]) -> dict[str, tuple[int, ...]]:
    """``--shape NAME:d1,d2`` (repeatable): the shape of one batch element of input NAME."""
    shapes: dict[str, tuple[int, ...]] = {}
    for value in values:
        name, sep, dims = value.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims else ()
        except ValueError:
            shape = (-1,)
        if not sep or not name or any(d < 0 for d in shape):
            raise OptionError(f"--shape '{value}': expected NAME:d1,d2,... with non-negative dimensions")
        shapes[name] = shape
    return shapes


def parse_id_range(text: str) -> tuple[int, int]:
    """``--sequence-id-range start[:end]`` as (first id, how many ids)."""
    parts = text.split(":")
    if not 1 <= len(parts) <= 2 or not all(p.isascii() and p.isdigit() for p in parts):
        raise OptionError(f"--sequence-id-range '{text}': expected START[:END] whole numbers")
    start = int(parts[0])
    end = int(parts[1]) if len(parts) == 2 else 2**32 - 1
    if start < 1 or end <= start:
        raise OptionError(f"--sequence-id-range '{text}': need 1 <= START < END")
    return start, end - start
