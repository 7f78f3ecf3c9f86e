"""A gRPC stream whose client pauses while thousands of answers wait, then reads on, with NVIDIA's
tritonclient (grpc-core underneath). Two ways this hung for good:

- grpc-core raises its receive window with a SETTINGS frame when the client reads on, and reset the
  stream (PROTOCOL_ERROR, which tritonclient never reported) when the data the larger window let out
  reached it before trt's SETTINGS ACK. The frame order itself is pinned in test_h2_conformance.py.
- Two requests on the stream both waited for it to drain (or, the stream in a front-end worker, for
  room in the core's window for it), and only the later waiter was woken.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.server.core.models.test_answer_queue import CONFIG, FLOOD, flood_stream
from tests.support import ServerProcess, write_python_model

ANSWERS = 3_000  # of 16 KiB: 48 MB, under every bound


def _serve(tmp_path_factory: pytest.TempPathFactory, args: list[str]) -> ServerProcess:
    repo = tmp_path_factory.mktemp("flow_repo")
    write_python_model(repo, "flood", FLOOD, CONFIG)
    marks = tmp_path_factory.mktemp("flow_marks")
    return ServerProcess([repo], args, env={"MARKS": str(marks)}).start(tmp_path_factory.mktemp("logs"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = _serve(tmp_path_factory, [])
    yield proc
    proc.stop()


@pytest.fixture(scope="module", params=[0, 2], ids=["in-process", "frontend-workers"])
def either_server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerProcess]:
    """The gRPC stream in the server's process, or in a front-end worker (whose answers wait for
    room in the core's window for the worker instead)."""
    proc = _serve(tmp_path_factory, [f"--frontend-workers={request.param}"])
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


def test_requests_sharing_a_paused_stream_all_finish_when_it_reads_on(either_server: ServerProcess) -> None:
    """Both requests' answers wait for room in the one stream at once: each waiter must be woken
    when it drains (a second waiter used to replace the first's wake-up, which then waited for good)."""
    paused = threading.Event()
    counts: dict[str, int] = {}
    finals: list[str] = []
    errors: list[object] = []
    ended = threading.Event()

    def callback(result: object, error: object) -> None:
        if error is not None:
            errors.append(error)
            ended.set()
            return
        response = result.get_response()  # type: ignore[attr-defined]
        if response.parameters["triton_final_response"].bool_param:
            finals.append(response.id)
            if len(finals) == 2:
                ended.set()
        else:
            counts[response.id] = counts.get(response.id, 0) + 1
        paused.wait(30)

    client = grpcclient.InferenceServerClient(either_server.grpc_url)
    client.start_stream(callback=callback)
    try:
        for name in ("first", "second"):
            tensor = grpcclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([ANSWERS], np.int32))  # 96 MB in all: past the 64 MiB
            client.async_stream_infer("flood", [tensor], request_id=name, enable_empty_final_response=True)
        threading.Event().wait(2.0)  # both producers fill what the stream holds unsent, and wait
        paused.set()
        assert ended.wait(30), f"answers so far {counts}, then none"
        failures = [str(error) for error in errors]  # before stopping the stream adds its cancellation
    finally:
        paused.set()
        client.stop_stream(cancel_requests=True)
    assert not failures
    assert counts == {"first": ANSWERS, "second": ANSWERS}
    assert sorted(finals) == ["first", "second"]
