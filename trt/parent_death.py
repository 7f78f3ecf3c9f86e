"""Child processes that end when the process that started them dies, even by SIGKILL.

Linux's ``PR_SET_PDEATHSIG`` has the kernel send a signal to a process when its parent goes. It
belongs to the thread that forked the child (the signal comes when that thread exits), so it suits
children started from a thread that outlives them: the main thread, or the child itself once
started. Elsewhere (not Linux) nothing is armed, and children rely on their other signs of a parent
gone (a closed pipe or socket).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def end_with_parent(signal_number: int) -> None:
    """From the child itself: be sent ``signal_number`` when the parent dies."""
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal_number, 0, 0, 0)


def ending_with_parent(signal_number: int) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen`` that does ``end_with_parent`` in the child before it
    runs its program (the setting survives ``exec``). ``prctl`` is looked up here, in the parent:
    between fork and exec the child must not load libraries (another thread may hold the loader's
    lock). A child whose parent died before the setting took is ended at once."""
    prctl = _prctl()
    parent = os.getpid()

    def arm() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal_number, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm
