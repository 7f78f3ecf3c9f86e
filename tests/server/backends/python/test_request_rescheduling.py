"""Iterative sequences: Python models that release a request with RESCHEDULE to run it again, as
Triton's ``iterative_sequence`` models do (its qa/L0_iterative_sequence and
L0_backend_python/request_rescheduling cases, with their models' behaviour)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, collect_stream, write_python_model

# Decoupled: IN = n is answered in n steps, one execute() each, with OUT = the responses still to
# come (n-1 ... 0), STARTED = the START control it saw, BATCH = how many requests that execute()
# had. Each request's count is kept under its sequence id, so steps of many requests interleave.
COUNTDOWN = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.remaining = {}

    def execute(self, requests):
        time.sleep(0.02)  # a step takes a while: requests arriving meanwhile join the next one
        for request in requests:
            key = request.correlation_id()
            if key not in self.remaining:
                self.remaining[key] = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().sum())
            self.remaining[key] -= 1
            left = self.remaining[key]
            start = pb_utils.get_input_tensor_by_name(request, "START")  # none without a sequence batcher
            started = -1 if start is None else start.as_numpy().reshape(-1)[0]
            response = pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([[left]], np.int32)),
                pb_utils.Tensor("STARTED", np.array([[started]], np.int32)),
                pb_utils.Tensor("BATCH", np.array([[len(requests)]], np.int32)),
            ])
            sender = request.get_response_sender()
            if left <= 0:
                del self.remaining[key]
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
        return None
"""

# As Triton's own iterative_sequence test model: one count for the whole instance, which is right
# only while the instance runs one sequence at a time (max_batch_size 0: one sequence slot).
ONE_COUNT = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.remaining = None

    def execute(self, requests):
        for request in requests:
            if self.remaining is None:
                self.remaining = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().sum())
            self.remaining -= 1
            out = pb_utils.Tensor("OUT", np.array([self.remaining], np.int32))
            response = pb_utils.InferenceResponse([out])
            sender = request.get_response_sender()
            if self.remaining <= 0:
                self.remaining = None
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
        return None
"""

ONE_COUNT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
sequence_batching { iterative_sequence: true }
"""

COUNTDOWN_CONFIG = """
backend: "python"
max_batch_size: 4
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "STARTED" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "BATCH" data_type: TYPE_INT32 dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

SEQUENCE = """
sequence_batching {
  %s
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
}
"""

# Not decoupled, as Triton's request_rescheduling_addsub: its first request is rescheduled (None
# in its place in the list execute() returns), and answered by the next execute().
ADDSUB_ONCE_MORE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.executions = 0

    def execute(self, requests):
        self.executions += 1
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if self.executions == 1:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
            else:
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b),
                ]))
        return responses
"""

ADDSUB_CONFIG = """
backend: "python"
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
sequence_batching { iterative_sequence: true }
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# As Triton's wrong_return_type: reschedules, yet returns a response for the request.
WRONG_RETURN = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        return [
            pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "INPUT0")]) for r in requests
        ]
"""

WRONG_RETURN_CONFIG = """
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
sequence_batching { iterative_sequence: true }
"""

# Calls `countdown` through BLS and answers with the values it streamed.
CALLER = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            count = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(1, 1)
            call = pb_utils.InferenceRequest(
                model_name="countdown", requested_output_names=["OUT"], inputs=[pb_utils.Tensor("IN", count)],
            )
            values = [
                int(r.output_tensors()[0].as_numpy().sum())
                for r in call.exec(decoupled=True) if not r.has_error() and r.output_tensors()
            ]
            values = pb_utils.Tensor("VALUES", np.array(values, np.int32))
            responses.append(pb_utils.InferenceResponse([values]))
        return responses
"""

CALLER_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "VALUES" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""

REFUSED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("rescheduling_repo")
    for name, source, config in (
        ("countdown", COUNTDOWN, COUNTDOWN_CONFIG + SEQUENCE % "iterative_sequence: true"),
        ("countdown_plain_sequence", COUNTDOWN, COUNTDOWN_CONFIG + SEQUENCE % "direct { }"),
        ("countdown_oldest_sequence", COUNTDOWN, COUNTDOWN_CONFIG + SEQUENCE % "oldest { }"),
        ("addsub_once_more", ADDSUB_ONCE_MORE, ADDSUB_CONFIG),
        ("wrong_return", WRONG_RETURN, WRONG_RETURN_CONFIG),
        ("caller", CALLER, CALLER_CONFIG),
        ("one_count", ONE_COUNT, ONE_COUNT_CONFIG),
    ):
        write_python_model(repo, name, source, config)
    # No sequence batcher at all: a dynamic batcher over the same model.
    batched = COUNTDOWN_CONFIG + "dynamic_batching { }\n"
    write_python_model(repo, "countdown_dynamic", COUNTDOWN, batched)
    proc = ServerProcess([repo]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _countdowns(
    server: ServerProcess, model: str, counts: list[int], sequence_ids: list[int] | None = None
) -> dict[str, list[tuple[int, int, int, bool]]]:
    """Stream one request per count (request id = its position) and gather each request's answers
    as (OUT, STARTED, BATCH, final) until every one has had its final response; an error fails
    the test with its text."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    answers: dict[str, list[tuple[int, int, int, bool]]] = {str(i): [] for i in range(len(counts))}
    try:
        for number, count in enumerate(counts):
            tensor = grpcclient.InferInput("IN", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[count]], dtype=np.int32))
            sequence = {}
            if sequence_ids is not None:
                sequence = {"sequence_id": sequence_ids[number], "sequence_start": True}
            client.async_stream_infer(model, [tensor], request_id=str(number), **sequence)
        open_requests = set(answers)
        while open_requests:
            result, error = received.get(timeout=20)
            if error is not None:
                raise error
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            if result.as_numpy("OUT") is not None:
                row = tuple(int(result.as_numpy(name).sum()) for name in ("OUT", "STARTED", "BATCH"))
                answers[response.id].append((*row, final))
            if final:
                open_requests.discard(response.id)
        return answers
    finally:
        client.stop_stream(cancel_requests=True)


