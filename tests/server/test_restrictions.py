"""``--http-restricted-api`` and ``--grpc-restricted-protocol``: restricted categories need their
header, with Triton's status codes and words; the other categories stay open."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ROOT, ServerProcess, simple_inputs, write_simple
from trt.server.restrictions import Restrictions

# Passed as copies: tritonclient's HTTP infer adds its own headers to the dict it is given.
ADMIN = {"admin-key": "s3cret"}
USER = {"infer-key": "letmein"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("restricted_repo")
    write_simple(repo)
    restrictions = [
        "--model-control-mode=explicit",
        "--load-model=simple",
        "--http-restricted-api=model-repository,shared-memory:admin-key=s3cret",
        "--http-restricted-api=inference:infer-key=letmein",
        "--grpc-restricted-protocol=model-repository,shared-memory:admin-key=s3cret",
        "--grpc-restricted-protocol=inference:infer-key=letmein",
    ]
    proc = ServerProcess([repo], restrictions).start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def test_http_restricted_categories_need_their_header(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    data = np.ones((1, 16), dtype=np.int32)
    with pytest.raises(
        InferenceServerException, match="This API is restricted, expecting header 'infer-key'"
    ) as info:
        client.infer("simple", simple_inputs(httpclient, data))
    assert info.value.status() == "403"
    with pytest.raises(InferenceServerException, match="expecting header 'infer-key'"):
        client.infer("simple", simple_inputs(httpclient, data), headers={"infer-key": "wrong"})
    result = client.infer("simple", simple_inputs(httpclient, data), headers=dict(USER))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * data)
    # The same heads again (the server looks a head it has seen up rather than parsing it): the
    # restriction holds for every request without the header, and the key opens it every time.
    for _ in range(3):
        with pytest.raises(InferenceServerException, match="expecting header 'infer-key'"):
            client.infer("simple", simple_inputs(httpclient, data))
        result = client.infer("simple", simple_inputs(httpclient, data), headers=dict(USER))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * data)

    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
        client.get_model_repository_index()
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
        client.unload_model("simple")
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
        client.get_system_shared_memory_status()
    assert client.get_model_repository_index(headers=dict(ADMIN))[0]["name"] == "simple"
    assert client.get_system_shared_memory_status(headers=dict(ADMIN)) == []
    # Categories nobody restricted stay open.
    assert client.is_server_live() and client.is_model_ready("simple")
    assert client.get_model_metadata("simple")["name"] == "simple"
    assert client.get_model_config("simple")["name"] == "simple"
    assert client.get_inference_statistics("simple")["model_stats"]


def test_grpc_restricted_categories_need_their_metadata(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    data = np.ones((1, 16), dtype=np.int32)
    with pytest.raises(
        InferenceServerException, match="This protocol is restricted, expecting header 'infer-key'"
    ) as info:
        client.infer("simple", simple_inputs(grpcclient, data))
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    result = client.infer("simple", simple_inputs(grpcclient, data), headers=dict(USER))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * data)
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
        client.get_model_repository_index()
    assert client.get_model_repository_index(headers=dict(ADMIN)).models[0].name == "simple"
    assert client.is_server_ready() and client.get_model_metadata("simple").name == "simple"


def test_the_flags_are_checked_before_the_server_starts(tmp_path: Path) -> None:
    for flag, message in (
        ("--http-restricted-api=inference", "takes <category>"),
        ("--grpc-restricted-protocol=everything:k=v", "unknown category 'everything'"),
    ):
        command = [sys.executable, "-m", "trt", "serve", f"--model-repository={tmp_path}", flag]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert result.returncode != 0
        words = " ".join((result.stdout + result.stderr).replace("│", " ").split())  # rich wraps the box
        assert message in words, words
    with pytest.raises(ValueError, match="more than once"):
        Restrictions.parse(["inference:a=1", "health,inference:b=2"], "--http-restricted-api")
    parsed = Restrictions.parse(["health,metadata:X-Key=v=1"], "--http-restricted-api")
    assert parsed.by_category["metadata"].header == "x-key" and parsed.by_category["metadata"].value == "v=1"
