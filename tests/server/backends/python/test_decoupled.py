"""Decoupled Python models: zero, one or many responses per request, streamed over gRPC."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, collect_stream, write_python_model, write_simple

# Like Triton's square_int32 example: IN = n -> n responses OUT = n, sent from a thread after
# execute() has returned, then the final flag on its own.
SQUARE = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            thread = threading.Thread(target=self.respond, args=(sender, count))
            thread.start()
            self.threads.append(thread)
        return None

    def respond(self, sender, count):
        for index in range(count):
            time.sleep(0.01)
            out = pb_utils.Tensor("OUT", np.array([count], dtype=np.int32))
            idx = pb_utils.Tensor("IDX", np.array([index], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse([out, idx]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
"""

# Streams its pid every 20 ms for 4 s from a thread, after execute() has returned.
PID_TICKER = """
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.tick, args=(request.get_response_sender(),), daemon=True).start()
        return None

    def tick(self, sender):
        for _ in range(200):
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([os.getpid()], np.int32))]))
            time.sleep(0.02)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

# An ensemble around `square`: `double` before it, `describe` after it on each of its responses.
DOUBLE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)
            ])
            for r in requests
        ]
"""

DESCRIBE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            out = int(pb_utils.get_input_tensor_by_name(request, "OUT").as_numpy()[0])
            idx = int(pb_utils.get_input_tensor_by_name(request, "IDX").as_numpy()[0])
            text = np.array([f"{idx}/{out}".encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]))
        return responses
"""

DOUBLE_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

DESCRIBE_CONFIG = """
backend: "python"
input [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

PIPELINE_CONFIG = """
platform: "ensemble"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "double" model_version: -1 input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "doubled" } },
  { model_name: "square" model_version: -1 input_map { key: "IN" value: "doubled" }
    output_map { key: "OUT" value: "count" } output_map { key: "IDX" value: "index" } },
  { model_name: "describe" model_version: -1 input_map { key: "OUT" value: "count" } input_map { key: "IDX" value: "index" }
    output_map { key: "TEXT" value: "TEXT" } }
] }
"""

# Decoupled: one response, then its sender is let go without the final flag (request IN = 0 never
# even gets a sender). Each request's stream must still end.
FORGETFUL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            if value:
                out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
                idx = pb_utils.Tensor("IDX", np.array([0], dtype=np.int32))
                request.get_response_sender().send(pb_utils.InferenceResponse([out, idx]))
        return None
"""

# Not decoupled, but answers through its senders, and forgets: requests that must not hang.
# IN = 1: a response without the final flag; IN = 0: nothing at all.
FORGETFUL_UNARY_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


# `square` fed by `square`: each of the first's responses runs the second, which answers as often.
SQUARE_TWICE_CONFIG = """
platform: "ensemble"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "FIRST_IDX" data_type: TYPE_INT32 dims: [ 1 ] }
]
ensemble_scheduling { step [
  { model_name: "square" model_version: -1 input_map { key: "IN" value: "IN" }
    output_map { key: "OUT" value: "first" } output_map { key: "IDX" value: "FIRST_IDX" } },
  { model_name: "square" model_version: -1 input_map { key: "IN" value: "first" }
    output_map { key: "OUT" value: "OUT" } output_map { key: "IDX" value: "IDX" } }
] }
"""

# Two decoupled steps side by side: which answer of one would go with which of the other?
SIDE_BY_SIDE_CONFIG = """
platform: "ensemble"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "A" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "square" model_version: -1 input_map { key: "IN" value: "IN" }
    output_map { key: "OUT" value: "A" } output_map { key: "IDX" value: "a_index" } },
  { model_name: "square_one_instance" model_version: -1 input_map { key: "IN" value: "IN" }
    output_map { key: "OUT" value: "B" } output_map { key: "IDX" value: "b_index" } }
] }
"""

# Answers from a thread that ends without the final flag, its sender dropped there, after
# execute() has returned: the model process then has nothing else to send.
THREAD_FORGETFUL = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().copy()
            threading.Thread(target=self.respond, args=(request.get_response_sender(), value)).start()
        return None

    def respond(self, sender, value):
        time.sleep(0.2)  # execute() has returned and its result is sent
        idx = pb_utils.Tensor("IDX", np.array([0], dtype=np.int32))
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value), idx]))
"""

