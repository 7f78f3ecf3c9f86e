"""Where a request's time went, as the statistics extension reports it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ExecutionTimes:
    queue_ns: int
    input_ns: int
    infer_ns: int
    output_ns: int
