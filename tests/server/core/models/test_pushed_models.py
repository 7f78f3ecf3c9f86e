"""Load with file overrides: a model pushed to a running server through the repository extension, over
HTTP (base64) and gRPC (bytes), and paths that would leave the model folder refused."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import (
    ServerProcess,
    add_sub_model,
    longest_health_wait_while,
    save_onnx,
    simple_inputs,
    wait_until,
    write_simple,
)
from trt.server.core.errors import ServerError
from trt.server.core.models.pushed_models import MAX_PUSHED_FILES, PushedModels

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


# -- names and paths that would leave the push folder (issue 17, items 2, 4 and 9) -----------------


@pytest.fixture(scope="module")
def contained_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    """An explicit-mode server whose temporary folder (where pushes go) is a folder of the test's own,
    so that what a bad name would reach is known: ``<base>/tmp/trt-pushed-*/push-*/<name>``."""
    base = tmp_path_factory.mktemp("contained")
    (base / "tmp").mkdir()
    repo = base / "repo"
    write_simple(repo)
    server = ServerProcess(
        [repo], ["--model-control-mode=explicit", "--load-model=simple"], env={"TMPDIR": str(base / "tmp")}
    )
    server.start(base)
    yield server, base
    assert server.alive(), server.log()
    server.stop()


def _grpc_push(server: ServerProcess, name: str, files: dict[str, bytes], config: dict | None = None) -> None:
    """RepositoryModelLoad with a config and file contents, as the raw stub sends it."""
    import grpc

    from trt.protos import grpc_service_pb2, grpc_service_pb2_grpc

    request = grpc_service_pb2.RepositoryModelLoadRequest(model_name=name)
    unnamed = {key: value for key, value in CONFIG.items() if key != "name"}  # the folder names it
    request.parameters["config"].string_param = json.dumps(config or unnamed)
    for key, content in files.items():
        request.parameters[key].bytes_param = content
    with grpc.insecure_channel(server.grpc_url) as channel:
        grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel).RepositoryModelLoad(request, timeout=30)


@pytest.mark.parametrize("name", ["../../../victim/m", "..", "a/b", "a\\b", "m\x00", "A" * 256])
def test_a_model_name_that_would_leave_the_push_folder_writes_and_deletes_nothing(
    contained_server: tuple[ServerProcess, Path], name: str
) -> None:
    """gRPC RepositoryModelLoad named '../../../victim/m', with a config and a file, wrote the model to
    <base>/victim/m, and its failing load removed <base>/victim, the parent of that path."""
    import grpc

    server, base = contained_server
    victim = base / "victim"
    victim.mkdir(exist_ok=True)
    (victim / "keep.txt").write_text("still here")
    with pytest.raises(grpc.RpcError) as caught:
        _grpc_push(server, name, {"file:1/model.onnx": b"not a model"})
    assert victim.is_dir() and (victim / "keep.txt").read_text() == "still here"
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    pushed = list((base / "tmp").glob("trt-pushed-*/*"))
    assert pushed == [], pushed  # nothing was staged, not even inside the server's own folder
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert "model name must not contain path traversal characters" in caught.value.details()  # Triton's
    assert httpclient.InferenceServerClient(server.http_url).is_server_live()


def test_an_over_long_file_name_is_refused_and_the_server_lives(
    contained_server: tuple[ServerProcess, Path],
) -> None:
    """Triton's simple_grpc_model_control.py: a 'file:' path segment longer than NAME_MAX is refused
    (Triton 2.51 crashed on it)."""
    import grpc

    server, _ = contained_server
    with pytest.raises(grpc.RpcError) as caught:
        _grpc_push(server, "long_file", {"file:" + "A" * 256: b"a"}, {"name": "long_file"})
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Invalid file path" in caught.value.details()
    assert httpclient.InferenceServerClient(server.http_url).is_server_live()


def test_a_failed_push_names_no_server_side_temporary_path(
    contained_server: tuple[ServerProcess, Path],
) -> None:
    server, base = contained_server
    client = httpclient.InferenceServerClient(server.http_url)
    config = {**CONFIG, "name": "junk", "default_model_filename": "weights.onnx"}
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("junk", config=json.dumps(config), files={"file:1/model.onnx": b"junk"})
    message = caught.value.message()
    assert "failed to load 'junk'" in message and "junk/1/weights.onnx" in message, message
    assert str(base) not in message and "trt-pushed" not in message and "push-" not in message
    index = {row["name"]: row for row in client.get_model_repository_index()}
    assert "trt-pushed" not in index["junk"]["reason"]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (
            {"output": [{**CONFIG["output"][0], "label_filename": "/etc/passwd"}]},
            "label_filename '/etc/passwd'",
        ),
        ({"output": [{**CONFIG["output"][0], "label_filename": "../../x"}]}, "label_filename '../../x'"),
        ({"default_model_filename": "/etc/passwd"}, "default_model_filename '/etc/passwd'"),
        ({"default_model_filename": "../../1/model.onnx"}, "default_model_filename"),
        (
            {"parameters": {"EXECUTION_ENV_PATH": {"string_value": "/usr"}}},
            "parameters[EXECUTION_ENV_PATH] '/usr'",
        ),
        (
            {"parameters": {"EXECUTION_ENV_PATH": {"string_value": "$$TRITON_MODEL_DIRECTORY/../../env"}}},
            "parameters[EXECUTION_ENV_PATH]",
        ),
    ],
)
def test_a_config_override_cannot_name_files_outside_the_model_folder(
    explicit_server: tuple[ServerProcess, Path], change: dict, fragment: str
) -> None:
    """A config override with label_filename '/etc/passwd' returned that file's lines as labels."""
    server, _ = explicit_server
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match=re.escape(fragment)) as caught:
        client.load_model("simple", config=json.dumps({**CONFIG, "name": "simple", **change}))
    assert caught.value.status() == "400"
    assert "failed to load 'simple', failed to poll from model repository" in caught.value.message()
    # The model kept serving its own config and labels.
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    output = httpclient.InferRequestedOutput("OUTPUT0", class_count=1)
    top = client.infer("simple", simple_inputs(httpclient, data), outputs=[output]).as_numpy("OUTPUT0")
    assert top is not None and top[0][0].decode().endswith(":label15")


