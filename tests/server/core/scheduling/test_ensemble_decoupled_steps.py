"""An ensemble's decoupled step: the steps after it run for several of its answers at once, the
ensemble's answers keep the step's order, and ``max_inflight_requests`` bounds each step's requests
over every request of the ensemble."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support import ServerProcess, collect_stream, write_python_model

# Decoupled: IN = n -> n answers (IDX = 0 .. n-1) sent at once from execute(), then the final flag.
BURST = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            for index in range(count):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("IDX", np.array([index], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

BURST_CONFIG = """
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# After the burst: slower for earlier answers (0.4 s for IDX 0, down to 0.1 s for IDX 3), so that
# run side by side, later answers finish first. Says when it began and ended.
STAMP = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            index = int(pb_utils.get_input_tensor_by_name(request, "IDX").as_numpy()[0])
            began = time.time()
            time.sleep(0.1 * (4 - index % 4))
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("IDX", np.array([index], np.int32)),
                pb_utils.Tensor("SPAN", np.array([began, time.time()], np.float64)),
            ]))
        return responses
"""

STAMP_CONFIG = """
backend: "python"
input [ { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "SPAN" data_type: TYPE_FP64 dims: [ 2 ] }
]
instance_group [ { kind: KIND_CPU count: 4 } ]
"""


def _ensemble(limit: str) -> str:
    return f"""
