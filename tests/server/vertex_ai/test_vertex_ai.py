"""The Vertex AI front end, driven as Vertex AI drives a prediction container: the ``AIP_*`` environment,
the health route, the predict route with the JSON or binary envelope, and redirects through
``X-Vertex-Ai-Triton-Redirect``, against a real ``trt serve`` process."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient

from tests.server.sagemaker.test_sagemaker import DATA, infer_body, request, request_or_none
from tests.support import ROOT, ServerProcess, free_port, write_simple

BINARY_MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
REDIRECT = "X-Vertex-Ai-Triton-Redirect"


def vertex_environment(port: int, storage: Path) -> dict[str, str]:
    """What Vertex AI sets in a prediction container (AIP_MODE=PREDICTION turns HTTP and gRPC off)."""
    return {
        "AIP_MODE": "PREDICTION",
        "AIP_HTTP_PORT": str(port),
        "AIP_PREDICT_ROUTE": "/v1/endpoints/123/deployedModels/456:predict",
        "AIP_HEALTH_ROUTE": "/v1/endpoints/123/deployedModels/456",
        "AIP_STORAGE_URI": str(storage),
    }


class VertexServer(ServerProcess):
    def command(self) -> list[str]:
        # No repository flag: AIP_STORAGE_URI is the repository. The address keeps it on loopback.
        return [
            *self.command_prefix,
            "serve",
            "--http-address=127.0.0.1",
            f"--metrics-port={self.metrics_port}",
            "--exit-timeout-secs=5",
            *self.extra_args,
        ]

    def wait_live(self, timeout: float = 60) -> None:
        port, route = int(self.env["AIP_HTTP_PORT"]), self.env["AIP_HEALTH_ROUTE"]
        deadline = time.monotonic() + timeout
        while request_or_none(port, route) != 200:
            assert self.process is not None
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"trt serve did not become ready:\n{self.log()}")
            time.sleep(0.1)


@pytest.fixture(scope="module")
def vertex(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VertexServer]:
    storage = tmp_path_factory.mktemp("gcs-model")
    write_simple(storage)
    port = free_port()
    server = VertexServer([], env=vertex_environment(port, storage))
    server.start(tmp_path_factory.mktemp("vertex-logs"))
    yield server
    server.stop()


def predict(server: VertexServer, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    return request(int(server.env["AIP_HTTP_PORT"]), server.env["AIP_PREDICT_ROUTE"], body, headers)


def test_prediction_mode_serves_vertex_only(vertex: VertexServer) -> None:
    port = int(vertex.env["AIP_HTTP_PORT"])
    assert request(port, vertex.env["AIP_HEALTH_ROUTE"])[0] == 200
    log = vertex.log()
    assert "Started Vertex AI HTTPService at 127.0.0.1" in log
    assert "Started HTTPService" not in log and "Started GRPCInferenceService" not in log  # off by default


def test_predict_runs_the_only_model(vertex: VertexServer) -> None:
    body, _ = infer_body()
    status, headers, reply = predict(vertex, body, {"Content-Type": "application/json"})
    assert status == 200, reply
    assert headers["content-type"] == "application/json"
    outputs = {o["name"]: o["data"] for o in orjson.loads(reply)["outputs"]}
    assert outputs == {"OUTPUT0": [2 * x for x in range(16)], "OUTPUT1": [0] * 16}


def test_predict_binary_request_and_response(vertex: VertexServer) -> None:
    body, header_length = infer_body(binary_input=True, binary_output=True)
    status, headers, reply = predict(vertex, body, {"Content-Type": f"{BINARY_MIME}{header_length}"})
    assert status == 200, reply
    size = int(headers["inference-header-content-length"])  # as Triton's HTTP answers a binary output
    result = httpclient.InferenceServerClient.parse_response_body(reply, header_length=size)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA * 2)


def test_malformed_binary_header_is_a_400(vertex: VertexServer) -> None:
    body, header_length = infer_body(binary_input=True)
    status, _, reply = predict(
        vertex, body, {"Content-Type": f"{BINARY_MIME}additional-string{header_length}"}
    )
    assert status == 400 and "Unable to parse inference header size" in orjson.loads(reply)["error"]


def test_redirects_reach_the_read_only_api(vertex: VertexServer) -> None:
    successes_before = successes(vertex)
    body, _ = infer_body()
    status, _, reply = predict(vertex, body, {REDIRECT: "v2/models/simple/infer"})
    assert status == 200 and orjson.loads(reply)["model_name"] == "simple"
    assert successes(vertex) == successes_before + 1  # the metrics redirect reads the live counters
    status, _, reply = predict(vertex, b"", {REDIRECT: "v2/models/simple"})
    assert status == 200 and [t["name"] for t in orjson.loads(reply)["inputs"]] == ["INPUT0", "INPUT1"]
    assert predict(vertex, b"", {REDIRECT: "v2/models/simple/ready"})[0] == 200
    assert predict(vertex, b"", {REDIRECT: "v2/health/live"})[0] == 200
    status, _, reply = predict(vertex, b"{}", {REDIRECT: "v2/repository/index"})
    assert status == 200 and orjson.loads(reply) == [{"name": "simple", "version": "1", "state": "READY"}]


def successes(server: VertexServer) -> int:
    status, _, reply = predict(server, b"", {REDIRECT: "metrics"})
    assert status == 200
    prefix = b'nv_inference_request_success{model="simple",version="1"} '
    line = next(line for line in reply.splitlines() if line.startswith(prefix))
    return int(float(line[len(prefix) :]))


def test_redirects_that_change_the_server_are_refused(vertex: VertexServer) -> None:
    for endpoint in ("v2/repository/models/simple/unload", "v2/systemsharedmemory/region/r/register"):
        assert predict(vertex, b"{}", {REDIRECT: endpoint})[::2] == (403, b"")
    assert predict(vertex, b"{}", {REDIRECT: "v2/models/simple/generate"})[::2] == (400, b"")
    assert predict(vertex, b"{}", {REDIRECT: "anything/else"})[::2] == (400, b"")
    port = int(vertex.env["AIP_HTTP_PORT"])
    get = request(port, vertex.env["AIP_PREDICT_ROUTE"], headers={REDIRECT: "v2/models/simple"})
    assert get[0] == 405
    assert request(port, "/v2/health/ready")[::2] == (400, b"")
    # The model is still served after the refused unload.
    assert predict(vertex, b"", {REDIRECT: "v2/models/simple/ready"})[0] == 200


@pytest.mark.parametrize(
    "change, message",
    [
        ({"AIP_PREDICT_ROUTE": ""}, "API_PREDICT_ROUTE is not defined for Vertex AI endpoint"),
        ({"AIP_HEALTH_ROUTE": ""}, "AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint"),
        ({"ARGS": "--vertex-ai-default-model=subadd"}, "Expect the default model 'subadd' is loaded"),
        ({"SECOND_MODEL": "1"}, "Expect the model repository contains only a single model"),
    ],
)
def test_vertex_ai_that_cannot_start_stops_the_server(
    tmp_path: Path, change: dict[str, str], message: str
) -> None:
    write_simple(tmp_path)
    if change.pop("SECOND_MODEL", None):
        write_simple(tmp_path, name="second")
    args = change.pop("ARGS", "").split()
    env = {**vertex_environment(free_port(), tmp_path), **change, "PYTHONPATH": str(ROOT)}
    env = {key: value for key, value in env.items() if value}
    command = [sys.executable, "-m", "trt", "serve", "--http-address=127.0.0.1"]
    command.append(f"--metrics-port={free_port()}")
    completed = subprocess.run(
        [*command, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", **env},
    )  # fmt: skip
    assert completed.returncode == 1
    assert f"failed to start Vertex AI service: {message}" in completed.stderr


def test_a_flag_given_under_prediction_mode_wins(tmp_path: Path) -> None:
    """AIP_MODE=PREDICTION only changes defaults: --allow-grpc=true keeps gRPC on (Triton's QA case)."""
    write_simple(tmp_path)
    port = free_port()
    server = VertexServer(
        [],
        extra_args=["--allow-grpc=true", "--grpc-address=127.0.0.1"],
        env=vertex_environment(port, tmp_path),
    )
    server.extra_args.append(f"--grpc-port={server.grpc_port}")
    server.start(tmp_path)
    try:
        log = server.log()
        assert f"Started GRPCInferenceService at 127.0.0.1:{server.grpc_port}" in log
        assert "Started HTTPService" not in log and "Started Vertex AI HTTPService" in log
    finally:
        server.stop()