def test_an_environment_inside_the_model_folder_is_still_accepted() -> None:
    from trt.server.core.models.config import config_from_json
    from trt.server.core.models.config_paths import check_config_paths

    config = config_from_json(
        json.dumps(
            {"parameters": {"EXECUTION_ENV_PATH": {"string_value": "$$TRITON_MODEL_DIRECTORY/env.tar.gz"}}}
        )
    )
    check_config_paths(config, from_client=True)
    outside = config_from_json(
        json.dumps({"parameters": {"EXECUTION_ENV_PATH": {"string_value": "/opt/envs/shared.tar.gz"}}})
    )
    check_config_paths(outside)  # the operator's own config.pbtxt may share an environment


# Reads its pushed data file on every request, after 1 s: the request then outlives an unload.
READS_ITS_FILE = b"""
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.data = os.path.join(args["model_repository"], args["model_version"], "data.txt")

    def execute(self, requests):
        time.sleep(1)
        with open(self.data) as data:
            text = data.read()
        out = np.array([text.encode(), self.data.encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
"""

READS_ITS_FILE_CONFIG = {
    "backend": "python",
    "input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [1]}],
    "output": [{"name": "OUT", "data_type": "TYPE_STRING", "dims": [2]}],
}


@pytest.mark.parametrize("then", ["unload", "push again"])
def test_a_pushed_models_files_stay_until_its_requests_finish(
    explicit_server: tuple[ServerProcess, Path], then: str
) -> None:
    server, _ = explicit_server
    client = grpcclient.InferenceServerClient(server.grpc_url)
    files = {"file:1/model.py": READS_ITS_FILE, "file:1/data.txt": b"pushed data"}
    client.load_model("reads_its_file", config=json.dumps(READS_ITS_FILE_CONFIG), files=files)
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))
    answers: list[object] = []
    running = threading.Thread(target=lambda: answers.append(client.infer("reads_its_file", [tensor])))
    running.start()
    time.sleep(0.3)  # the request is in execute(), which reads the file in 0.7 s
    if then == "unload":
        client.unload_model("reads_its_file")  # returns at once; the request goes on
    else:  # a new push replaces the files; the old version retires once its request is done
        files["file:1/data.txt"] = b"new data"
        client.load_model("reads_its_file", config=json.dumps(READS_ITS_FILE_CONFIG), files=files)
    running.join(timeout=30)
    assert len(answers) == 1  # before: the folder went at once, and the request failed
    text, path = answers[0].as_numpy("OUT").tolist()  # type: ignore[attr-defined]
    assert text == b"pushed data"
    # The folder goes once the version has retired.
    wait_until(lambda: not Path(path.decode()).exists())
    if then == "push again":
        assert client.infer("reads_its_file", [tensor]).as_numpy("OUT")[0] == b"new data"
        client.unload_model("reads_its_file")


def test_the_server_answers_others_while_a_push_is_written(
    explicit_server: tuple[ServerProcess, Path], onnx_bytes: bytes
) -> None:
    """Writing a push's files took the event loop: 20,000 small files held every request for 2.6 s.
    They are written on a thread now: no health check waits for a fraction of the push."""
    server, _ = explicit_server
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300)
    files = {"file:1/model.onnx": onnx_bytes}
    files.update({f"file:1/assets/{i // 500}/{i}.txt": b"asset" for i in range(5000)})
    config = json.dumps({**CONFIG, "name": "many_files"})
    took, worst = longest_health_wait_while(
        server, lambda: client.load_model("many_files", config=config, files=files)
    )
    assert client.is_model_ready("many_files")
    assert worst < max(0.25 * took, 0.2), f"a health check waited {worst:.2f} s of a {took:.2f} s push"
    client.unload_model("many_files")


def test_more_files_than_a_push_may_hold_are_refused(
    explicit_server: tuple[ServerProcess, Path], onnx_bytes: bytes
) -> None:
    server, _ = explicit_server
    client = httpclient.InferenceServerClient(server.http_url)
    files = {"file:1/model.onnx": onnx_bytes, **{f"file:1/{i}": b"" for i in range(MAX_PUSHED_FILES)}}
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("too_many", config=json.dumps({**CONFIG, "name": "too_many"}), files=files)
    assert refused.value.status() == "400"
    assert f"{MAX_PUSHED_FILES + 1} files pushed: at most {MAX_PUSHED_FILES} may be" in str(refused.value)
    assert not client.is_model_ready("too_many") and client.is_model_ready("simple")


def test_a_server_stopping_while_a_push_is_written_leaves_no_file_behind() -> None:
    """The stop removes the pushes' folders while a push's thread still writes: before, its next
    ``mkdir(parents=True)`` made them again, and what it wrote after outlived the server."""
    pushed = PushedModels()
    files = {f"file:1/assets/{i // 500}/{i}.txt": b"asset" for i in range(MAX_PUSHED_FILES)}

    async def stop_while_writing() -> None:
        writing = asyncio.ensure_future(pushed.stage("many_files", files))
        await asyncio.sleep(0.05)
        pushed.close()
        with pytest.raises(ServerError, match="the server is stopping"):
            await writing

    asyncio.run(stop_while_writing())
    assert not pushed._root.exists()
