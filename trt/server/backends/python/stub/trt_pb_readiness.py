"""The model's own readiness check, ``is_ready()`` (sync or ``async def``), called as Triton's stub
calls it: anything but a bool, or an exception, is "not ready" and is logged."""

from __future__ import annotations

import asyncio
import inspect
import sys
import traceback
from typing import Any


def has_check(model: Any) -> bool:
    return callable(getattr(model, "is_ready", None))


def check(model: Any) -> bool:
    try:
        result = model.is_ready()
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))  # on the asking thread, apart from execute's loop
    except Exception:
        print(f"is_ready() raised:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        return False
    if type(result) is not bool:
        print("is_ready() must return a boolean value", file=sys.stderr, flush=True)
        return False
    return result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
