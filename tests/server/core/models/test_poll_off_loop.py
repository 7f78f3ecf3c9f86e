"""Polling the repository stats every file of every model; that walk runs on a thread, so the event
loop goes on answering meanwhile (on it, 200 models of 50 files held every request 0.13 s a poll, and a
network file system's stats are slower)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import longest_loop_gap_while, write_simple
from trt.server.core.models.repository import fingerprint
from trt.server.core.options import CoreOptions, ModelControlMode
from trt.server.core.server import InferenceServer

FILES = 5000


@pytest.fixture
def fine_gil_switching() -> Iterator[None]:
    """The loop's turn comes every millisecond rather than every five: a gap is the walk's, not the GIL's."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("fine_gil_switching")
def test_a_poll_walks_the_repository_off_the_event_loop(tmp_path: Path) -> None:
    write_simple(tmp_path)
    assets = tmp_path / "simple" / "1" / "assets"
    for index in range(FILES):
        folder = assets / str(index // 500)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{index}.txt").write_text("x")

    async def run() -> tuple[float, float]:
        core = InferenceServer(
            CoreOptions(model_repositories=(tmp_path,), model_control_mode=ModelControlMode.POLL)
        )
        await core.start()
        try:
            began = time.perf_counter()
            fingerprint(tmp_path / "simple")  # the walk itself, on the loop, for scale
            walk = time.perf_counter() - began
            (tmp_path / "simple" / "1" / "assets" / "new.txt").write_text("changed")  # a reload too
            gap = await longest_loop_gap_while(asyncio.ensure_future(core.models.poll_once()))
            return walk, gap
        finally:
            await core.stop()

    walk, gap = asyncio.run(run())
    assert gap < max(walk / 2, 0.05), (
        f"the loop stood still {gap * 1000:.0f} ms of a {walk * 1000:.0f} ms walk"
    )
