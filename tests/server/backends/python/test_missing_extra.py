"""A Python model whose model.py fails to import a module that one of trt's extras installs is
reported as that backend being unavailable, naming the extra; start-up then passes over it (as over a
missing backend) and the rest of the repository serves, its log saying so in that one line. Another
missing module is an ordinary failure, logged with the model's traceback."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

from tests.support import ROOT, ServerProcess, write_python_model, write_simple

NEEDS_ITS_OWN_MODULE = """
import some_module_no_extra_provides

class TritonPythonModel:
    def execute(self, requests):
        return []
"""
CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def _without(tmp_path: Path, module: str) -> dict[str, str]:
    """An environment in which ``import <module>`` fails as it does where it is not installed."""
    shadow = tmp_path / f"no_{module}"
    shadow.mkdir()
    (shadow / f"{module}.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n"
    )
    return {"PYTHONPATH": str(shadow)}


def _index(server: ServerProcess) -> dict[str, dict[str, str]]:
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/index", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=30) as reply:
        return {row["name"]: row for row in json.loads(reply.read())}


def test_the_example_generative_model_is_skipped_without_the_genai_extra(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    shutil.copytree(ROOT / "model_repository" / "tiny_llm", repo / "tiny_llm")
    # Default --exit-on-error and --strict-readiness: a model skipped for its extra fails neither.
    server = ServerProcess([repo], env=_without(tmp_path, "tokenizers")).start(tmp_path)
    try:
        rows = _index(server)
        assert rows["simple"]["state"] == "READY"
        assert rows["tiny_llm"]["state"] == "UNAVAILABLE"
        assert rows["tiny_llm"]["reason"] == (
            "model.py needs tokenizers, which is not installed; "
            "install it with: pip install 'trt-serve[genai]'"
        )
        with urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready", timeout=10) as reply:
            assert reply.status == 200
    finally:
        assert server.stop() == 0
    # A base install's start-up: the one line, no traceback of the model's import above it.
    log = server.log()
    assert "skipped model 'tiny_llm': model.py needs tokenizers" in log
    assert "Traceback" not in log


def test_a_module_no_extra_provides_is_an_ordinary_load_failure(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    write_python_model(repo, "needs_its_own", NEEDS_ITS_OWN_MODULE, CONFIG)
    server = ServerProcess([repo], ["--exit-on-error=false"]).start(tmp_path)
    try:
        row = _index(server)["needs_its_own"]
        assert row["state"] == "UNAVAILABLE"
        assert "No module named 'some_module_no_extra_provides'" in row["reason"]
        assert "pip install" not in row["reason"]
    finally:
        assert server.stop() == 0
    failure = server.log().split("initialize() of ", 1)[1]
    assert "Traceback" in failure
    assert "import some_module_no_extra_provides" in failure
