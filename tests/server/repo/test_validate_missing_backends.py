"""``trt repo validate`` on a machine without a model's backend (TensorRT engines checked in CPU CI, or
a base install without torch): the missing backend is an error, or with ``--allow-missing-backends`` a
note, and either way the rest of the model is still checked: its config's rules, each version's model
file, its ensembles. Inputs and outputs a config leaves to auto-complete (read from the engine) are not
called missing."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.repo.test_validate import run_trt
from tests.support import ROOT, write_one_step_ensemble, write_python_model
from trt.server.repo.findings import Severity
from trt.server.repo.validate import validate_repository

without_tensorrt = pytest.mark.skipif(
    importlib.util.find_spec("tensorrt") is not None, reason="TensorRT is installed: no backend is missing"
)

ENGINE_TENSORS = """
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
input [ { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""


def _engine(repo: Path, name: str, config: str, versions: tuple[int, ...] = (1,)) -> None:
    """A TensorRT model: its config and, in each version, a model.plan (never opened here)."""
    for version in versions:
        (repo / name / str(version)).mkdir(parents=True)
        (repo / name / str(version) / "model.plan").write_bytes(b"not an engine")
    (repo / name / "config.pbtxt").write_text(f'platform: "tensorrt_plan"\nmax_batch_size: 8\n{config}')


@without_tensorrt
def test_a_missing_backend_is_an_error_and_the_rest_is_still_checked(tmp_path: Path) -> None:
    broken = (
        ENGINE_TENSORS + "dynamic_batching { preferred_batch_size: [ 16 ] }\nversion_policy { all { } }\n"
    )
    _engine(tmp_path, "engine", broken, versions=(1, 2))
    (tmp_path / "engine" / "2" / "model.plan").unlink()
    findings = validate_repository([tmp_path]).models[0].findings
    messages = [(f.severity, f.message) for f in findings]
    missing = (
        "backend 'tensorrt' is not available: tensorrt is not installed; install it with: pip install "
        "'trt-serve[tensorrt]'; where the model is to run elsewhere, --allow-missing-backends makes this "
        "a note"
    )
    assert (Severity.ERROR, missing) in messages
    assert any("preferred_batch_size 16 must be between 1 and max_batch_size (8)" in m for _, m in messages)
    assert any(m.startswith("version 2: model file not found:") for _, m in messages)
    assert len(findings) == 3


@without_tensorrt
def test_allowed_it_is_a_note_and_the_exit_status_says_ok(tmp_path: Path) -> None:
    _engine(tmp_path, "engine", ENGINE_TENSORS)
    refused = run_trt("repo", "validate", str(tmp_path))
    assert refused.returncode == 1
    allowed = run_trt("repo", "validate", str(tmp_path), "--allow-missing-backends", "--warnings-as-errors")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "1 model(s): 1 ok, 0 failing; 0 error(s), 0 warning(s), 1 note(s)" in allowed.stdout
    report = json.loads(
        run_trt("repo", "validate", str(tmp_path), "--allow-missing-backends", "--json").stdout
    )
    assert report["ok"] is True and (report["errors"], report["warnings"], report["notes"]) == (0, 0, 1)
    (note,) = report["findings"]
    assert note["severity"] == "note"
    assert note["message"].endswith("checked without it: the model file was not opened")


@without_tensorrt
def test_allowed_a_missing_model_file_is_still_an_error(tmp_path: Path) -> None:
    _engine(tmp_path, "engine", ENGINE_TENSORS)
    (tmp_path / "engine" / "1" / "model.plan").rename(tmp_path / "engine" / "1" / "engine.plan")
    result = run_trt("repo", "validate", str(tmp_path), "--allow-missing-backends", "--json")
    assert result.returncode == 1
    errors = [f["message"] for f in json.loads(result.stdout)["findings"] if f["severity"] == "error"]
    assert len(errors) == 1 and errors[0].startswith("model file not found:")
    assert "engine.plan" in errors[0]  # the file that is there instead, named


@without_tensorrt
def test_tensors_left_to_auto_complete_and_the_ensembles_that_run_them_are_not_faulted(
    tmp_path: Path,
) -> None:
    _engine(tmp_path, "engine", "dynamic_batching { }\n")  # its inputs and outputs come from the engine
    write_one_step_ensemble(tmp_path, "pipeline", "engine")
    report = validate_repository([tmp_path], allow_missing_backends=True)
    assert report.errors == 0 and report.warnings == 0, [f.message for f in report.all_findings()]
    (note,) = [f for f in report.all_findings() if f.model == "engine"]
    unchecked = "the model file was not opened, and its inputs and outputs (read from it) not checked"
    assert note.message.endswith(f"checked without it: {unchecked}")
    # Nor loaded: it cannot load here, and the ensemble that runs it neither.
    loaded = run_trt("repo", "validate", str(tmp_path), "--allow-missing-backends", "--load", "--json")
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    notes = {
        (f["model"], f["message"]) for f in json.loads(loaded.stdout)["findings"] if f["check"] == "load"
    }
    assert notes == {
        ("engine", "not loaded: backend 'tensorrt' is not installed here"),
        ("pipeline", "not loaded: its step model 'engine' cannot load here"),
    }


@without_tensorrt
def test_an_ensemble_step_with_known_tensors_is_still_checked_against_them(tmp_path: Path) -> None:
    _engine(tmp_path, "engine", ENGINE_TENSORS.replace("TYPE_INT32", "TYPE_FP32"))
    write_one_step_ensemble(tmp_path, "pipeline", "engine")
    report = validate_repository([tmp_path], allow_missing_backends=True)
    assert report.errors > 0
    assert all(f.model == "pipeline" for f in report.all_findings() if f.severity == Severity.ERROR)


def _validate_without(module: str, repo: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``trt repo validate REPO --json FLAGS`` where ``module`` fails to import as it does where it is
    not installed (a shadow module first on PYTHONPATH, for the model processes too)."""
    shadow = repo.parent / f"without_{module}"
    shadow.mkdir(exist_ok=True)
    (shadow / f"{module}.py").write_text(
        f'raise ModuleNotFoundError("No module named \'{module}\'", name="{module}")\n'
    )
    return subprocess.run(
        [sys.executable, "-m", "trt", "repo", "validate", str(repo), "--json", *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": str(shadow)},
    )  # fmt: skip


def test_a_backend_whose_library_is_missing_is_found_when_it_opens_the_file(tmp_path: Path) -> None:
    """The PyTorch backend's module imports without torch; only opening the model file needs it, so
    the missing library shows at the file's check (a base install validating the example repository)."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "model_repository" / "torch_mlp", repo / "torch_mlp")
    refused = _validate_without("torch", repo)
    assert refused.returncode == 1
    (error,) = json.loads(refused.stdout)["findings"]
    assert error["severity"] == "error" and "--allow-missing-backends makes this a note" in error["message"]
    allowed = _validate_without("torch", repo, "--allow-missing-backends")
    assert allowed.returncode == 0, allowed.stdout
    (note,) = json.loads(allowed.stdout)["findings"]
    assert note["severity"] == "note"
    assert note["message"].startswith("backend 'pytorch' is not available: torch is not installed")


NEEDS_TOKENIZERS = """
class TritonPythonModel:
    def initialize(self, args):
        import tokenizers  # noqa: F401  (the genai extra)

    def execute(self, requests):
        return []
"""

ADD_SUB_INT32 = """
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
input [ { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""


def test_a_python_models_missing_extra_found_at_load_is_a_note_and_so_is_its_ensemble(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "tokenizing", NEEDS_TOKENIZERS, ADD_SUB_INT32)
    write_one_step_ensemble(repo, "pipeline", "tokenizing")
    refused = _validate_without("tokenizers", repo, "--load")
    assert refused.returncode == 1
    errors = {f["model"] for f in json.loads(refused.stdout)["findings"] if f["severity"] == "error"}
    assert "tokenizing" in errors
    allowed = _validate_without("tokenizers", repo, "--load", "--allow-missing-backends")
    assert allowed.returncode == 0, allowed.stdout
    notes = {(f["model"], f["severity"], f["message"]) for f in json.loads(allowed.stdout)["findings"]}
    assert notes == {
        (
            "tokenizing",
            "note",
            "not loaded: failed to load 'tokenizing': model.py needs tokenizers, which is not installed; "
            "install it with: pip install 'trt-serve[genai]'",
        ),
        ("pipeline", "note", "not loaded: its step model 'tokenizing' cannot load here"),
    }
