"""A Python model's own ``is_ready()`` (Triton's Python backend): the model's readiness, and with
strict readiness the server's, follow what it answers; inference is not refused meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support import ServerProcess, write_python_model

# Ready unless $MARKS/<its name>.down exists; IN = n > 0 makes execute() take n seconds.
GATED = """
import os
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.down = Path(os.environ["MARKS"], args["model_name"] + ".down")

    %s

    def execute(self, requests):
        responses = []
        for request in requests:
            seconds = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            time.sleep(seconds)
            out = pb_utils.Tensor("OUT", np.array([seconds], np.int32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

SYNC_CHECK = "def is_ready(self):\n        return not self.down.exists()"
ASYNC_CHECK = "async def is_ready(self):\n        return not self.down.exists()"
NOT_A_BOOL = "def is_ready(self):\n        return 'yes'"
SLOW_CHECK = "def is_ready(self):\n        time.sleep(30 if self.down.exists() else 0)\n        return True"

CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, marks: Path) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("readiness_repo")
    for name, check in (("gated", SYNC_CHECK), ("async_gated", ASYNC_CHECK)):
        write_python_model(repo, name, GATED % check, CONFIG)
    proc = ServerProcess([repo], env={"MARKS": str(marks)}).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _until(condition: Callable[[], bool], seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def _infer(client: httpclient.InferenceServerClient, model: str, seconds: int = 0) -> int:
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([seconds], np.int32))
    return int(client.infer(model, [tensor]).as_numpy("OUT")[0])


@pytest.mark.parametrize("model", ["gated", "async_gated"])
def test_a_model_is_ready_as_its_is_ready_says_and_the_server_with_it(
    server: ServerProcess, marks: Path, model: str
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.is_model_ready(model) and client.is_server_ready()
    down = marks / f"{model}.down"
    down.touch()
    try:
        assert _until(lambda: not client.is_model_ready(model)), (
            "is_ready() said no, but the model stayed ready"
        )
        assert not grpc.is_model_ready(model)
        assert not client.is_server_ready()  # strict readiness: every model ready
        assert _infer(client, model) == 0  # readiness is for routing: requests are still served
    finally:
        down.unlink()
    assert _until(lambda: client.is_model_ready(model) and client.is_server_ready())


def test_the_check_is_answered_while_execute_runs(server: ServerProcess, marks: Path) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    busy = threading.Thread(
        target=_infer, args=(httpclient.InferenceServerClient(server.http_url), "gated", 4)
    )
    busy.start()
    time.sleep(0.5)  # execute() now sleeps for 4 s
    down = marks / "gated.down"
    down.touch()
    try:
        assert _until(lambda: not client.is_model_ready("gated"), 3), "the check waited for execute()"
    finally:
        down.unlink()
        busy.join()


def test_a_check_that_does_not_answer_within_5_s_or_answers_no_bool_is_not_ready(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "slow_check", GATED % SLOW_CHECK, CONFIG)
    write_python_model(repo, "vague", GATED % NOT_A_BOOL, CONFIG)
    proc = ServerProcess([repo], ["--strict-readiness=false"], env={"MARKS": str(tmp_path)}).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        assert not client.is_model_ready("vague")  # from its first check, at load
        assert "is_ready() must return a boolean value" in proc.log_path.read_text()
        assert client.is_model_ready("slow_check")
        (tmp_path / "slow_check.down").touch()  # its next check sleeps 30 s
        assert _until(lambda: not client.is_model_ready("slow_check"), 9)
        assert client.is_server_ready()  # not strict here
    finally:
        proc.stop()
