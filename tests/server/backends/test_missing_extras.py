"""Where OpenVINO or TensorFlow is not installed, their models fail alone, naming the extra to install,
and the rest of the repository serves."""

from __future__ import annotations

from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.support import ServerProcess, write_simple


@pytest.fixture()
def without_openvino_and_tensorflow(tmp_path: Path) -> dict[str, str]:
    """An environment in which both imports fail as they do where the packages are not installed."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    for module in ("openvino", "tensorflow"):
        (shadow / f"{module}.py").write_text(
            f'raise ModuleNotFoundError("No module named \'{module}\'", name="{module}")\n'
        )
    return {"PYTHONPATH": str(shadow)}


def test_each_model_names_its_extra_and_the_rest_serve(
    tmp_path: Path, without_openvino_and_tensorflow: dict[str, str]
) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    # The files only have to be found: the backend fails on import, before reading them.
    (repo / "ir" / "1").mkdir(parents=True)
    (repo / "ir" / "1" / "model.xml").write_text("<net/>")
    (repo / "saved" / "1" / "model.savedmodel").mkdir(parents=True)
    (repo / "saved" / "1" / "model.savedmodel" / "saved_model.pb").write_bytes(b"")
    server = ServerProcess([repo], env=without_openvino_and_tensorflow).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_server_ready()
        rows = {row["name"]: row for row in client.get_model_repository_index()}
        assert rows["simple"]["state"] == "READY"
        assert rows["ir"]["state"] == "UNAVAILABLE"
        assert (
            "openvino is not installed; install it with: pip install 'trt-serve[openvino]'"
            in rows["ir"]["reason"]
        )
        assert rows["saved"]["state"] == "UNAVAILABLE"
        assert "pip install 'trt-serve[tensorflow]'" in rows["saved"]["reason"]
    finally:
        assert server.stop() == 0