def test_a_rescheduled_request_streams_one_response_per_step_to_the_same_client(
    server: ServerProcess,
) -> None:
    answers = _countdowns(server, "countdown", [3])["0"]
    assert [(out, started, final) for out, started, _, final in answers] == [
        (2, 1, False),  # the first step: the sequence's START (the server gave it an id)
        (1, 0, False),
        (0, 0, True),
    ]


def test_the_steps_of_many_requests_share_executions_and_each_completes_on_its_own(
    server: ServerProcess,
) -> None:
    answers = _countdowns(server, "countdown", [4, 2, 3])
    assert {key: [row[0] for row in rows] for key, rows in answers.items()} == {
        "0": [3, 2, 1, 0],
        "1": [1, 0],
        "2": [2, 1, 0],
    }
    # Requests that wait while a step runs go into the next execute() beside the rescheduled ones.
    assert max(row[2] for rows in answers.values() for row in rows) >= 2


def test_a_client_s_own_sequence_id_is_kept_and_ends_when_the_model_lets_the_request_go(
    server: ServerProcess,
) -> None:
    answers = _countdowns(server, "countdown", [2], sequence_ids=[77])
    assert [row[0] for row in answers["0"]] == [1, 0]
    # The sequence ended with its request: the same id may start again.
    answers = _countdowns(server, "countdown", [1], sequence_ids=[77])
    assert [row[0] for row in answers["0"]] == [0]


def test_generate_stream_serves_an_iterative_model_without_a_sequence_id(server: ServerProcess) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
    connection.request("POST", "/v2/models/countdown/generate_stream", body=json.dumps({"IN": 2}))
    reply = connection.getresponse()
    assert reply.status == 200
    lines = reply.read().decode().splitlines()
    events = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert [event["OUT"] for event in events] == [1, 0]


def test_a_model_that_returns_none_for_its_rescheduled_request_answers_it_in_a_later_execute(
    server: ServerProcess,
) -> None:
    a = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(16).astype(np.float32)
    for client, module in (
        (httpclient.InferenceServerClient(server.http_url), httpclient),
        (grpcclient.InferenceServerClient(server.grpc_url), grpcclient),
    ):
        inputs = [module.InferInput(name, [16], "FP32") for name in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("addsub_once_more", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("addsub_once_more")
    model_stats = stats["model_stats"][0]
    assert model_stats["inference_stats"]["success"]["count"] == 2
    assert model_stats["execution_count"] == 3  # the first request took two executions


def test_a_response_returned_for_a_rescheduled_request_is_refused_in_tritons_words(
    server: ServerProcess,
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.ones(4, np.float32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("wrong_return", [tensor])
    assert "Expected a None object in the execute function return list for reschduled request" in str(
        info.value
    )


@pytest.mark.parametrize(
    ("model", "sequence_id"),
    [("countdown_plain_sequence", 5), ("countdown_oldest_sequence", 6), ("countdown_dynamic", None)],
)
def test_rescheduling_outside_an_iterative_sequence_ends_the_request_with_tritons_error(
    server: ServerProcess, model: str, sequence_id: int | None
) -> None:
    with pytest.raises(InferenceServerException, match="TRITONSERVER_REQUEST_RELEASE_RESCHEDULE") as info:
        _countdowns(server, model, [2], sequence_ids=None if sequence_id is None else [sequence_id])
    assert REFUSED in str(info.value)


def test_a_bls_call_streams_every_step_of_an_iterative_model(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([4], np.int32))
    assert client.infer("caller", [tensor]).as_numpy("VALUES").tolist() == [3, 2, 1, 0]


def test_an_instance_with_one_sequence_slot_runs_one_iterative_request_at_a_time(
    server: ServerProcess,
) -> None:
    """Triton's sequence batcher gives a model that does not batch one slot per instance, and a model
    written for it may keep one count for the instance: requests that come together take turns."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    try:
        for number, count in enumerate([3, 2, 4]):
            tensor = grpcclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([count], dtype=np.int32))
            client.async_stream_infer("one_count", [tensor], request_id=str(number))
        answers: dict[str, list[int]] = {}
        for _ in range(3 + 2 + 4):
            result, error = received.get(timeout=20)
            assert error is None, error
            answers.setdefault(result.get_response().id, []).append(int(result.as_numpy("OUT")[0]))
    finally:
        client.stop_stream(cancel_requests=True)
    assert answers == {"0": [2, 1, 0], "1": [1, 0], "2": [3, 2, 1, 0]}
