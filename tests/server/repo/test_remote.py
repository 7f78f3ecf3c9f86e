"""Repositories on S3: ``trt serve``, ``trt repo validate`` and ``list`` against a real S3-compatible
server (moto's server mode, its own process on loopback), with polling and explicit loads seeing
what changes in the bucket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.server.repo.catalogue import ADD_SUB
from tests.server.repo.test_validate import run_trt
from tests.support import ServerProcess, free_port, int_inputs, simple_inputs, write_simple
from trt.server.core.models.object_store import RemoteLocation, RemoteRepository

boto3 = pytest.importorskip("boto3")
pytest.importorskip("s3fs")

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("moto's S3 server did not start") from None
            time.sleep(0.1)
    yield endpoint
    process.terminate()
    process.wait(10)


@pytest.fixture
def bucket(
    s3_endpoint: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> str:
    """A fresh bucket per test; this process and the servers it starts reach it through the environment."""
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("TRT_CACHE_DIR", str(tmp_path / "cache"))
    name = request.node.name.replace("_", "-")[:50].lower()
    s3().create_bucket(Bucket=name)
    return name


def s3() -> object:
    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])


def upload(folder: Path, bucket: str, prefix: str) -> None:
    client = s3()
    for path in sorted(folder.rglob("*")):
        key = f"{prefix}/{path.relative_to(folder).as_posix()}"
        if path.is_file():
            client.upload_file(str(path), bucket, key)  # type: ignore[attr-defined]
        elif not any(path.iterdir()):
            client.put_object(Bucket=bucket, Key=key + "/", Body=b"")  # type: ignore[attr-defined]


def delete_prefix(bucket: str, prefix: str) -> None:
    client = s3()
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)  # type: ignore[attr-defined]
    for item in listed.get("Contents", []):
        client.delete_object(Bucket=bucket, Key=item["Key"])  # type: ignore[attr-defined]


def local_repo(tmp_path: Path, *names: str) -> Path:
    repo = tmp_path / "local"
    for name in names:
        write_simple(repo, name=name, config=ADD_SUB)
    return repo


def server_env() -> dict[str, str]:
    keys = [*CREDENTIALS, "AWS_ENDPOINT_URL", "TRT_CACHE_DIR"]
    return {key: os.environ[key] for key in keys}


def wait_until(check: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.2)


def test_serve_from_s3_answers_tritonclient_over_http_and_grpc(bucket: str, tmp_path: Path) -> None:
    upload(local_repo(tmp_path, "simple"), bucket, "models")
    server = ServerProcess([f"s3://{bucket}/models"], env=server_env()).start(tmp_path)
    try:
        data, _ = int_inputs(2)
        http = httpclient.InferenceServerClient(server.http_url)
        np.testing.assert_array_equal(
            http.infer("simple", simple_inputs(httpclient, data)).as_numpy("OUTPUT0"), data * 2
        )
        http.close()
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        np.testing.assert_array_equal(
            grpc.infer("simple", simple_inputs(grpcclient, data)).as_numpy("OUTPUT1"), 0 * data
        )
        grpc.close()
    finally:
        assert server.stop() == 0


def test_polling_follows_the_bucket(bucket: str, tmp_path: Path) -> None:
    upload(local_repo(tmp_path, "simple"), bucket, "models")
    server = ServerProcess(
        [f"s3://{bucket}/models"],
        ["--model-control-mode=poll", "--repository-poll-secs=0.3"],
        env=server_env(),
    ).start(tmp_path)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        upload(local_repo(tmp_path / "more", "added"), bucket, "models")
        wait_until(lambda: client.is_model_ready("added"))
        changed = tmp_path / "changed"
        write_simple(changed, config=ADD_SUB.replace("max_batch_size: 8", "max_batch_size: 2"))
        upload(changed, bucket, "models")
        wait_until(lambda: client.get_model_config("simple")["max_batch_size"] == 2)
        delete_prefix(bucket, "models/added/")
        wait_until(lambda: not client.is_model_ready("added"))
        assert client.is_model_ready("simple")
    finally:
        client.close()
        server.stop()


def test_an_explicit_load_reads_the_bucket_anew(bucket: str, tmp_path: Path) -> None:
    upload(local_repo(tmp_path, "simple"), bucket, "models")
    server = ServerProcess(
        [f"s3://{bucket}/models"],
        ["--model-control-mode=explicit"],
        env=server_env(),
    ).start(tmp_path)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        upload(local_repo(tmp_path / "later", "later"), bucket, "models")
        client.load_model("later")
        assert client.is_model_ready("later")
    finally:
        client.close()
        server.stop()


def test_validate_and_list_read_s3_and_name_remote_files(bucket: str, tmp_path: Path) -> None:
    repo = local_repo(tmp_path, "simple")
    uri = f"s3://{bucket}/models"
    upload(repo, bucket, "models")
    clean = run_trt("repo", "validate", uri, "--load")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    broken = tmp_path / "broken"
    write_simple(
        broken,
        name="broken",
        config=ADD_SUB.replace('"INPUT1" data_type: TYPE_INT32', '"INPUT1" data_type: TYPE_FP32'),
    )
    upload(broken, bucket, "models")
    result = run_trt("repo", "validate", uri, "--json")
    assert result.returncode == 1
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["file"] == f"{uri}/broken/config.pbtxt" and finding["line"] == 5
    listed = json.loads(run_trt("repo", "list", uri, "--json").stdout)
    assert [m["name"] for m in listed] == ["broken", "simple"]
    assert listed[1]["path"] == f"{uri}/simple"
    assert listed[0]["error"] == ""  # a config that disagrees with its model file is validate's to find


def test_an_endpoint_in_the_path_as_triton_writes_it(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload(local_repo(tmp_path, "simple"), bucket, "models")
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    uri = f"s3://{endpoint.removeprefix('http://')}/{bucket}/models"
    result = run_trt("repo", "validate", uri, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [m["name"] for m in json.loads(result.stdout)["models"]] == ["simple"]


def test_a_missing_bucket_stops_the_server_with_the_reason(
    s3_endpoint: str, bucket: str, tmp_path: Path
) -> None:
    server = ServerProcess(["s3://no-such-bucket/models"], env=server_env())
    server.start(tmp_path, wait=False)
    assert server.process is not None and server.process.wait(60) == 1
    assert "model repository 's3://no-such-bucket/models' does not exist" in server.log()


def test_the_mirror_downloads_only_what_changed(bucket: str, tmp_path: Path) -> None:
    upload(local_repo(tmp_path, "simple", "other"), bucket, "models")
    mirror = RemoteRepository(f"s3://{bucket}/models", cache=tmp_path / "mirror")
    assert mirror.sync() == (6, 0)  # two models: model.onnx, config.pbtxt, labels.txt each
    assert mirror.sync() == (0, 0)
    untouched = (mirror.root / "other" / "1" / "model.onnx").stat().st_mtime_ns
    s3().put_object(Bucket=bucket, Key="models/simple/labels.txt", Body=b"relabelled\n")  # type: ignore[attr-defined]
    delete_prefix(bucket, "models/other/config.pbtxt")
    assert mirror.sync() == (1, 1)
    assert (mirror.root / "simple" / "labels.txt").read_text() == "relabelled\n"
    assert not (mirror.root / "other" / "config.pbtxt").exists()
    assert (mirror.root / "other" / "1" / "model.onnx").stat().st_mtime_ns == untouched


@pytest.mark.parametrize(
    ("uri", "path", "endpoint", "account"),
    [
        ("s3://bucket/models/", "bucket/models", None, None),
        ("s3://10.0.0.1:9000/bucket/models", "bucket/models", "http://10.0.0.1:9000", None),
        ("s3://https://store:9443/bucket/models", "bucket/models", "https://store:9443", None),
        ("as://account/container/models", "container/models", None, "account"),
        ("gs://bucket/models", "bucket/models", None, None),
    ],
)
def test_object_store_paths_as_triton_writes_them(
    uri: str, path: str, endpoint: str | None, account: str | None
) -> None:
    location = RemoteLocation.parse(uri)
    assert (location.path, location.endpoint_url, location.account) == (path, endpoint, account)


def test_concurrent_syncs_of_one_mirror_do_not_trip_over_each_other(bucket: str, tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    upload(local_repo(tmp_path, "a", "b", "c"), bucket, "models")
    mirror = RemoteRepository(f"s3://{bucket}/models", cache=tmp_path / "mirror")
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: mirror.sync(), range(4)))
    assert sorted(results) == [(0, 0), (0, 0), (0, 0), (9, 0)]
    assert sorted(p.name for p in mirror.root.iterdir()) == [".trt-mirror.json", "a", "b", "c"]