# Keeps its input as numpy gives it (a view, no copy) and reads it from a thread 300 ms after
# execute() has returned, as models that stream from their own threads do.
LATE_READER = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            threading.Thread(target=self.respond, args=(request.get_response_sender(), data)).start()
        return None

    def respond(self, sender, data):
        time.sleep(0.3)
        out = pb_utils.Tensor("OUT", data.copy())
        idx = pb_utils.Tensor("IDX", np.array([0], dtype=np.int32))
        sender.send(pb_utils.InferenceResponse([out, idx]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


CONFIG = """
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# A decoupled model that returns its responses from execute(), which Triton's stub refuses.
RETURNS_RESPONSES = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([1], np.int32)), pb_utils.Tensor("IDX", np.array([0], np.int32))
            ])
            for _ in requests
        ]
"""

# exec(decoupled=True) from a decoupled model: each response of `square` is forwarded the moment
# it arrives, with the seconds since the call began.
RELAY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            call = pb_utils.InferenceRequest(
                model_name="square", requested_output_names=["OUT", "IDX"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
            )
            began = time.monotonic()
            for response in call.exec(decoupled=True):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                if response.output_tensors():
                    waited = np.array([time.monotonic() - began], np.float32)
                    sender.send(pb_utils.InferenceResponse(
                        [*response.output_tensors(), pb_utils.Tensor("WAITED", waited)]
                    ))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

RELAY_CONFIG = """
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "WAITED" data_type: TYPE_FP32 dims: [ 1 ] }
]
"""

# An ordinary model that gathers what BLS calls give: a decoupled model's responses (sync and
# async), an ordinary model called with decoupled=True, and the refusal of exec() without it.
GATHER = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


def square(count):
    tensor = pb_utils.Tensor("IN", np.array([count], np.int32))
    return pb_utils.InferenceRequest(model_name="square", requested_output_names=["IDX"], inputs=[tensor])


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            streamed = list(square(count).exec(decoupled=True))
            indices = [int(r.output_tensors()[0].as_numpy()[0]) for r in streamed if r.output_tensors()]
            replayed = sum(1 for _ in streamed_iterator(count))
            awaited = await square(count).async_exec(decoupled=True)
            async_count = sum(1 for r in awaited if r.output_tensors())
            refusal = square(count).exec()
            ints = pb_utils.Tensor("INPUT0", np.arange(16, dtype=np.int32).reshape(1, 16))
            once = list(pb_utils.InferenceRequest(
                model_name="simple", requested_output_names=["OUTPUT0"], inputs=[ints, pb_utils.Tensor("INPUT1", ints.as_numpy())],
            ).exec(decoupled=True))
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("RESPONSES", np.array([len(streamed)], np.int32)),
                pb_utils.Tensor("INDICES", np.array([sum(indices)], np.int32)),
                pb_utils.Tensor("LAST_EMPTY", np.array([not streamed[-1].output_tensors()], bool)),
                pb_utils.Tensor("REPLAYED", np.array([replayed], np.int32)),
                pb_utils.Tensor("ASYNC", np.array([async_count], np.int32)),
                pb_utils.Tensor("REFUSAL", np.array([refusal.error().message().encode()], np.object_)),
                pb_utils.Tensor("ONCE", np.array([len(once)], np.int32)),
                pb_utils.Tensor("ONCE_SUM", np.array([once[0].output_tensors()[0].as_numpy().sum()], np.int32)),
            ]))
        return responses


def streamed_iterator(count):
    iterator = square(count).exec(decoupled=True)
    first = list(iterator)
    return [*first, *iterator]  # iterating again after the end replays the responses
