"""Where a request's CPU goes in `trt serve`: py-spy samples of the server sorted into stages.

py-spy's raw output is one line per distinct stack (root first, leaf last) and its sample count. A
stack whose root is ``threading``'s bootstrap is a worker thread (the backend's executor, ONNX
Runtime's pool); the rest is the event loop's thread. On the loop's thread a sample counts as:
- decode / encode: inside a transport codec (``trt/server/{http,grpc}/codec.py``), named by its
  outermost codec function;
- core: the deepest trt frame is in ``trt/server/core`` (scheduling, statistics, the request's
  future), or anything under ``trt/server/backends`` run on the loop;
- transport: the deepest trt frame is elsewhere in trt (HTTP/1.1 parsing, HTTP/2 frames, HPACK, the
  app's routing, socket writes it makes);
- event loop: no trt frame at all (asyncio/uvloop dispatch, epoll), except the backend executor's
  answer being chained back onto the loop (``concurrent.futures``), which is the core's.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
STAGES = ("transport", "decode", "core", "encode", "event loop")


def _frames(stack: str) -> list[tuple[str, str]]:
    frames = []
    for part in stack.split(";"):
        match = _FRAME.match(part.strip())
        if match:
            frames.append((match["func"], match["file"]))
    return frames


def _under(file: str, folder: str) -> bool:
    """py-spy names files relative to sys.path (``trt/server/...``) or in full."""
    return file.startswith(folder) or f"/{folder}" in file


def _is_worker_thread(frames: list[tuple[str, str]]) -> bool:
    return any(func.startswith("_bootstrap") and file.endswith("threading.py") for func, file in frames[:3])


def loop_stage(frames: list[tuple[str, str]]) -> str:
    trt_frames = [
        (func, file) for func, file in frames if _under(file, "trt/server/") or _under(file, "trt/http2/")
    ]
    codec = [func for func, file in trt_frames if re.search(r"(^|/)trt/server/(http|grpc)/codec\.py$", file)]
    if codec:
        return "encode" if "encode" in codec[0] else "decode"
    if not trt_frames:
        # The executor's answer arriving on the loop: the instance pool's hand-off, the core's part.
        handoff = any("_chain_future" in func or "concurrent/futures" in file for func, file in frames)
        return "core" if handoff else "event loop"
    _, deepest = trt_frames[-1]
    if _under(deepest, "trt/server/core/") or _under(deepest, "trt/server/backends/"):
        return "core"
    return "transport"


def stage_samples(raw: Path) -> tuple[Counter[str], int]:
    """Samples per stage on the event loop's thread, and the samples on other threads."""
    stages: Counter[str] = Counter()
    others = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = _frames(stack)
        if _is_worker_thread(frames):
            others += int(count_text)
        else:
            stages[loop_stage(frames)] += int(count_text)
    return stages, others
