"""``trt serve --frontend-workers 2``: HTTP and gRPC served by two worker processes, answered by the
one core process, as tritonclient sees it; and the workers' lives (killed, restarted, stopped)."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.server.backends.python.python_models import WAITER, WAITER_CONFIG
from tests.server.http.test_generate import SPELL, SPELL_CONFIG
from tests.support import ServerProcess, collect_stream, simple_inputs, write_python_model, write_simple

ADMIN = {"admin-key": "s3cret"}
DATA = np.arange(16, dtype=np.int32).reshape(1, 16)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("frontend_repo")
    write_simple(repo)
    write_python_model(repo, "spell", SPELL, SPELL_CONFIG)
    write_python_model(repo, "slow", WAITER, WAITER_CONFIG)
    proc = ServerProcess(
        [repo],
        extra_args=[
            "--frontend-workers=2",
            "--model-control-mode=explicit",
            "--load-model=*",
            "--http-restricted-api=model-repository:admin-key=s3cret",
            "--grpc-restricted-protocol=model-repository:admin-key=s3cret",
        ],
    ).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _workers(server: ServerProcess) -> list[psutil.Process]:
    assert server.process is not None
    return [
        child for child in psutil.Process(server.process.pid).children()
        if "trt.server.frontend.worker" in " ".join(child.cmdline())
    ]  # fmt: skip


def _clients_held(worker: psutil.Process, port: int) -> int:
    """Client connections a worker holds open on ``port`` (its listening sockets not counted)."""
    return sum(
        1 for c in worker.net_connections(kind="tcp")
        if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
    )  # fmt: skip


# gRPC channels to one address share a connection unless each has its own subchannel pool.
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
MAX_CONNECTIONS = 64


def _infer_until_every_worker_answered(server: ServerProcess) -> list[bool]:
    """Infer ``simple`` over fresh connections, held open, until both workers have taken some over each
    protocol; each request's outcome. The kernel spreads connections over the workers by their address,
    so a fixed number of them could all land on one worker (1 in 2^(n-1))."""
    outcomes: list[bool] = []
    clients: list[Any] = []
    try:
        for module, port in ((httpclient, server.http_port), (grpcclient, server.grpc_port)):
            url = f"127.0.0.1:{port}"
            for _ in range(MAX_CONNECTIONS):
                options = {"channel_args": OWN_CONNECTION} if module is grpcclient else {}
                client = module.InferenceServerClient(url, **options)
                clients.append(client)
                try:
                    client.infer("simple", simple_inputs(module, DATA))
                    outcomes.append(True)
                except InferenceServerException:
                    outcomes.append(False)
                workers = _workers(server)
                assert len(workers) == 2
                if all(_clients_held(worker, port) > 0 for worker in workers):
                    break
            else:
                raise AssertionError(f"{MAX_CONNECTIONS} connections to port {port} all reached one worker")
    finally:
        for client in clients:
            client.close()
    return outcomes


def _wait_for_log(server: ServerProcess, text: str, timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in (log := server.log()):
            return log
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in the log:\n{server.log()}")


def _int_input(module: object, value: int = 0) -> object:
    tensor = module.InferInput("IN", [1], "INT32")  # type: ignore[attr-defined]
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return tensor


def test_infer_binary_and_json_over_http_and_grpc(server: ServerProcess) -> None:
    assert len(_workers(server)) == 2
    http = httpclient.InferenceServerClient(server.http_url)
    for binary in (True, False):
        outputs = [
            httpclient.InferRequestedOutput(name, binary_data=binary) for name in ("OUTPUT0", "OUTPUT1")
        ]
        result = http.infer("simple", simple_inputs(httpclient, DATA), outputs=outputs)
        assert (result.as_numpy("OUTPUT0") == DATA * 2).all()
        assert (result.as_numpy("OUTPUT1") == 0).all()
    result = grpcclient.InferenceServerClient(server.grpc_url).infer(
        "simple", simple_inputs(grpcclient, DATA)
    )
    assert (result.as_numpy("OUTPUT0") == DATA * 2).all()


def test_metadata_config_and_unknown_models(server: ServerProcess) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert http.get_model_metadata("simple")["platform"] == "onnxruntime_onnx"
    assert grpc.get_model_metadata("simple").platform == "onnxruntime_onnx"
    assert http.get_model_config("simple")["max_batch_size"] == 8
    assert grpc.get_model_config("simple").config.max_batch_size == 8
    with pytest.raises(InferenceServerException, match="unknown model") as http_error:
        http.get_model_metadata("nope")
    assert http_error.value.status() == "404"
    with pytest.raises(InferenceServerException, match="unknown model") as grpc_error:
        grpc.get_model_metadata("nope")
    assert grpc_error.value.status() == "StatusCode.NOT_FOUND"


def test_restricted_apis_are_refused_without_their_header(server: ServerProcess) -> None:
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'") as http_error:
        httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    assert http_error.value.status() == "403"
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'") as grpc_error:
        grpcclient.InferenceServerClient(server.grpc_url).get_model_repository_index()
    assert grpc_error.value.status() == "StatusCode.UNAVAILABLE"


def test_requests_from_many_connections_are_counted_in_one_place(server: ServerProcess) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    before = http.get_inference_statistics("simple")["model_stats"][0]["inference_count"]
    outcomes = _infer_until_every_worker_answered(server)
    assert all(outcomes)
    after = http.get_inference_statistics("simple")["model_stats"][0]["inference_count"]
    assert after - before == len(outcomes)


def test_a_model_unloaded_and_loaded_again_is_seen_through_every_worker(server: ServerProcess) -> None:
    admin = httpclient.InferenceServerClient(server.http_url)
    admin.unload_model("simple", headers=ADMIN)
    assert not any(_infer_until_every_worker_answered(server))
    grpcclient.InferenceServerClient(server.grpc_url).load_model("simple", headers=ADMIN)
    assert all(_infer_until_every_worker_answered(server))


def test_a_decoupled_model_streams_over_model_stream_infer(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"worker"], dtype=np.object_))
    client.async_stream_infer("spell", [text], enable_empty_final_response=True)
    letters, final = [], False
    while not final:
        result, error = received.get(timeout=15)
        assert error is None
        response = result.get_response()
        final = response.parameters["triton_final_response"].bool_param
        if not final:
            letters.append(result.as_numpy("text_output")[0].decode())
    client.stop_stream()
    assert "".join(letters) == "worker"


def test_a_cancelled_model_stream_infer_stops_the_model_in_the_core(server: ServerProcess) -> None:
    before = server.log().count("spell: cancelled at")
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received = collect_stream(client)
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"y" * 200], dtype=np.object_))
    client.async_stream_infer("spell", [text])
    for _ in range(3):
        _, error = received.get(timeout=15)
        assert error is None
    client.stop_stream(cancel_requests=True)
    deadline = time.monotonic() + 10
    while server.log().count("spell: cancelled at") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.log().count("spell: cancelled at") == before + 1


@pytest.mark.parametrize("length", ["\xb2", "9" * 5000], ids=["superscript two", "5000 digits"])
def test_a_header_length_int_cannot_read_is_refused_as_without_workers(
    server: ServerProcess, length: str
) -> None:
    """str.isdigit() takes both; int() reads neither. The core refuses them (400), not the worker (500)."""
    header = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16]}]}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
    connection.putrequest("POST", "/v2/models/simple/infer")
    connection.putheader("Inference-Header-Content-Length", length.encode("latin-1"))
    connection.putheader("Content-Length", str(len(header) + 64))
    connection.endheaders(header + bytes(64))
    reply = connection.getresponse()
    assert reply.status == 400
    assert json.loads(reply.read())["error"].startswith("Unable to parse Inference-Header-Content-Length")


def test_a_raw_binary_request_crosses_whole_to_the_core(server: ServerProcess) -> None:
    """Inference-Header-Content-Length 0: no JSON header to send apart; the core deduces the input of
    a Python model, as without workers, and refuses a model of two inputs."""
    answers = []
    for model in ("slow", "simple"):
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
        headers = {"Inference-Header-Content-Length": "0", "Content-Type": "application/octet-stream"}
        connection.request("POST", f"/v2/models/{model}/infer", np.int32(7).tobytes(), headers)
        reply = connection.getresponse()
        answers.append((reply.status, reply.getheader("Inference-Header-Content-Length"), reply.read()))
    status, header_length, body = answers[0]
    assert status == 200, body
    assert json.loads(body[: int(header_length)])["outputs"][0]["shape"] == [1]
    assert body[int(header_length) :] == np.int32(1).tobytes()  # what the waiter answers
    status, _, body = answers[1]
    assert status == 400 and b"Raw request must only have 1 input" in body


def test_a_streamed_http_response_crosses_whole(server: ServerProcess) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
    connection.request("POST", "/v2/models/spell/generate_stream", json.dumps({"text_input": "abcdefgh"}))
    reply = connection.getresponse()
    assert reply.status == 200
    assert reply.getheader("content-type", "").startswith("text/event-stream")
    events = [
        json.loads(block.removeprefix("data: ")) for block in reply.read().decode().split("\n\n") if block
    ]
    assert [event["text_output"] for event in events] == list("abcdefgh")
    assert [event["index"] for event in events] == list(range(8))


def test_a_client_that_leaves_a_stream_stops_the_model_in_the_core(server: ServerProcess) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
    connection.request("POST", "/v2/models/spell/generate_stream", json.dumps({"text_input": "x" * 200}))
    reply = connection.getresponse()
    assert reply.read1(64).startswith(b"data: ")  # the stream is running (200 letters take 4 s)
    connection.close()
    log = _wait_for_log(server, "spell: cancelled at")
    assert int(log.split("spell: cancelled at ")[1].split()[0]) < 150


def test_a_client_that_disconnects_cancels_its_request_in_the_core(server: ServerProcess) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
    body = {"id": "wait-http", "inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [0]}]}
    connection.request("POST", "/v2/models/slow/infer", json.dumps(body))
    _wait_for_log(server, "slow: executing wait-http")
    connection.close()
    log = _wait_for_log(server, "slow: wait-http ")
    assert "slow: wait-http cancelled" in log
    # And a gRPC call whose client cancels it.
    client = grpcclient.InferenceServerClient(server.grpc_url)
    future = client.async_infer(
        "slow", [_int_input(grpcclient)], lambda result, error: None, request_id="wait-grpc"
    )
    _wait_for_log(server, "slow: executing wait-grpc")
    future.cancel()
    assert "slow: wait-grpc cancelled" in _wait_for_log(server, "slow: wait-grpc ")


def test_a_killed_worker_is_restarted_and_every_request_is_answered(server: ServerProcess) -> None:
    victim = _workers(server)[0]
    outcomes: list[str] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            client = httpclient.InferenceServerClient(server.http_url)
            try:
                result = client.infer("simple", simple_inputs(httpclient, DATA))
                outcomes.append("ok" if (result.as_numpy("OUTPUT0") == DATA * 2).all() else "wrong")
            except Exception:  # a request on the killed worker's connection loses its socket
                outcomes.append("error")
            finally:
                client.close()

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    victim.kill()
    _wait_for_log(server, f"(pid {victim.pid}) exited with -9")
    deadline = time.monotonic() + 15
    while len(_workers(server)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    served = len(outcomes)
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join(20)
    assert not any(thread.is_alive() for thread in threads)  # every request came back, one way or another
    assert server.alive()
    workers = _workers(server)
    assert len(workers) == 2 and victim.pid not in [worker.pid for worker in workers]
    assert "wrong" not in outcomes
    assert outcomes[served:].count("ok") > 0
    assert outcomes.count("error") <= 8, outcomes.count("error")


def test_a_dead_workers_requests_in_flight_are_cancelled_in_the_core(server: ServerProcess) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
    body = {"id": "wait-orphan", "inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [0]}]}
    connection.request("POST", "/v2/models/slow/infer", json.dumps(body))
    _wait_for_log(server, "slow: executing wait-orphan")
    assert connection.sock is not None
    client_port = connection.sock.getsockname()[1]
    holder = next(
        worker for worker in _workers(server)
        if any(c.raddr and c.raddr.port == client_port for c in worker.net_connections(kind="tcp"))
    )  # fmt: skip
    holder.kill()
    assert "slow: wait-orphan cancelled" in _wait_for_log(server, "slow: wait-orphan ")
    with pytest.raises(OSError):  # its socket went with the worker
        connection.getresponse()
    deadline = time.monotonic() + 15
    while len(_workers(server)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_workers(server)) == 2


def test_sigterm_answers_requests_in_flight_then_exits_0(server: ServerProcess) -> None:
    assert server.process is not None
    answers: list[object] = []

    def nap(index: int) -> None:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        answers.append(
            client.infer("slow", [_int_input(grpcclient)], request_id=f"nap-{index}").as_numpy("OUT")[0]
        )

    threads = [threading.Thread(target=nap, args=(index,)) for index in range(3)]
    for thread in threads:
        thread.start()
    _wait_for_log(server, "slow: executing nap-")
    workers = _workers(server)
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(20) == 0
    for thread in threads:
        thread.join(5)
    assert answers == [1, 1, 1]
    assert not any(
        psutil.pid_exists(worker.pid) and worker.status() != psutil.STATUS_ZOMBIE for worker in workers
    )


def test_a_port_in_use_stops_the_server_with_the_usual_message(tmp_path: Path) -> None:
    write_simple(tmp_path / "repo")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = ServerProcess(
            [tmp_path / "repo"], ["--frontend-workers=2"], http_port=taken.getsockname()[1]
        )
        server.start(tmp_path, wait=False)
        assert server.process is not None
        assert server.process.wait(60) == 1
    assert "cannot start the HTTPService endpoint on 127.0.0.1" in server.log()
    assert "Address already in use" in server.log()


def test_inference_requests_cross_by_layout_binary_and_json_alike(tmp_path: Path) -> None:
    write_simple(tmp_path / "repo")
    server = ServerProcess([tmp_path / "repo"], ["--frontend-workers=1", "--log-verbose=1"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        for value in range(3):  # one JSON header for all three: one layout
            data = np.full((1, 16), value, dtype=np.int32)
            result = client.infer("simple", simple_inputs(httpclient, data))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + data)
        for value in range(3):  # tensors as JSON data, re-encoded in binary by the worker: one more
            data = np.full((1, 16), value, dtype=np.int32)
            as_json = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
            for tensor in as_json:
                tensor.set_data_from_numpy(data, binary_data=False)
            np.testing.assert_array_equal(client.infer("simple", as_json).as_numpy("OUTPUT0"), data + data)
        client.close()
        layouts = [line for line in server.log().splitlines() if "layout" in line and "for model" in line]
        assert len(layouts) == 2 and "layout 2 for model 'simple'" in layouts[1], layouts
    finally:
        server.stop()
