"""Faults injected into a running ``trt serve`` under load, with real clients: Python model processes
killed (``kill -9``) again and again, a restart that fails once, an unload, a SIGTERM of the server.
Each asserts that every request gets an answer (a result or an error, never a hang) and that the
model serves again afterwards."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, write_python_model

ADD_SUB = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        marker = os.path.join(args["model_repository"], "fail_next_start")
        if os.path.exists(marker):
            os.unlink(marker)
            raise RuntimeError("initialize() fails this once")

    def execute(self, requests):
        pid = np.array([os.getpid()], dtype=np.int64)
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
            responses.append(pb_utils.InferenceResponse([*outputs, pb_utils.Tensor("PID", pid)]))
        return responses
"""

CONFIG = """
name: "add_sub"
backend: "python"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }
]
"""

ANSWER_WITHIN_S = 10.0  # the bound for every request
SERVING_WITHIN_S = 5.0  # and for the model to serve again after a kill


@dataclass
class Outcome:
    seconds: float
    pid: int | None  # the model process that answered; None: an error
    error: str = ""


@dataclass
class Load:
    """``clients`` threads sending add_sub requests one after another until stopped."""

    url: str
    clients: int = 8
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        for _ in range(self.clients):
            thread = threading.Thread(target=self._send, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(ANSWER_WITHIN_S + 5)
        assert not any(thread.is_alive() for thread in self._threads), "a client is still waiting"

    def _send(self) -> None:
        client = httpclient.InferenceServerClient(self.url, network_timeout=ANSWER_WITHIN_S + 20)
        data = np.arange(16, dtype=np.int32)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                result = client.infer("add_sub", _inputs(data))
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
                outcome = Outcome(time.monotonic() - started, int(result.as_numpy("PID")[0]))
            except InferenceServerException as exc:
                outcome = Outcome(time.monotonic() - started, None, str(exc))
            except Exception as exc:  # refused once the server has gone (SIGTERM): an answer too
                outcome = Outcome(time.monotonic() - started, None, f"{type(exc).__name__}: {exc}")
                time.sleep(0.05)
            self.outcomes.append(outcome)
        client.close()

    def served_by(self, pid: int) -> bool:
        return any(outcome.pid == pid for outcome in self.outcomes)


def _inputs(data: np.ndarray) -> list[httpclient.InferInput]:
    inputs = [httpclient.InferInput(name, [16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    return inputs


def _serving_pid(url: str, other_than: int = 0, within_s: float = SERVING_WITHIN_S) -> tuple[int, float]:
    """The pid of the model process that answers a request (not ``other_than``), and how long it took."""
    client = httpclient.InferenceServerClient(url, network_timeout=ANSWER_WITHIN_S)
    started = time.monotonic()
    try:
        while True:
            try:
                pid = int(client.infer("add_sub", _inputs(np.zeros(16, dtype=np.int32))).as_numpy("PID")[0])
                if pid != other_than:
                    return pid, time.monotonic() - started
            except InferenceServerException:
                pass
            assert time.monotonic() - started < within_s, f"add_sub did not serve again within {within_s} s"
            time.sleep(0.02)
    finally:
        client.close()


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(f"http://{url}", timeout=5) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("fault_injection") / "models"
    write_python_model(repo, "add_sub", ADD_SUB, CONFIG)
    return repo


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the faults it survives (starting one costs seconds of CI)."""
    server = ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=add_sub"])
    server.start(tmp_path_factory.mktemp("fault_injection_server"))
    try:
        yield server
    finally:
        server.stop()


def _check_answered(outcomes: list[Outcome]) -> None:
    assert outcomes, "no request was sent"
    slowest = max(outcome.seconds for outcome in outcomes)
    assert slowest < ANSWER_WITHIN_S, f"a request took {slowest:.1f} s"


def test_three_kills_under_eight_clients_answer_every_request_and_the_model_serves_again(
    server: ServerProcess,
) -> None:
    pid, _ = _serving_pid(server.http_url)
    recoveries = []
    with Load(server.http_url) as load:
        for _ in range(3):
            time.sleep(0.3)
            os.kill(pid, signal.SIGKILL)
            pid, took = _serving_pid(server.http_url, other_than=pid)
            recoveries.append(took)
        time.sleep(0.3)
    _check_answered(load.outcomes)
    assert max(recoveries) < SERVING_WITHIN_S
    errors = {outcome.error for outcome in load.outcomes if outcome.pid is None}
    for error in errors:  # each is Triton's, for a request the killed process was running
        assert "Stub process is not healthy" in error, error
    assert load.served_by(pid)  # the clients were served by the last process
    assert server.alive()
    assert _status(f"{server.http_url}/v2/health/ready") == 200
    assert _status(f"{server.http_url}/v2/models/add_sub/ready") == 200


def test_a_restart_that_fails_once_is_retried_and_the_model_is_not_ready_meanwhile(
    repo: Path, server: ServerProcess
) -> None:
    pid, _ = _serving_pid(server.http_url)
    readiness: list[int] = []
    with Load(server.http_url, clients=4) as load:
        time.sleep(0.2)
        (repo / "add_sub" / "fail_next_start").touch()
        os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        while time.monotonic() - started < SERVING_WITHIN_S:  # until it is not ready, then ready again
            readiness.append(_status(f"{server.http_url}/v2/models/add_sub/ready"))
            if readiness[-1] == 200 and 400 in readiness:
                break
            time.sleep(0.02)
        new_pid, _ = _serving_pid(server.http_url, other_than=pid)
        time.sleep(0.2)
    _check_answered(load.outcomes)
    assert not (repo / "add_sub" / "fail_next_start").exists()  # the failing start did happen
    assert 400 in readiness and readiness[-1] == 200  # not ready while it had no process
    assert "initialize() fails this once" in server.log()
    assert load.served_by(new_pid)
    assert server.alive() and _status(f"{server.http_url}/v2/health/ready") == 200


def test_an_unload_under_load_answers_every_request_and_a_reload_serves(server: ServerProcess) -> None:
    _serving_pid(server.http_url)
    control = httpclient.InferenceServerClient(server.http_url, network_timeout=ANSWER_WITHIN_S)
    with Load(server.http_url) as load:
        time.sleep(0.3)
        control.unload_model("add_sub")
        time.sleep(0.3)
        control.load_model("add_sub")
        _serving_pid(server.http_url)
        time.sleep(0.2)
    control.close()
    _check_answered(load.outcomes)
    assert any(outcome.pid is None for outcome in load.outcomes)  # some arrived while it was gone
    assert server.alive()


def test_a_sigterm_under_load_answers_every_request_and_the_server_exits(server: ServerProcess) -> None:
    """Last: it ends the module's server."""
    _serving_pid(server.http_url)
    with Load(server.http_url) as load:
        time.sleep(0.3)
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(ANSWER_WITHIN_S)
        time.sleep(0.1)
    _check_answered(load.outcomes)
    assert code == 0
    assert any(outcome.pid for outcome in load.outcomes)
    assert any(outcome.pid is None for outcome in load.outcomes)  # refused once it had gone
