"""Model repository behaviour through the repository extension, as tritonclient users see it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import (
    ServerProcess,
    int_inputs,
    wait_until,
    write_autocomplete,
    write_broken,
    write_simple,
)


def _infer_simple(
    client: httpclient.InferenceServerClient, model: str = "simple", version: str = ""
) -> np.ndarray:
    first, second = int_inputs()
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(first)
    inputs[1].set_data_from_numpy(second)
    return client.infer(model, inputs, model_version=version).as_numpy("OUTPUT0")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    write_simple(path)
    write_autocomplete(path)
    return path


def test_broken_models_are_listed_unavailable_and_the_others_serve(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    index = {row["name"]: row for row in client.get_model_repository_index()}
    assert index["simple"]["state"] == "READY"
    assert index["broken_config"]["state"] == "UNAVAILABLE"
    assert "max_batch_size" in index["broken_config"]["reason"]
    assert index["missing_file"]["state"] == "UNAVAILABLE"
    assert "model.onnx" in index["missing_file"]["reason"]
    assert not client.is_model_ready("broken_config")
    assert _infer_simple(client)[0][0] == 1


def test_strict_readiness_reports_not_ready_when_a_model_failed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    write_broken(repo)
    proc = ServerProcess([repo], ["--exit-on-error=false"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        assert client.is_server_live()
        assert not client.is_server_ready()
        assert client.is_model_ready("simple")
    finally:
        proc.stop()


def test_exit_on_error_stops_start_up_when_a_model_fails(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    write_broken(repo)
    proc = ServerProcess([repo]).start(tmp_path, wait=False)
    assert proc.process is not None
    assert proc.process.wait(60) != 0
    assert "failed to load all models" in proc.log()


def test_explicit_mode_loads_only_what_it_is_told(repo: Path, tmp_path: Path) -> None:
    proc = ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=simple"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        assert client.is_server_ready()
        assert client.is_model_ready("simple")
        assert not client.is_model_ready("autocomplete_fp32")
        index = {row["name"]: row for row in client.get_model_repository_index()}
        assert index["autocomplete_fp32"] == {"name": "autocomplete_fp32"}  # known on disk, never loaded

        client.load_model("autocomplete_fp32")
        assert client.is_model_ready("autocomplete_fp32")
        client.unload_model("simple")
        assert not client.is_model_ready("simple")

        def simple_row() -> dict[str, str]:
            return next(row for row in client.get_model_repository_index() if row["name"] == "simple")

        # UNLOADING until its instances are released in the background, as in Triton.
        wait_until(
            lambda: (
                simple_row()
                == {"name": "simple", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
            )
        )
        # Unloaded models do not count against strict readiness.
        assert client.is_server_ready()

        with pytest.raises(InferenceServerException, match="failed to load"):
            client.load_model("wrong_model_name")
        assert proc.alive()
    finally:
        proc.stop()


def test_load_with_config_override_changes_the_served_config(repo: Path, tmp_path: Path) -> None:
    proc = ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=*"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        config = client.get_model_config("simple")
        assert config["max_batch_size"] == 8
        override = dict(config, max_batch_size="16")  # numbers as strings, as Triton's examples send
        client.load_model("simple", config=json.dumps(override))
        assert client.get_model_config("simple")["max_batch_size"] == 16

        with pytest.raises(InferenceServerException, match="failed to load"):
            client.load_model("simple", config='{"max_batch_size": "not a number"}')
        # A failed reload leaves the loaded model serving (Triton keeps it too).
        assert client.get_model_config("simple")["max_batch_size"] == 16
        assert _infer_simple(client)[0][0] == 1

        # Refused before anything is made: the loader used to build every instance it was asked for
        # (about 80 KiB and 0.8 ms each for ONNX Runtime), which for this count ends in the OOM killer.
        override["instance_group"] = [{"count": 2**31 - 1, "kind": "KIND_CPU"}]
        began = time.monotonic()
        with pytest.raises(InferenceServerException, match="asks for 2147483647 instances in all"):
            client.load_model("simple", config=json.dumps(override))
        assert time.monotonic() - began < 10
        assert _infer_simple(client)[0][0] == 1

        grpc = grpcclient.InferenceServerClient(proc.grpc_url)
        grpc.unload_model("simple")
        assert not grpc.is_model_ready("simple")
        grpc.load_model("simple")
        assert grpc.is_model_ready("simple")
    finally:
        proc.stop()


def test_load_and_unload_are_refused_outside_explicit_mode(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        client.load_model("simple")
    assert info.value.status() == "503" or "503" in str(info.value)
    assert "explicit model load / unload is not allowed" in str(info.value)
    assert client.is_model_ready("simple")


def test_version_policy_selects_versions(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "latest_two", versions=(1, 2, 3))
    config = (repo / "latest_two" / "config.pbtxt").read_text()
    (repo / "latest_two" / "config.pbtxt").write_text(
        config + "version_policy: { latest: { num_versions: 2 } }\n"
    )
    write_simple(repo, "specific", versions=(1, 2, 3))
    config = (repo / "specific" / "config.pbtxt").read_text()
    (repo / "specific" / "config.pbtxt").write_text(
        config + "version_policy: { specific: { versions: [1, 3] } }\n"
    )
    write_simple(repo, "every", versions=(1, 2))
    config = (repo / "every" / "config.pbtxt").read_text()
    (repo / "every" / "config.pbtxt").write_text(config + "version_policy: { all: { } }\n")
    write_simple(repo, "default_latest", versions=(1, 2, 10))
    (repo / "default_latest" / "010").mkdir()  # a leading zero is not a version
    (repo / "default_latest" / "\u0662\u0660").mkdir()  # nor Arabic-Indic digits (20 to int())
    (repo / "default_latest" / "\xb2").mkdir()  # nor a superscript two (int() refuses it)
    proc = ServerProcess([repo]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        assert client.get_model_metadata("latest_two")["versions"] == ["2", "3"]
        assert client.get_model_metadata("specific")["versions"] == ["1", "3"]
        assert client.get_model_metadata("default_latest")["versions"] == ["10"]
        assert client.get_model_metadata("every")["versions"] == ["1", "2"]
        assert client.is_model_ready("specific", "3") and not client.is_model_ready("specific", "2")
        assert _infer_simple(client, "specific", "1")[0][0] == 1
        with pytest.raises(InferenceServerException, match="unknown model"):
            _infer_simple(client, "specific", "2")
    finally:
        proc.stop()


def test_auto_complete_fills_a_missing_config_and_can_be_disabled(repo: Path, tmp_path: Path) -> None:
    proc = ServerProcess([repo]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        config = client.get_model_config("autocomplete_fp32")
        assert config["platform"] == "onnxruntime_onnx" and config["backend"] == "onnxruntime"
        assert config["max_batch_size"] == 4
        assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
        assert config["input"][0]["dims"] == [4] and config["input"][0]["data_type"] == "TYPE_FP32"
        assert "dynamic_batching" in config
        assert config["instance_group"][0]["kind"] == "KIND_CPU"
    finally:
        proc.stop()

    proc = ServerProcess([repo], ["--disable-auto-complete-config", "--exit-on-error=false"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        assert client.is_model_ready("simple")
        assert not client.is_model_ready("autocomplete_fp32")
        index = {row["name"]: row for row in client.get_model_repository_index()}
        assert "no inputs" in index["autocomplete_fp32"]["reason"]
    finally:
        proc.stop()


def test_poll_mode_follows_changes_on_disk(repo: Path, tmp_path: Path) -> None:
    proc = ServerProcess([repo], ["--model-control-mode=poll", "--repository-poll-secs=0.5"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        assert client.is_model_ready("simple")
        write_simple(repo, "added_later")
        _wait_until(lambda: client.is_model_ready("added_later"))
        config = (
            (repo / "simple" / "config.pbtxt").read_text().replace("max_batch_size: 8", "max_batch_size: 4")
        )
        (repo / "simple" / "config.pbtxt").write_text(config)
        _wait_until(lambda: client.get_model_config("simple")["max_batch_size"] == 4)
        for path in sorted((repo / "added_later").rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (repo / "added_later").rmdir()
        _wait_until(lambda: not client.is_model_ready("added_later"))
        assert _infer_simple(client)[0][0] == 1
    finally:
        proc.stop()


def test_a_model_named_in_two_repositories_is_not_served(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    write_simple(first)
    write_simple(second)
    write_simple(second, "only_in_b")
    proc = ServerProcess([first, second], ["--exit-on-error=false"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        assert client.is_model_ready("only_in_b")
        assert not client.is_model_ready("simple")
        index = {row["name"]: row for row in client.get_model_repository_index()}
        assert index["simple"]["reason"] == "the name appears in more than one model repository"
    finally:
        proc.stop()


def _wait_until(condition: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():  # type: ignore[operator]
                return
        except InferenceServerException:
            pass
        time.sleep(0.2)
    raise AssertionError("condition not met in time")
