"""An unload returns once the model takes no more requests, as Triton's does: the requests it holds
finish in the background while the index lists it UNLOADING, then UNAVAILABLE "unloaded". Neither an
explicit load nor the repository poller waits for a long request on a model going away."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, collect_stream, wait_until, write_python_model, write_simple

ANSWERS = 60  # 50 ms apart: a stream of 3 s

# Decoupled: IN = n -> n answers (IDX = 0 .. n-1), 50 ms apart; finalize() takes 1 s and leaves a
# file named "finalized" beside the repository.
PACED = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.marker = os.path.join(os.path.dirname(os.path.dirname(args["model_repository"])), "finalized")

    def finalize(self):
        time.sleep(1)  # flushing something: the server must wait for it
        with open(self.marker, "a") as marker:
            marker.write("finalized\\n")

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            for index in range(count):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("IDX", np.array([index], np.int32))]))
                time.sleep(0.05)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

PACED_CONFIG = """
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def _in(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [tensor]


def _paced_state(client: grpcclient.InferenceServerClient) -> tuple[str, str]:
    for row in client.get_model_repository_index().models:
        if row.name == "paced":
            return row.state, row.reason
    return "", ""


class Stream:
    """One ``paced`` request of ``ANSWERS`` answers on its own gRPC stream."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.received = collect_stream(self.client)
        self.answers: list[int] = []
        self.client.async_stream_infer("paced", _in(ANSWERS))
        self.take(1)

    def take(self, count: int) -> None:
        for _ in range(count):
            result, error = self.received.get(timeout=30)
            assert error is None, error
            self.answers.append(int(result.as_numpy("IDX")[0]))

    def finish(self) -> None:
        self.take(ANSWERS - len(self.answers))
        self.client.stop_stream()
        assert self.answers == list(range(ANSWERS))

    def ended(self) -> bool:
        return len(self.answers) + self.received.qsize() >= ANSWERS


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    write_python_model(tmp_path / "repo", "paced", PACED, PACED_CONFIG)
    return tmp_path / "repo"


@pytest.fixture
def explicit(repo: Path, tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=paced"]).start(tmp_path)
    yield server
    server.stop()


def test_an_unload_returns_while_a_stream_runs_and_the_stream_finishes(
    explicit: ServerProcess, repo: Path
) -> None:
    control = grpcclient.InferenceServerClient(explicit.grpc_url)
    stream = Stream(explicit.grpc_url)
    control.unload_model("paced")
    assert not stream.ended()  # before: the unload waited for the stream's last answer
    assert not control.is_model_ready("paced")
    assert _paced_state(control) == ("UNLOADING", "")
    control.unload_model("paced")  # again: nothing changes
    assert _paced_state(control) == ("UNLOADING", "")
    with pytest.raises(InferenceServerException, match="paced"):
        control.infer("paced", _in(1))
    assert not (repo.parent / "finalized").exists()  # the stream holds it
    stream.finish()
    wait_until(lambda: _paced_state(control) == ("UNAVAILABLE", "unloaded"))
    assert (repo.parent / "finalized").read_text() == "finalized\n"


def test_a_load_while_the_old_copy_finishes_serves_at_once(explicit: ServerProcess) -> None:
    control = grpcclient.InferenceServerClient(explicit.grpc_url)
    old = Stream(explicit.grpc_url)
    control.unload_model("paced")
    control.load_model("paced")
    assert not old.ended()
    assert control.is_model_ready("paced")
    assert _paced_state(control) == ("READY", "")  # the copy still retiring is not listed
    new = Stream(explicit.grpc_url)
    old.finish()
    new.finish()
    assert _paced_state(control) == ("READY", "")


def test_the_poller_loads_a_new_model_while_a_removed_ones_stream_runs(repo: Path, tmp_path: Path) -> None:
    flags = ["--model-control-mode=poll", "--repository-poll-secs=0.2"]
    server = ServerProcess([repo], flags).start(tmp_path)
    try:
        control = grpcclient.InferenceServerClient(server.grpc_url)
        stream = Stream(server.grpc_url)
        shutil.rmtree(repo / "paced")
        wait_until(lambda: not control.is_model_ready("paced"))
        write_simple(repo)
        # Before, the poll that unloaded paced waited for its stream, and no poll ran until it ended.
        wait_until(lambda: control.is_model_ready("simple"))
        assert not stream.ended()
        stream.finish()
        wait_until(lambda: _paced_state(control) == ("UNAVAILABLE", "unloaded"))
    finally:
        server.stop()


def test_the_server_stops_cleanly_while_an_unloaded_model_finishes(
    explicit: ServerProcess, repo: Path
) -> None:
    control = grpcclient.InferenceServerClient(explicit.grpc_url)
    stream = Stream(explicit.grpc_url)
    control.unload_model("paced")
    assert explicit.process is not None
    stubs = psutil.Process(explicit.process.pid).children(recursive=True)
    assert stubs  # the model's process, still answering the stream
    assert explicit.stop() == 0  # SIGTERM: the retiring copy is waited for and released
    stream.finish()  # in-flight requests finish within --exit-timeout-secs, as any others
    assert (repo.parent / "finalized").read_text() == "finalized\n"
    _, alive = psutil.wait_procs(stubs, timeout=10)
    assert alive == []
