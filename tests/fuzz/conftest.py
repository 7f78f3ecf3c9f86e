"""Hypothesis profiles: ``ci`` (the default: 400 examples a test, the gRPC request builder half of
that and the HTTP/2 timers property a quarter, 7,100 across tests/fuzz) and ``long`` (what
``scripts/fuzz.py`` runs for as long as it is given). No example database is written: CI machines
are fresh, and a failure prints the example that reproduces it."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "long",
    max_examples=int(os.environ.get("TRT_FUZZ_EXAMPLES", "200000")),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
settings.load_profile(os.environ.get("TRT_FUZZ_PROFILE", "ci"))