platform: "ensemble"
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] }}, {{ name: "SPAN" data_type: TYPE_FP64 dims: [ 2 ] }}
]
ensemble_scheduling {{
  step [
    {{ model_name: "burst" model_version: -1 input_map {{ key: "IN" value: "IN" }}
      output_map {{ key: "IDX" value: "index" }} }},
    {{ model_name: "stamp" model_version: -1 input_map {{ key: "IDX" value: "index" }}
      output_map {{ key: "IDX" value: "IDX" }} output_map {{ key: "SPAN" value: "SPAN" }} }}
  ]
  {limit}
}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("ensemble_streams")
    write_python_model(repo, "burst", BURST, BURST_CONFIG)
    write_python_model(repo, "stamp", STAMP, STAMP_CONFIG)
    for name, limit in (("stamped", ""), ("stamped_one_at_a_time", "max_inflight_requests: 1")):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(_ensemble(limit))
    proc = ServerProcess([repo]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _stream(server: ServerProcess, model: str, count: int) -> list[tuple[int, float, float]]:
    """(IDX, began, ended) of each answer to one streamed request IN = count, in arrival order."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    try:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([count], dtype=np.int32))
        client.async_stream_infer(model, [tensor])
        answers = [received.get(timeout=20) for _ in range(count)]
    finally:
        client.stop_stream(cancel_requests=True)
    assert all(error is None for _, error in answers), answers
    spans = []
    for result, _ in answers:
        began, ended = result.as_numpy("SPAN").tolist()
        spans.append((int(result.as_numpy("IDX")[0]), began, ended))
    return spans


def test_the_steps_after_a_decoupled_step_run_for_several_answers_at_once_in_the_step_s_order(
    server: ServerProcess,
) -> None:
    spans = _stream(server, "stamped", 4)
    # The last answer's step finishes first (0.1 s against 0.4), yet the answers keep their order.
    assert [index for index, _, _ in spans] == [0, 1, 2, 3]
    # All four ran at once on the step's four instances: each began before any had ended.
    assert max(began for _, began, _ in spans) < min(ended for _, _, ended in spans)


def test_max_inflight_requests_runs_one_step_request_at_a_time_over_every_request_of_the_ensemble(
    server: ServerProcess,
) -> None:
    results: dict[int, list[tuple[int, float, float]]] = {}

    def run(client_index: int) -> None:
        results[client_index] = _stream(server, "stamped_one_at_a_time", 3)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(results) == [0, 1]
    for spans in results.values():
        assert [index for index, _, _ in spans] == [0, 1, 2]
    # Six executions of `stamp` (four instances free), never two at once.
    by_start = sorted((span for spans in results.values() for span in spans), key=lambda span: span[1])
    for (_, _, ended), (_, began, _) in itertools.pairwise(by_start):
        assert began >= ended - 0.002, by_start


def test_a_cancelled_stream_stops_the_steps_still_waiting_for_its_answers(server: ServerProcess) -> None:
    http = httpclient.InferenceServerClient(server.http_url)

    def executions() -> int:
        return int(http.get_inference_statistics("stamp")["model_stats"][0]["execution_count"])

    before = executions()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    try:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([40], dtype=np.int32))
        client.async_stream_infer("stamped", [tensor])
        first, error = received.get(timeout=20)
        assert error is None and int(first.as_numpy("IDX")[0]) == 0
    finally:
        client.stop_stream(cancel_requests=True)
    # Forty answers started `stamp` for up to 32 of them at once (four instances, 0.1-0.4 s each):
    # once cancelled, those waiting for an instance never run. Run to the end, all 40 would.
    time.sleep(1.5)
    ran = executions() - before
    assert ran < 16, ran
    assert executions() - before == ran  # nothing more runs later
    # The ensemble still serves.
    assert [index for index, _, _ in _stream(server, "stamped", 2)] == [0, 1]


# Decoupled: IN = n -> n answers of 2 MiB each, sent at once.
BIG_BURST = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            for index in range(count):
                block = np.full(2 << 20, index % 256, np.uint8)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("BLOCK", block)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

# After it, slowly (0.2 s an answer, one instance): what the block held, as one number.
SLOW_SUM = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.2)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "FIRST", pb_utils.get_input_tensor_by_name(r, "BLOCK").as_numpy()[:1].astype(np.int32)
            )])
            for r in requests
        ]
"""

BIG_PIPELINE = """
platform: "ensemble"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "FIRST" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "big_burst" model_version: -1 input_map { key: "IN" value: "IN" }
    output_map { key: "BLOCK" value: "block" } },
  { model_name: "slow_sum" model_version: -1 input_map { key: "BLOCK" value: "block" }
    output_map { key: "FIRST" value: "FIRST" } }
] }
"""


@pytest.fixture(scope="module")
def bounded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server that holds at most 16 MiB of requests and unread answers, with no bound per request."""
    repo = tmp_path_factory.mktemp("ensemble_bytes")
    write_python_model(repo, "big_burst", BIG_BURST, BURST_CONFIG.replace(
        'output [ { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]',
        'output [ { name: "BLOCK" data_type: TYPE_UINT8 dims: [ -1 ] } ]',
    ))  # fmt: skip
    write_python_model(repo, "slow_sum", SLOW_SUM, """
backend: "python"
input [ { name: "BLOCK" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "FIRST" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
""")  # fmt: skip
    (repo / "big_pipeline" / "1").mkdir(parents=True)
    (repo / "big_pipeline" / "config.pbtxt").write_text(BIG_PIPELINE)
    args = [f"--max-queued-bytes={16 << 20}", "--max-unread-response-bytes=0"]
    proc = ServerProcess([repo], args).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _firsts(server: ServerProcess, count: int) -> tuple[list[int], list[str]]:
    """FIRST of each answer to one streamed request IN = count, and the errors, until the stream ends."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    firsts: list[int] = []
    errors: list[str] = []
    try:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([count], dtype=np.int32))
        client.async_stream_infer("big_pipeline", [tensor], enable_empty_final_response=True)
        while True:
            result, error = received.get(timeout=30)
            if error is not None:
                errors.append(str(error))
                break
            response = result.get_response()
            if response.outputs:
                firsts.append(int(result.as_numpy("FIRST")[0]))
            if response.parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream(cancel_requests=True)
    return firsts, errors


def test_the_answers_held_by_the_steps_after_a_decoupled_step_count_against_the_server_s_bound(
    bounded_server: ServerProcess,
) -> None:
    # 33 answers of 2 MiB: the ensemble takes up to 32 of them into its later steps at once, and
    # each counts against the server's 16 MiB bound there, as its later step's request.
    firsts, errors = _firsts(bounded_server, 33)
    assert len(errors) == 1 and "--max-queued-bytes" in errors[0], (firsts, errors)
    assert len(firsts) < 8
    # And given back once those runs ended: a stream that fits is served whole.
    time.sleep(1)
    assert _firsts(bounded_server, 4) == ([0, 1, 2, 3], [])