"""

GATHER_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "RESPONSES" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "INDICES" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "LAST_EMPTY" data_type: TYPE_BOOL dims: [ 1 ] }, { name: "REPLAYED" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "ASYNC" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "REFUSAL" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "ONCE" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "ONCE_SUM" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("decoupled_repo")
    (repo / "square" / "1").mkdir(parents=True)
    (repo / "square" / "1" / "model.py").write_text(SQUARE)
    (repo / "square" / "config.pbtxt").write_text(CONFIG)
    one_instance = CONFIG + "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
    for name, source, config in (
        ("relay", RELAY, RELAY_CONFIG),
        ("gather", GATHER, GATHER_CONFIG),
        ("square_one_instance", SQUARE, one_instance),
        ("pid_ticker", PID_TICKER, CONFIG),
        ("double", DOUBLE, DOUBLE_CONFIG),
        ("describe", DESCRIBE, DESCRIBE_CONFIG),
        ("forgetful", FORGETFUL, CONFIG),
        ("forgetful_unary", FORGETFUL, FORGETFUL_UNARY_CONFIG),
        ("late_reader", LATE_READER, one_instance),
        ("thread_forgetful", THREAD_FORGETFUL, CONFIG),
        ("returns_responses", RETURNS_RESPONSES, CONFIG),
    ):
        write_python_model(repo, name, source, config)
    for name, config in (
        ("pipeline", PIPELINE_CONFIG),
        ("square_twice", SQUARE_TWICE_CONFIG),
        ("side_by_side", SIDE_BY_SIDE_CONFIG),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
    write_simple(repo)
    write_simple(repo, "onnx_decoupled")
    config = (repo / "onnx_decoupled" / "config.pbtxt").read_text()
    (repo / "onnx_decoupled" / "config.pbtxt").write_text(
        config + "model_transaction_policy { decoupled: true }\n"
    )
    proc = ServerProcess([repo], ["--exit-on-error=false"]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _answers(server: ServerProcess, model: str, values: list[int], count: int) -> list[tuple[object, object]]:
    """Stream one request per value (IN = value, request id str(value)) and collect ``count`` answers;
    the stream is then stopped with its requests cancelled, so a model that never ends one fails the
    test instead of hanging it."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    try:
        for value in values:
            tensor = grpcclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
            client.async_stream_infer(model, [tensor], request_id=str(value))
        return [received.get(timeout=10) for _ in range(count)]
    finally:
        client.stop_stream(cancel_requests=True)


def _stream(server: ServerProcess, counts: list[int], empty_final: bool) -> list[tuple[object, object]]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    try:
        for number, count in enumerate(counts):
            tensor = grpcclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([count], dtype=np.int32))
            client.async_stream_infer(
                "square", [tensor], request_id=str(number), enable_empty_final_response=empty_final
            )
        expected = sum(counts) + (len(counts) if empty_final else 0)
        return [received.get(timeout=20) for _ in range(expected)]
    finally:
        client.stop_stream()


def test_a_decoupled_model_streams_many_responses_per_request(server: ServerProcess) -> None:
    answers = _stream(server, [3, 0, 2], empty_final=True)
    assert all(error is None for _, error in answers)
    by_request: dict[str, list[object]] = {}
    for result, _ in answers:
        response = result.get_response()  # type: ignore[attr-defined]
        by_request.setdefault(response.id, []).append(result)
    assert {key: len(value) for key, value in by_request.items()} == {"0": 4, "1": 1, "2": 3}
    finals = [r.get_response().parameters["triton_final_response"].bool_param for r in by_request["0"]]  # type: ignore[attr-defined]
    assert finals == [False, False, False, True]  # three data responses, then the empty final one
    indices = [int(r.as_numpy("IDX")[0]) for r in by_request["0"][:3]]  # type: ignore[attr-defined]
    assert indices == [0, 1, 2] and all(int(r.as_numpy("OUT")[0]) == 3 for r in by_request["0"][:3])  # type: ignore[attr-defined]


def test_without_empty_final_responses_only_data_arrives(server: ServerProcess) -> None:
    answers = _stream(server, [2, 1], empty_final=False)
    assert len(answers) == 3 and all(error is None for _, error in answers)


def test_a_decoupled_model_that_returns_responses_from_execute_is_refused_in_tritons_words(
    server: ServerProcess,
) -> None:
    """As Triton's stub (its L0_backend_python decoupled test matches the text); trt delivered them."""
    ((result, error),) = _answers(server, "returns_responses", [1], 1)
    assert result is None and error is not None
    assert (
        "Python model 'returns_responses_0' is using the decoupled mode and the execute function must "
        "return None." in error.message()
    ), error.message()


