"""Errors ``trt analyze`` reports to its user, each with its exit status."""

from __future__ import annotations


class AnalyzeError(Exception):
    """The analysis could not run (bad option, unreadable model, server failure): exit 2."""

    exit_code = 2
