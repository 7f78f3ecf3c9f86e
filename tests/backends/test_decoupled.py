"""Decoupled Python models: zero, one or many responses per request, streamed over gRPC."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, write_simple

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

CONFIG = """
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("decoupled_repo")
    (repo / "square" / "1").mkdir(parents=True)
    (repo / "square" / "1" / "model.py").write_text(SQUARE)
    (repo / "square" / "config.pbtxt").write_text(CONFIG)
    write_simple(repo, "onnx_decoupled")
    config = (repo / "onnx_decoupled" / "config.pbtxt").read_text()
    (repo / "onnx_decoupled" / "config.pbtxt").write_text(
        config + "model_transaction_policy { decoupled: true }\n"
    )
    proc = ServerProcess([repo], ["--exit-on-error=false"]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _stream(server: ServerProcess, counts: list[int], empty_final: bool) -> list[tuple[object, object]]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received: queue.Queue[tuple[object, object]] = queue.Queue()
    client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), received))
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


def test_unary_requests_to_a_decoupled_model_are_refused(server: ServerProcess) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([2], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="decoupled transaction policy"):
        http.infer("square", [tensor])
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    grpc_tensor = grpcclient.InferInput("IN", [1], "INT32")
    grpc_tensor.set_data_from_numpy(np.array([2], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        grpc.infer("square", [grpc_tensor])
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"


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
        received: queue.Queue[tuple[object, object]] = queue.Queue()
        client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), received))
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
