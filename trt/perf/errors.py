"""Errors trt perf reports to its user, each naming what went wrong and how to fix it.

PerfError                   base; ``exit_code`` is what ``trt perf`` exits with
├── OptionError             a flag value trt perf cannot use (exit 2)
├── InputDataError          --input-data / --shape do not fit the model (exit 2)
├── ServerError             the server is unreachable or refused a control call (exit 4)
│   └── ModelNotFound       the server does not know the model (exit 4)
└── MeasurementError        no usable measurement: every request failed, a worker died (exit 4)
"""

from __future__ import annotations


class PerfError(Exception):
    """Base of every error trt perf reports as a message rather than a traceback."""

    exit_code = 4


class OptionError(PerfError):
    exit_code = 2


class InputDataError(PerfError):
    exit_code = 2


class ServerError(PerfError):
    exit_code = 4


class ModelNotFound(ServerError):
    pass


class MeasurementError(PerfError):
    exit_code = 4
