"""A gRPC stream whose client pauses while thousands of answers wait, then reads on, with NVIDIA's
tritonclient (grpc-core underneath): grpc-core then raises its receive window with a SETTINGS frame,
and reset the stream (PROTOCOL_ERROR, which tritonclient never reported: the client waited for good)
when the data the larger window let out reached it before trt's SETTINGS ACK. The frame order itself
is pinned in test_h2_conformance.py; this is the client that met it."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.server.core.models.test_answer_queue import CONFIG, FLOOD, flood_stream
from tests.support import ServerProcess, write_python_model

ANSWERS = 3_000  # of 16 KiB: 48 MB, under every bound


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("flow_repo")
    write_python_model(repo, "flood", FLOOD, CONFIG)
    marks = tmp_path_factory.mktemp("flow_marks")
    proc = ServerProcess([repo], env={"MARKS": str(marks)}).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


@pytest.mark.parametrize("pause_s", [0.5, 2.0])
def test_a_client_that_pauses_then_reads_on_gets_every_answer(server: ServerProcess, pause_s: float) -> None:
    paused = threading.Event()
    client, arrived, ended = flood_stream(server, ANSWERS, paused)  # reads nothing after the first meanwhile
    try:
        threading.Event().wait(pause_s)
        paused.set()
        assert ended.wait(30), f"{len(arrived)} answers arrived, then none"
        received = list(arrived)  # before the stream is stopped (which a cancellation would add to)
    finally:
        paused.set()
        client.stop_stream(cancel_requests=True)
    assert not [item for item in received if isinstance(item, Exception)]
    assert len(received) == ANSWERS + 1  # and the empty final response
