"""The SageMaker front end, driven as SageMaker drives a container: ``GET /ping``, ``POST /invocations``
with the JSON or binary envelope, and the multi-model routes under ``/models`` with the target-model
header, against a real ``trt serve --allow-sagemaker=true`` process."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient

from tests.support import ROOT, ServerProcess, free_port, write_python_model, write_simple

BINARY_MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
DATA = np.arange(16, dtype=np.int32).reshape(1, 16)


def request(
    port: int, path: str, body: bytes | None = None, headers: dict[str, str] | None = None, method: str = ""
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, headers=headers or {}, method=method or None
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as reply:
            return reply.status, {k.lower(): v for k, v in reply.headers.items()}, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def infer_body(binary_input: bool = False, binary_output: bool = False) -> tuple[bytes, int | None]:
    """What a SageMaker client built with tritonclient sends (Triton's own SageMaker tests do this)."""
    inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(DATA, binary_data=binary_input)
    inputs[1].set_data_from_numpy(DATA, binary_data=False)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary_output) for n in ("OUTPUT0", "OUTPUT1")]
    body, header_length = httpclient.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
    return body, header_length


@pytest.fixture(scope="module")
def models_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What SageMaker unpacks for a multi-model endpoint: /opt/ml/models/<hash>/model (here under a
    temporary root, given to the server as TRT_SAGEMAKER_MODELS_ROOT)."""
    root = tmp_path_factory.mktemp("opt-ml") / "models"
    write_simple(root / "123456789abcdefghi", name="model")  # config.pbtxt at the url's root: one model
    write_simple(root / "987654321ihgfedcba" / "model", name="subadd")  # a repository holding one model
    return root


@pytest.fixture(scope="module")
def sagemaker(tmp_path_factory: pytest.TempPathFactory, models_root: Path) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("sm-repo")
    write_simple(repo)
    server = ServerProcess(
        [repo],
        extra_args=[
            "--model-control-mode=explicit",
            "--load-model=simple",
            "--allow-sagemaker=true",
            f"--sagemaker-port={free_port()}",
        ],
        env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "simple", "TRT_SAGEMAKER_MODELS_ROOT": str(models_root)},
    )
    server.start(tmp_path_factory.mktemp("sm-logs"))
    yield server
    server.stop()


def sagemaker_port(server: ServerProcess) -> int:
    flag = next(arg for arg in server.extra_args if arg.startswith("--sagemaker-port="))
    return int(flag.split("=", 1)[1])


def test_ping_answers_readiness_on_get_only(sagemaker: ServerProcess) -> None:
    port = sagemaker_port(sagemaker)
    assert request(port, "/ping")[0] == 200
    status, _, body = request(port, "/ping", b"", method="POST")
    assert status == 405 and orjson.loads(body) == {"error": "Method Not Allowed"}


def test_invocations_runs_the_default_model_with_json(sagemaker: ServerProcess) -> None:
    body, _ = infer_body()
    status, headers, reply = request(
        sagemaker_port(sagemaker), "/invocations", body, {"Content-Type": "application/json"}
    )
    assert status == 200, reply
    assert headers["content-type"] == "application/json"
    outputs = {o["name"]: o["data"] for o in orjson.loads(reply)["outputs"]}
    assert outputs["OUTPUT0"] == [2 * x for x in range(16)] and outputs["OUTPUT1"] == [0] * 16


def test_invocations_binary_envelope_both_ways(sagemaker: ServerProcess) -> None:
    body, header_length = infer_body(binary_input=True, binary_output=True)
    status, headers, reply = request(
        sagemaker_port(sagemaker),
        "/invocations",
        body,
        {"Content-Type": f"{BINARY_MIME}{header_length}"},
    )
    assert status == 200, reply
    # The answer names its JSON header's size the same way, not with Inference-Header-Content-Length.
    assert headers["content-type"].startswith(BINARY_MIME)
    assert "inference-header-content-length" not in headers
    size = int(headers["content-type"][len(BINARY_MIME) :])
    result = httpclient.InferenceServerClient.parse_response_body(reply, header_length=size)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA * 2)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), DATA * 0)


@pytest.mark.parametrize(
    "content_type, message",
    [
        (f"additional-string/{BINARY_MIME}{{n}}", "expect MIME type for binary data starts with"),
        (f"{BINARY_MIME}additional-string{{n}}", "Unable to parse inference header size"),
        (f"{BINARY_MIME}-{{n}}", "inference header size should be in range"),
        (f"{BINARY_MIME}99999", "inference header size should be in range"),
        # a size of 0 is a raw binary request, which a model of two inputs cannot take
        (f"{BINARY_MIME}0", "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs"),
    ],
)
def test_malformed_binary_header_is_a_400(sagemaker: ServerProcess, content_type: str, message: str) -> None:
    body, header_length = infer_body(binary_input=True)
    status, _, reply = request(
        sagemaker_port(sagemaker),
        "/invocations",
        body,
        {"Content-Type": content_type.replace("{n}", str(header_length))},
    )
    assert status == 400 and message in orjson.loads(reply)["error"]


def test_unknown_routes_are_a_400_with_no_body(sagemaker: ServerProcess) -> None:
    assert request(sagemaker_port(sagemaker), "/v2/health/ready")[::2] == (400, b"")
    assert request(sagemaker_port(sagemaker), "/models", b"", method="PUT")[::2] == (400, b"")


def test_multi_model_endpoint_load_list_invoke_unload(sagemaker: ServerProcess, models_root: Path) -> None:
    port = sagemaker_port(sagemaker)
    json_headers = {"Content-Type": "application/json"}
    first = {"model_name": "sm_mme_model_1", "url": str(models_root / "123456789abcdefghi" / "model")}
    second = {"model_name": "sm_mme_model_2", "url": str(models_root / "987654321ihgfedcba" / "model")}
    assert request(port, "/models", orjson.dumps(first), json_headers)[0] == 200
    status, _, reply = request(port, "/models", orjson.dumps(first), json_headers)
    assert status == 409 and "already" in orjson.loads(reply)["error"]
    # SageMaker names the archive in a header; the model is served under that name.
    assert (
        request(
            port,
            "/models",
            orjson.dumps(second),
            {**json_headers, "X-Amzn-SageMaker-Target-Model": "b.tar.gz"},
        )[0]
        == 200
    )

    listed = orjson.loads(request(port, "/models")[2])["models"]
    assert sorted(listed, key=lambda m: m["modelName"]) == [
        {"modelName": "sm_mme_model_1", "modelUrl": str(models_root / "123456789abcdefghi")},
        {"modelName": "sm_mme_model_2", "modelUrl": second["url"]},
    ]
    assert orjson.loads(request(port, "/models/sm_mme_model_1")[2]) == {
        "modelName": "sm_mme_model_1",
        "modelUrl": str(models_root / "123456789abcdefghi"),
    }
    assert request(port, "/models/never_loaded")[0] == 404

    body, _ = infer_body()
    status, _, reply = request(port, "/models/sm_mme_model_1/invoke", body, json_headers)
    assert status == 200 and orjson.loads(reply)["model_name"] == "sm_mme_model_1"
    status, _, reply = request(
        port,
        "/models/sm_mme_model_2/invoke",
        body,
        {**json_headers, "X-Amzn-SageMaker-Target-Model": "b.tar.gz"},
    )
    assert status == 200 and orjson.loads(reply)["model_name"] == "b.tar.gz"
    assert request(port, "/models/never_loaded/invoke", body, json_headers)[0] == 404
    # Every invoke failure is a 400 on a multi-model endpoint (Triton keeps SageMaker's contract).
    status, _, reply = request(port, "/models/sm_mme_model_1/invoke", b'{"inputs": []}', json_headers)
    assert status == 400 and "error" in orjson.loads(reply)

    assert request(port, "/models/sm_mme_model_1", method="DELETE")[0] == 200
    assert request(port, "/models/sm_mme_model_1", method="DELETE")[0] == 404
    assert request(port, "/models/sm_mme_model_1/invoke", body, json_headers)[0] == 404
    assert [m["modelName"] for m in orjson.loads(request(port, "/models")[2])["models"]] == ["sm_mme_model_2"]


@pytest.mark.parametrize("url", ["/proc/self", "/tmp/elsewhere/model", "{root}/../outside/model"])
def test_load_urls_outside_the_archive_root_are_refused(
    sagemaker: ServerProcess, models_root: Path, url: str
) -> None:
    document = {"model_name": "escape", "url": url.replace("{root}", str(models_root))}
    status, _, _ = request(sagemaker_port(sagemaker), "/models", orjson.dumps(document))
    assert status == 400
    assert "escape" not in request(sagemaker_port(sagemaker), "/models")[2].decode()


def test_safe_port_range_refuses_endpoints_outside_it(tmp_path: Path) -> None:
    write_simple(tmp_path)
    completed = subprocess.run(
        [sys.executable, "-m", "trt", "serve", f"--model-repository={tmp_path}", "--http-address=127.0.0.1",
         "--http-port=8000", "--allow-sagemaker=true", "--sagemaker-port=8080",
         "--sagemaker-safe-port-range=8081-8090"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 2
    message = " ".join(completed.stderr.replace("│", " ").split())  # typer boxes and wraps it
    assert "cannot listen to HTTP requests at port 8000, allowed port range is [8081, 8090]" in message


def test_serve_script_starts_trt_as_sagemaker_starts_the_container(tmp_path: Path) -> None:
    """deploy/sagemaker/serve maps SageMaker's variables to flags, as Triton's image script does: one
    model in the repository becomes the default model, HTTP is off, /ping answers on the bound port."""
    if shutil.which("bash") is None:
        pytest.fail("bash is needed to run deploy/sagemaker/serve")
    repo = tmp_path / "model"
    write_simple(repo, name="only_model")
    port = free_port()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "SAGEMAKER_BIND_TO_PORT": str(port),
        "TRT_SAGEMAKER_MODEL_REPO": str(repo),
        "TRT_SAGEMAKER_ADDRESS": "127.0.0.1",
        "TRT_COMMAND": f"{sys.executable} -m trt",
        "PYTHONPATH": str(ROOT),
    }
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        ["bash", str(ROOT / "deploy" / "sagemaker" / "serve")], cwd=ROOT, env=env, stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 60
        while request_or_none(port, "/ping") != 200:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        body, _ = infer_body()
        status, _, reply = request(port, "/invocations", body, {"Content-Type": "application/json"})
        assert status == 200 and orjson.loads(reply)["model_name"] == "only_model"
    finally:
        process.terminate()
        process.wait(30)


def request_or_none(port: int, path: str) -> int | None:
    try:
        return request(port, path)[0]
    except OSError:
        return None


def test_http_restrictions_apply_to_sagemaker_routes(tmp_path: Path, models_root: Path) -> None:
    """--http-restricted-api covers SageMaker's routes, as in Triton: 403 without the header, also on a
    multi-model invoke (whose other failures are all 400)."""
    write_simple(tmp_path)
    port = free_port()
    server = ServerProcess(
        [tmp_path],
        extra_args=[
            "--model-control-mode=explicit", "--load-model=simple", "--allow-sagemaker=true",
            f"--sagemaker-port={port}", "--http-restricted-api=inference,model-repository:secret=open",
        ],
        env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "simple", "TRT_SAGEMAKER_MODELS_ROOT": str(models_root)},
    )  # fmt: skip
    server.start(tmp_path)
    try:
        body, _ = infer_body()
        json_headers = {"Content-Type": "application/json"}
        assert request(port, "/invocations", body, json_headers)[0] == 403
        assert request(port, "/invocations", body, {**json_headers, "secret": "open"})[0] == 200
        assert request(port, "/models")[0] == 403
        load = orjson.dumps({"model_name": "m1", "url": str(models_root / "123456789abcdefghi" / "model")})
        assert request(port, "/models", load, {**json_headers, "secret": "open"})[0] == 200
        status, _, reply = request(port, "/models/m1/invoke", body, json_headers)
        assert status == 403 and "secret" in orjson.loads(reply)["error"]
        assert request(port, "/models/m1/invoke", body, {**json_headers, "secret": "open"})[0] == 200
        assert request(port, "/ping")[0] == 200  # health is not restricted here
    finally:
        server.stop()


# finalize() takes 1 s, then leaves a file in the model's folder.
SLOW_FINALIZE = """
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.marker = os.path.join(args["model_repository"], "finalized")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "X")]) for r in requests]

    def finalize(self):
        time.sleep(1)
        open(self.marker, "w").close()
"""

SLOW_FINALIZE_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def test_a_multi_model_unload_answers_once_the_model_has_let_go(
    sagemaker: ServerProcess, models_root: Path
) -> None:
    """SageMaker may delete the model's files, or load another model into its memory, as soon as the
    unload answers: like Triton's, it waits for the model to be gone, not only for it to stop serving."""
    port = sagemaker_port(sagemaker)
    write_python_model(models_root / "5l0wf1na1ze", "model", SLOW_FINALIZE, SLOW_FINALIZE_CONFIG)
    folder = models_root / "5l0wf1na1ze" / "model"
    load = {"model_name": "slow_finalize", "url": str(folder)}
    assert request(port, "/models", orjson.dumps(load), {"Content-Type": "application/json"})[0] == 200
    assert request(port, "/models/slow_finalize", method="DELETE")[0] == 200
    assert (folder / "finalized").exists()  # before: the answer came 1 s before finalize() ended