def test_unary_requests_to_a_decoupled_model_are_refused(server: ServerProcess) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([2], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        http.infer("square", [tensor])
    assert info.value.status() == "501"  # Triton's code and words (seen with 2.51), then trt's hint
    assert info.value.message().startswith(
        "HTTP end point doesn't support models with decoupled transaction policy"
    )
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    grpc_tensor = grpcclient.InferInput("IN", [1], "INT32")
    grpc_tensor.set_data_from_numpy(np.array([2], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        grpc.infer("square", [grpc_tensor])
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert info.value.message().startswith(
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )


def test_decoupled_is_refused_for_backends_that_answer_once(server: ServerProcess) -> None:
    index = {
        r["name"]: r for r in httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    }
    assert index["onnx_decoupled"]["state"] == "UNAVAILABLE"
    assert "decoupled" in index["onnx_decoupled"]["reason"]


def test_stream_works_for_ordinary_models_too(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    proc = ServerProcess([repo]).start(tmp_path)
    try:
        client = grpcclient.InferenceServerClient(proc.grpc_url)
        received = collect_stream(client)
        inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        client.async_stream_infer("simple", inputs, request_id="x")
        result, error = received.get(timeout=10)
        client.stop_stream()
        assert error is None
        assert result.get_response().parameters["triton_final_response"].bool_param  # type: ignore[attr-defined]
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2))  # type: ignore[attr-defined]
    finally:
        proc.stop()


def test_bls_streams_a_decoupled_model_s_responses_as_they_arrive(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    try:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([5], dtype=np.int32))
        client.async_stream_infer("relay", [tensor])
        answers = [received.get(timeout=20) for _ in range(5)]
    finally:
        client.stop_stream()
    assert all(error is None for _, error in answers), answers
    results = [result for result, _ in answers]
    assert [int(r.as_numpy("IDX")[0]) for r in results] == [0, 1, 2, 3, 4]  # type: ignore[attr-defined]
    waited = [float(r.as_numpy("WAITED")[0]) for r in results]  # type: ignore[attr-defined]
    # `square` sends one response every 10 ms: had BLS gathered them before answering, the relay
    # would have seen all five at once.
    assert waited == sorted(waited) and waited[-1] - waited[0] > 0.025, waited


def test_bls_with_decoupled_true_yields_every_response_then_the_final_one(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([4], dtype=np.int32))
    result = client.infer("gather", [tensor])
    assert int(result.as_numpy("RESPONSES")[0]) == 5  # four data responses and the empty final one
    assert int(result.as_numpy("INDICES")[0]) == 0 + 1 + 2 + 3
    assert bool(result.as_numpy("LAST_EMPTY")[0])
    assert int(result.as_numpy("REPLAYED")[0]) == 10
    assert int(result.as_numpy("ASYNC")[0]) == 4
    assert "exec(decoupled=True)" in result.as_numpy("REFUSAL")[0].decode()
    # An ordinary model called with decoupled=True gives its one response, marked final.
    assert int(result.as_numpy("ONCE")[0]) == 1
    assert int(result.as_numpy("ONCE_SUM")[0]) == 2 * sum(range(16))


def test_an_instance_takes_new_requests_once_execute_returns_while_its_senders_stream(
    server: ServerProcess,
) -> None:
    """As Triton: a decoupled model's instance is free when execute() returns (vLLM-style models
    stream every request from their own threads), not when its requests' final responses are sent."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    try:
        for number in range(2):
            tensor = grpcclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([30], dtype=np.int32))  # 30 responses, 10 ms apart
            client.async_stream_infer("square_one_instance", [tensor], request_id=str(number))
        answers = [received.get(timeout=20) for _ in range(60)]
    finally:
        client.stop_stream()
    assert all(error is None for _, error in answers)
    order = [result.get_response().id for result, _ in answers]  # type: ignore[attr-defined]
    assert order.count("0") == order.count("1") == 30
    last_of_first = len(order) - 1 - order[::-1].index("0")
    assert order.index("1") < last_of_first, order  # the two requests streamed at the same time


def test_inputs_stay_intact_until_the_final_response_while_later_requests_execute(
    server: ServerProcess,
) -> None:
    """A request's input tensors live in shared memory the next executions reuse: a model that reads
    them from a thread after execute() returned must still see its own, however many requests
    executed meanwhile (two hold the instance's two arenas, the rest travel inline)."""
    answers = _answers(server, "late_reader", [11, 22, 33, 44], 4)
    assert all(error is None for _, error in answers), answers
    echoed = {result.get_response().id: int(result.as_numpy("OUT")[0]) for result, _ in answers}  # type: ignore[attr-defined]
    assert echoed == {"11": 11, "22": 22, "33": 33, "44": 44}


def test_a_process_that_dies_ends_the_streams_it_was_still_sending(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    try:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([0], dtype=np.int32))
        client.async_stream_infer("pid_ticker", [tensor], enable_empty_final_response=True)
        first, error = received.get(timeout=10)
        assert error is None
        os.kill(int(first.as_numpy("OUT")[0]), signal.SIGKILL)  # type: ignore[attr-defined]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            _, error = received.get(timeout=10)
            if error is not None:
                break
        assert error is not None and "exited" in str(error), error
    finally:
        client.stop_stream()


def test_an_ensemble_streams_each_response_of_its_decoupled_step_through_the_steps_after_it(
    server: ServerProcess,
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    try:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([2], dtype=np.int32))  # doubled: square sends 4 responses
        client.async_stream_infer("pipeline", [tensor], enable_empty_final_response=True)
        answers = [received.get(timeout=20) for _ in range(5)]
    finally:
        client.stop_stream()
    assert all(error is None for _, error in answers), answers
    texts = [r.as_numpy("TEXT")[0].decode() for r, _ in answers[:4]]  # type: ignore[attr-defined]
    assert texts == ["0/4", "1/4", "2/4", "3/4"]
    last = answers[4][0].get_response()  # type: ignore[attr-defined]
    assert last.parameters["triton_final_response"].bool_param and not last.outputs
    # As a decoupled model, the ensemble refuses a single-response call.
    http = httpclient.InferenceServerClient(server.http_url)
    plain = httpclient.InferInput("IN", [1], "INT32")
    plain.set_data_from_numpy(np.array([2], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="decoupled"):
        http.infer("pipeline", [plain])


def test_an_ensemble_streams_through_a_decoupled_step_fed_by_another(server: ServerProcess) -> None:
    answers = _answers(server, "square_twice", [2], 4)  # 2 responses, each answered twice
    assert all(error is None for _, error in answers), answers
    pairs = sorted(
        (int(r.as_numpy("FIRST_IDX")[0]), int(r.as_numpy("IDX")[0]), int(r.as_numpy("OUT")[0]))  # type: ignore[attr-defined]
        for r, _ in answers
    )
    assert pairs == [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2)]


def test_an_ensemble_with_decoupled_steps_side_by_side_is_refused_at_load(server: ServerProcess) -> None:
    index = {
        r["name"]: r for r in httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    }
    assert index["side_by_side"]["state"] == "UNAVAILABLE"
    assert "neither feeds the other" in index["side_by_side"]["reason"]
    assert index["square_twice"]["state"] == "READY"


def test_a_stream_whose_sender_is_let_go_without_the_final_flag_ends_with_an_error(
    server: ServerProcess,
) -> None:
    answers = _answers(server, "forgetful", [5, 0], 3)
    data = [result for result, error in answers if error is None]
    errors = [str(error) for _, error in answers if error is not None]
    assert [int(result.as_numpy("OUT")[0]) for result in data] == [5]  # type: ignore[attr-defined]
    assert len(errors) == 2 and all("without sending the final flag" in e for e in errors), errors


def test_a_sender_dropped_in_a_model_thread_ends_its_stream_while_the_model_is_otherwise_idle(
    server: ServerProcess,
) -> None:
    answers = _answers(server, "thread_forgetful", [7], 2)  # nothing else is sent meanwhile
    (first, first_error), (_, error) = answers
    assert first_error is None and int(first.as_numpy("OUT")[0]) == 7  # type: ignore[attr-defined]
    assert error is not None and "without sending the final flag" in str(error), error


def test_a_model_that_answers_through_senders_and_forgets_the_final_flag_does_not_hang_requests(
    server: ServerProcess,
) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=20)

    def infer(value: int) -> object:
        tensor = httpclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
        try:
            return client.infer("forgetful_unary", [tensor])
        except InferenceServerException as exc:
            return exc

    answered = infer(7)  # its one response counts, final flag or not
    assert int(answered.as_numpy("OUT")[0]) == 7  # type: ignore[attr-defined]
    unanswered = infer(0)
    assert isinstance(unanswered, InferenceServerException)
    assert "without sending the final flag" in str(unanswered)
