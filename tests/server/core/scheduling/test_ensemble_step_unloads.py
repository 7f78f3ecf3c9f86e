"""A model an ensemble's request runs is unloaded (or reloaded) while the request runs: the request
goes on to its end on the versions it started with, as in Triton, whose ensemble holds its steps'
models for the request's lifetime. New requests see the change."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, collect_stream, write_python_model

# Decoupled: IN = n -> n answers (IDX = 0 .. n-1), 50 ms apart.
PACED = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
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

# IDX -> IDX * 10, or * FACTOR where the config's parameters say (the ensembles' last step);
# slow_times_ten waits 0.8 s first (the one-shot ensemble's first step).
TIMES_TEN = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sleep = float(args["model_name"] == "slow_times_ten") * 0.8
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.factor = int(parameters.get("FACTOR", {}).get("string_value", "10"))

    def execute(self, requests):
        time.sleep(self.sleep)
        responses = []
        for request in requests:
            index = pb_utils.get_input_tensor_by_name(request, "IDX").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("IDX", index * self.factor)]))
        return responses
"""

TIMES_TEN_CONFIG = """
backend: "python"
input [ { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

TIMES_HUNDRED = json.dumps({
    "backend": "python",
    "input": [{"name": "IDX", "data_type": "TYPE_INT32", "dims": [1]}],
    "output": [{"name": "IDX", "data_type": "TYPE_INT32", "dims": [1]}],
    "parameters": {"FACTOR": {"string_value": "100"}},
})  # fmt: skip


def _ensemble(first: str, second: str) -> str:
    first_input = "IN" if first == "paced" else "IDX"
    return f"""
platform: "ensemble"
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] }} ]
ensemble_scheduling {{
  step [
    {{ model_name: "{first}" model_version: -1 input_map {{ key: "{first_input}" value: "IN" }}
      output_map {{ key: "IDX" value: "between" }} }},
    {{ model_name: "{second}" model_version: -1 input_map {{ key: "IDX" value: "between" }}
      output_map {{ key: "IDX" value: "IDX" }} }}
  ]
}}
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    repo = tmp_path / "repo"
    write_python_model(repo, "paced", PACED, PACED_CONFIG)
    for name in ("times_ten", "slow_times_ten"):
        write_python_model(repo, name, TIMES_TEN, TIMES_TEN_CONFIG)
    for name, first in (("streamed", "paced"), ("one_shot", "slow_times_ten")):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(_ensemble(first, "times_ten"))
    proc = ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=*"]).start(tmp_path)
    yield proc
    proc.stop()


def _in(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [tensor]


def _in_background(work: object) -> threading.Thread:
    thread = threading.Thread(target=work)  # type: ignore[arg-type]
    thread.start()
    return thread


def test_a_streamed_request_finishes_on_the_step_model_unloaded_while_it_runs(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    try:
        client.async_stream_infer("streamed", _in(20))  # 20 answers over about 1 s
        answers = [received.get(timeout=20)]
        unloading = _in_background(
            lambda: grpcclient.InferenceServerClient(server.grpc_url).unload_model("times_ten")
        )
        answers += [received.get(timeout=20) for _ in range(19)]
        unloading.join(timeout=30)
    finally:
        client.stop_stream(cancel_requests=True)
    assert [error for _, error in answers if error is not None] == []
    assert [int(result.as_numpy("IDX")[0]) for result, _ in answers] == [10 * i for i in range(20)]
    # New requests see the unload: the step is gone, and the ensemble with it.
    with pytest.raises(InferenceServerException, match="one_shot"):
        grpcclient.InferenceServerClient(server.grpc_url).infer("one_shot", _in(1))


def test_a_request_finishes_on_the_step_model_unloaded_before_its_turn(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answer: list[object] = []
    running = _in_background(lambda: answer.append(client.infer("one_shot", _in(4)).as_numpy("IDX")))
    threading.Event().wait(0.3)  # the first step sleeps 0.8 s: times_ten's turn has not come
    grpcclient.InferenceServerClient(server.grpc_url).unload_model("times_ten")
    running.join(timeout=30)
    assert [a.tolist() for a in answer] == [[400]]  # type: ignore[attr-defined]


def test_a_request_runs_on_the_versions_it_started_with_while_a_step_reloads(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    try:
        client.async_stream_infer("streamed", _in(20))
        answers = [received.get(timeout=20)]
        # A reload with a new config; the old version retires once the request is done with it.
        grpcclient.InferenceServerClient(server.grpc_url).load_model("times_ten", config=TIMES_HUNDRED)
        answers += [received.get(timeout=20) for _ in range(19)]
    finally:
        client.stop_stream(cancel_requests=True)
    assert [error for _, error in answers if error is not None] == []
    assert [int(result.as_numpy("IDX")[0]) for result, _ in answers] == [10 * i for i in range(20)]
    assert client.infer("one_shot", _in(2)).as_numpy("IDX").tolist() == [2000]  # new requests: the new one
