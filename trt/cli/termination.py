"""SIGTERM ends a long command as Ctrl-C does, so that what it started is stopped and removed.

Python's default for SIGTERM ends the process on the spot: no ``finally`` runs. ``trt analyze``
killed that way (``kill``, a CI job cancelled, a Kubernetes Job stopped) left its scratch ``trt
serve`` running, with its models loaded and its temporary repository on disk; ``trt perf`` left the
shared-memory regions it had registered with the server. (What they start also ends with them by
``PR_SET_PDEATHSIG``, for the SIGKILL no handler sees: ``trt.parent_death``.)
"""

from __future__ import annotations

import signal
from types import FrameType


def _interrupt(signal_number: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends the process at once
    raise KeyboardInterrupt


def interrupt_on_sigterm() -> None:
    """From here on, a SIGTERM raises ``KeyboardInterrupt`` in the main thread (once)."""
    try:
        signal.signal(signal.SIGTERM, _interrupt)
    except ValueError:  # not the main thread (a caller embedding the command): leave the default
        pass
