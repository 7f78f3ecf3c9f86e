"""The model process's connection, as the ``pb_utils`` classes reach it.

The process that hosts the model (``trt_python_stub``) installs its runtime here with ``install``:
what carries BLS calls, response senders, metrics and log lines to the server. The pb_utils modules
call ``trt_pb_runtime.current``, looked up on each use, as it is installed after they are imported.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any

current: Any = None  # installed by the model process


def install(runtime: Any) -> None:
    global current
    current = runtime


# Messages from ``__del__``: releases of metric families and series, and response senders dropped
# without their final flag. ``__del__`` may run inside any allocation, even while this process is
# sending a message, so it only queues, and writes a byte to ``released_pipe``: the runtime sends
# them ahead of its next message, or from a thread of its own woken by that byte (a model may send
# nothing else for long, while the request it dropped waits).
released: deque[tuple[Any, ...]] = deque()
released_pipe = -1


def release(message: tuple[Any, ...]) -> None:
    released.append(message)
    if released_pipe >= 0:
        try:
            os.write(released_pipe, b"\0")
        except OSError:  # full: a wake-up is pending already
            pass
