"""Load with file overrides: a model pushed to a running server through the repository extension, over
HTTP (base64) and gRPC (bytes), and paths that would leave the model folder refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, add_sub_model, save_onnx, simple_inputs, write_simple

CONFIG = {
    "name": "pushed",
    "platform": "onnxruntime_onnx",
    "max_batch_size": 8,
    "input": [
        {"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]},
        {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": [16]},
    ],
    "output": [
        {"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]},
        {"name": "OUTPUT1", "data_type": "TYPE_INT32", "dims": [16]},
    ],
}


@pytest.fixture(scope="module")
def onnx_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("onnx") / "model.onnx"
    save_onnx(add_sub_model(), path)
    return path.read_bytes()


@pytest.fixture(scope="module")
def explicit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    repo = tmp_path_factory.mktemp("push_repo")
    write_simple(repo)
    server = ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=simple"])
    server.start(tmp_path_factory.mktemp("push_logs"))
    yield server, repo
    assert server.alive(), server.log()
    server.stop()


def _infer_http(client: httpclient.InferenceServerClient, model: str) -> np.ndarray:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = simple_inputs(httpclient, a)
    result = client.infer(model, inputs).as_numpy("OUTPUT0")
    assert result is not None
    return result


def test_a_model_pushed_over_http_serves_and_is_not_written_into_the_repository(
    explicit_server: tuple[ServerProcess, Path], onnx_bytes: bytes
) -> None:
    server, repo = explicit_server
    client = httpclient.InferenceServerClient(server.http_url)
    client.load_model("pushed", config=json.dumps(CONFIG), files={"file:1/model.onnx": onnx_bytes})
    assert client.is_model_ready("pushed")
    assert (_infer_http(client, "pushed") == 2 * np.arange(16)).all()
    assert not (repo / "pushed").exists()
    client.unload_model("pushed")
    assert not client.is_model_ready("pushed")


def test_a_model_pushed_over_grpc_serves(
    explicit_server: tuple[ServerProcess, Path], onnx_bytes: bytes
) -> None:
    server, _ = explicit_server
    client = grpcclient.InferenceServerClient(server.grpc_url)
    config = {**CONFIG, "name": "pushed_grpc"}
    client.load_model("pushed_grpc", config=json.dumps(config), files={"file:1/model.onnx": onnx_bytes})
    assert client.is_model_ready("pushed_grpc")
    a = np.ones((1, 16), np.int32)
    inputs = simple_inputs(grpcclient, a)
    assert (client.infer("pushed_grpc", inputs).as_numpy("OUTPUT1") == 0).all()


@pytest.mark.parametrize(
    "key",
    ["file:../../escaped.onnx", "file:1/../../escaped.onnx", "file:/tmp/escaped.onnx", "file:", "file:1//x"],
)
def test_paths_that_leave_the_model_folder_are_refused(
    explicit_server: tuple[ServerProcess, Path], onnx_bytes: bytes, key: str, tmp_path: Path
) -> None:
    server, repo = explicit_server
    for client in (
        httpclient.InferenceServerClient(server.http_url),
        grpcclient.InferenceServerClient(server.grpc_url),
    ):
        with pytest.raises(InferenceServerException, match="must stay inside the model folder"):
            client.load_model(
                "escape", config=json.dumps({**CONFIG, "name": "escape"}), files={key: onnx_bytes}
            )
    assert not Path("/tmp/escaped.onnx").exists() and not (repo.parent / "escaped.onnx").exists()
    assert not httpclient.InferenceServerClient(server.http_url).is_model_ready("escape")
    assert (
        _infer_http(httpclient.InferenceServerClient(server.http_url), "simple") == 2 * np.arange(16)
    ).all()


def test_files_without_a_config_and_bad_base64_are_refused(
    explicit_server: tuple[ServerProcess, Path],
) -> None:
    server, _ = explicit_server
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException, match="need a 'config' parameter"):
        grpc.load_model("nocfg", files={"file:1/model.onnx": b"onnx"})
    import urllib.error
    import urllib.request

    body = json.dumps({"parameters": {"config": json.dumps(CONFIG), "file:1/model.onnx": "not base64!"}})
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/repository/models/pushed/load", data=body.encode(), method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=10)
    assert error.value.code == 400 and "not valid base64" in error.value.read().decode()


def test_a_pushed_model_that_does_not_load_reports_why_and_keeps_the_server_serving(
    explicit_server: tuple[ServerProcess, Path],
) -> None:
    server, _ = explicit_server
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match="failed to load 'broken_push'"):
        client.load_model(
            "broken_push",
            config=json.dumps({**CONFIG, "name": "broken_push"}),
            files={"file:1/model.onnx": b"junk"},
        )
    assert (_infer_http(client, "simple") == 2 * np.arange(16)).all()
