"""``instance_group { passive: true }``: the group's instances load like the others but the scheduler
never hands them a request, as in Triton."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, write_python_model

# Answers with the name of the instance that ran it; initialize() leaves a file named after it.
WHO = """
import os
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        Path(os.environ["MARKS"], self.name).touch()

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("WHO", np.array([self.name.encode()], np.object_))])
            for _ in requests
        ]
"""

CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "WHO" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ %s ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, marks: Path) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("passive_repo")
    groups = (
        '{ name: "spare" kind: KIND_CPU count: 2 passive: true }, { name: "worker" kind: KIND_CPU count: 1 }'
    )
    write_python_model(repo, "mixed", WHO, CONFIG % groups)
    write_python_model(repo, "all_passive", WHO, CONFIG % "{ kind: KIND_CPU count: 1 passive: true }")
    proc = ServerProcess([repo], env={"MARKS": str(marks)}).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _who(client: httpclient.InferenceServerClient, model: str) -> str:
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))
    return client.infer(model, [tensor]).as_numpy("WHO")[0].decode()


def test_passive_instances_load_but_only_the_others_take_requests(server: ServerProcess, marks: Path) -> None:
    assert {"spare_0", "spare_1", "worker_0"} <= {mark.name for mark in marks.iterdir()}
    client = httpclient.InferenceServerClient(server.http_url)
    assert {_who(client, "mixed") for _ in range(12)} == {"worker_0"}
    assert client.is_model_ready("mixed")


def test_a_model_whose_every_instance_is_passive_refuses_requests_instead_of_holding_them(
    server: ServerProcess, marks: Path
) -> None:
    assert (marks / "all_passive_0_0").exists()  # loaded
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=10)
    with pytest.raises(InferenceServerException, match="every instance group is passive") as info:
        _who(client, "all_passive")
    assert info.value.status() == "503"
