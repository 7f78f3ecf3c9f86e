"""A model whose backend needs an extra that is not installed is skipped at start-up, naming the extra,
while the rest of the repository serves: the base install runs the example repository."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support import ServerProcess, write_simple

TORCH_CONFIG = """
name: "needs_torch"
platform: "pytorch_libtorch"
max_batch_size: 4
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


@pytest.fixture()
def without_torch(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``import torch`` fails as it does where torch is not installed."""
    shadow = tmp_path / "no_torch"
    shadow.mkdir()
    (shadow / "torch.py").write_text('raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n')
    return {"PYTHONPATH": str(shadow)}


def _post(url: str, body: bytes = b"") -> tuple[int, dict[str, object] | list[object]]:
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, data=body, method="POST"), timeout=30
        ) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_start_up_skips_the_model_names_the_extra_and_serves_the_rest(
    tmp_path: Path, without_torch: dict[str, str]
) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    (repo / "needs_torch" / "1").mkdir(parents=True)
    (repo / "needs_torch" / "1" / "model.pt").write_bytes(b"not loaded")
    (repo / "needs_torch" / "config.pbtxt").write_text(TORCH_CONFIG)
    # Default --exit-on-error and --strict-readiness: the skip is not a failure of start-up.
    server = ServerProcess([repo], env=without_torch).start(tmp_path)
    try:
        with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready", timeout=10) as reply:
            assert reply.status == 200
        status, index = _post(f"http://{server.http_url}/v2/repository/index")
        assert status == 200 and isinstance(index, list)
        rows = {row["name"]: row for row in index}
        assert rows["simple"]["state"] == "READY"
        assert rows["needs_torch"]["state"] == "UNAVAILABLE"
        assert "pip install 'trt-serve[torch]'" in rows["needs_torch"]["reason"]
        logged = [line for line in server.log().splitlines() if "] " in line and "needs_torch" in line]
        skipped = [line for line in logged if not line.startswith("│")]  # the summary table aside
        assert len(skipped) == 1 and "skipped model 'needs_torch'" in skipped[0], skipped
    finally:
        assert server.stop() == 0


def test_loaded_by_name_later_the_model_fails_with_the_same_reason(
    tmp_path: Path, without_torch: dict[str, str]
) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    (repo / "needs_torch" / "1").mkdir(parents=True)
    (repo / "needs_torch" / "config.pbtxt").write_text(TORCH_CONFIG)
    server = ServerProcess(
        [repo], ["--model-control-mode=explicit", "--load-model=*"], env=without_torch
    ).start(tmp_path)
    try:
        status, body = _post(f"http://{server.http_url}/v2/repository/models/needs_torch/load")
        assert status == 500 and "pip install 'trt-serve[torch]'" in str(body), body
    finally:
        assert server.stop() == 0


def test_a_model_named_by_load_model_fails_start_up_instead(
    tmp_path: Path, without_torch: dict[str, str]
) -> None:
    repo = tmp_path / "repo"
    (repo / "needs_torch" / "1").mkdir(parents=True)
    (repo / "needs_torch" / "config.pbtxt").write_text(TORCH_CONFIG)
    server = ServerProcess(
        [repo], ["--model-control-mode=explicit", "--load-model=needs_torch"], env=without_torch
    ).start(tmp_path, wait=False)
    assert server.process is not None
    assert server.process.wait(60) == 1
    assert "pip install 'trt-serve[torch]'" in server.log()
