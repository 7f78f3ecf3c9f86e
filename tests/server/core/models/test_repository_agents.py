"""Triton's checksum repository agent: a model whose config lists MD5 digests of its files loads only
when each file has that digest; a wrong digest, an unknown algorithm, a key without one, a missing
file or an agent trt does not have keeps the model out with Triton's texts, and the files named must
lie inside the model folder. ``trt serve`` (tritonclient over HTTP) and ``trt repo validate`` agree."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import SIMPLE_CONFIG, ServerProcess, int_inputs, simple_inputs, write_simple
from trt.server.core.errors import InvalidArgument, ModelConfigError, ModelLoadError, Unsupported
from trt.server.core.models.config import parse_config_text
from trt.server.core.models.config_paths import check_config_paths
from trt.server.core.models.repository_agents import run_load_agents
from trt.server.repo.validate import validate_repository


def _agents(*parameters: tuple[str, str], name: str = "checksum") -> str:
    entries = " ".join(f'parameters {{ key: "{key}" value: "{value}" }}' for key, value in parameters)
    return f'model_repository_agents {{ agents [ {{ name: "{name}" {entries} }} ] }}\n'


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()


def _write(repo: Path, name: str, agents: str) -> Path:
    """The ``simple`` ONNX model under ``name``, its config naming ``agents``."""
    return write_simple(repo, name, SIMPLE_CONFIG + agents)


def _states(client: httpclient.InferenceServerClient) -> dict[str, tuple[str, str]]:
    return {
        row["name"]: (row.get("state", ""), row.get("reason", ""))
        for row in client.get_model_repository_index()
    }


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("agents")
    onnx = write_simple(repo, "reference") / "1" / "model.onnx"
    digest, labels_digest = _md5(onnx), _md5(repo / "reference" / "labels.txt")
    _write(repo, "verified", _agents(("MD5:1/model.onnx", digest), ("md5:labels.txt", labels_digest)))
    _write(repo, "tampered", _agents(("MD5:1/model.onnx", "0" * 32)))
    _write(repo, "other_agent", _agents(name="relocation"))
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    # Two models fail to load on purpose: the server serves the others, as Triton's with this flag
    server = ServerProcess([repo], ["--exit-on-error=false"]).start(repo)
    try:
        yield server
    finally:
        server.stop()


def test_a_model_whose_files_match_their_digests_loads_and_serves(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    data = int_inputs()[0]
    result = client.infer("verified", simple_inputs(httpclient, data))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + data)
    assert _states(client)["verified"] == ("READY", "")


def test_a_file_whose_digest_differs_keeps_the_model_out_with_tritons_text(
    server: ServerProcess, repo: Path
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    state, reason = _states(client)["tampered"]
    got = _md5(repo / "tampered" / "1" / "model.onnx")
    assert state == "UNAVAILABLE"
    assert f"Mismatched MD5 hash for file 1/model.onnx, expect: {'0' * 32}, got: {got}" in reason
    with pytest.raises(InferenceServerException):
        client.infer("tampered", simple_inputs(httpclient, int_inputs()[0]))
    assert server.alive()  # and the others serve on


def test_an_agent_trt_does_not_have_fails_the_load(server: ServerProcess) -> None:
    state, reason = _states(httpclient.InferenceServerClient(server.http_url))["other_agent"]
    assert state == "UNAVAILABLE"
    # Triton 2.51 without the agent's library: "unable to find 'libtritonrepoagent_checksum.so' for repo
    # agent 'checksum', searched: /opt/tritonserver/repoagents"
    assert (
        "unable to find 'libtritonrepoagent_relocation.so' for repo agent 'relocation': trt has only "
        "Triton's 'checksum' agent, built in" in reason
    )


def test_trt_repo_validate_reports_what_the_server_refuses(repo: Path) -> None:
    errors = {
        model.name: [finding.message for finding in model.findings if finding.severity.value == "error"]
        for model in validate_repository([repo]).models
    }
    assert errors["verified"] == [] and errors["reference"] == []
    assert any("Mismatched MD5 hash for file 1/model.onnx" in message for message in errors["tampered"])
    assert any("for repo agent 'relocation'" in message for message in errors["other_agent"])


def test_each_refusal_has_tritons_text(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"abc")
    digest = hashlib.md5(b"abc", usedforsecurity=False).hexdigest()

    def run(*parameters: tuple[str, str]) -> None:
        run_load_agents(parse_config_text(_agents(*parameters)), tmp_path)

    run(("MD5:weights.bin", digest), ("Md5:./weights.bin", digest))  # the algorithm in any case
    cases = [
        (("MD5weights.bin", digest), InvalidArgument, "failed to parse key: MD5weights.bin"),
        (("SHA256:weights.bin", digest), Unsupported, "Unsupported checksum algorithm: SHA256"),
        (
            ("MD5:absent.bin", digest),
            InvalidArgument,
            "failed to open text file for read absent.bin: No such file",
        ),
        (
            ("MD5:weights.bin", digest.upper()),
            InvalidArgument,
            "expect: " + digest.upper(),
        ),  # as Triton compares
    ]
    for parameter, error, text in cases:
        with pytest.raises(error) as caught:
            run(parameter)
        assert text in caught.value.message
    with pytest.raises(ModelLoadError, match="for repo agent 'custom'"):
        run_load_agents(parse_config_text(_agents(name="custom")), tmp_path)


def test_the_files_digested_must_lie_inside_the_model_folder() -> None:
    outside = parse_config_text(_agents(("MD5:../other/1/model.onnx", "0" * 32)))
    with pytest.raises(ModelConfigError, match=r"parameters\[MD5:../other/1/model.onnx\].*leads outside"):
        check_config_paths(outside)
    # a client's config (a load request's) meets the strict rule: no '..' even where it stays inside
    inner = parse_config_text(_agents(("MD5:1/../labels.txt", "0" * 32)))
    check_config_paths(inner)
    with pytest.raises(ModelConfigError, match="leads outside"):
        check_config_paths(inner, from_client=True)
