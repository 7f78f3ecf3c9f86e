"""``trt repo validate`` on a catalogue of broken models: each fault reported with its message, file
and line; the good model beside them clean; the exit status and JSON fit for CI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.server.repo.catalogue import ADD_SUB, CATALOGUE, GOOD_PY, PY_CONFIG, Fault, build, python_model
from tests.support import ROOT, write_one_step_ensemble, write_simple
from trt.server.core.errors import ModelConfigError
from trt.server.core.models.config import parse_config_text
from trt.server.core.models.config_rules import check_config
from trt.server.repo.config_lines import ConfigLines
from trt.server.repo.inventory import list_models
from trt.server.repo.validate import validate_repository


def run_trt(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trt", *args], cwd=cwd, capture_output=True, text=True, timeout=240
    )


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], int]:
    repo = tmp_path_factory.mktemp("catalogue")
    build(repo)
    result = run_trt("repo", "validate", str(repo), "--json")
    return repo, json.loads(result.stdout), result.returncode


def test_the_catalogue_has_at_least_fifteen_distinct_faults() -> None:
    assert len({fault.model for fault in CATALOGUE}) >= 15
    assert len({fault.message for fault in CATALOGUE}) == len(CATALOGUE)


@pytest.mark.parametrize("fault", CATALOGUE, ids=lambda fault: fault.model)
def test_each_fault_is_reported_at_its_file_and_line(
    catalogue: tuple[Path, dict[str, Any], int], fault: Fault
) -> None:
    repo, report, _ = catalogue
    found = [f for f in report["findings"] if f["model"] == fault.model]
    matching = [f for f in found if fault.message in f["message"]]
    assert matching, f"{fault.model}: expected '{fault.message}', got {[f['message'] for f in found]}"
    finding = matching[0]
    assert finding["severity"] == fault.severity
    assert finding["file"] == str(repo / fault.model / fault.file).rstrip("/")
    assert finding["line"] == fault.line
    model = next(m for m in report["models"] if m["name"] == fault.model)
    assert model["ok"] is (fault.severity == "warning")


def test_the_good_model_beside_the_broken_ones_is_clean(catalogue: tuple[Path, dict[str, Any], int]) -> None:
    _, report, returncode = catalogue
    simple = next(m for m in report["models"] if m["name"] == "simple")
    assert simple["ok"] and simple["backend"] == "onnxruntime" and simple["versions"] == [1]
    assert not [f for f in report["findings"] if f["model"] == "simple"]
    assert returncode == 1 and report["ok"] is False
    failing = {m["name"] for m in report["models"] if not m["ok"]}
    assert failing == {f.model for f in CATALOGUE if f.severity == "error"}


def test_a_clean_repository_passes_and_warnings_fail_only_when_asked(tmp_path: Path) -> None:
    write_simple(tmp_path, config='name: "simple"\n' + ADD_SUB)
    clean = run_trt("repo", "validate", str(tmp_path))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "1 model(s): 1 ok, 0 failing; 0 error(s), 0 warning(s)" in clean.stdout
    (tmp_path / "simple" / "01").mkdir()
    assert run_trt("repo", "validate", str(tmp_path)).returncode == 0
    strict = run_trt("repo", "validate", str(tmp_path), "--warnings-as-errors")
    assert strict.returncode == 1
    assert "folder '01' is ignored" in strict.stdout


def test_the_human_report_names_file_and_line(tmp_path: Path) -> None:
    config = ADD_SUB.replace('"INPUT1" data_type: TYPE_INT32', '"INPUT1" data_type: TYPE_FP32')
    write_simple(tmp_path, config=config)
    result = run_trt("repo", "validate", str(tmp_path))
    assert result.returncode == 1
    expected = f"error {tmp_path / 'simple' / 'config.pbtxt'}:5: input 'INPUT1': config says TYPE_FP32"
    assert expected in " ".join(result.stdout.split())


def test_a_config_that_does_not_parse_is_named_once_at_its_line_and_column(tmp_path: Path) -> None:
    write_simple(tmp_path, config=ADD_SUB.replace("max_batch_size: 8", "max_batch_size: oops"))
    result = run_trt("repo", "validate", str(tmp_path))
    config = tmp_path / "simple" / "config.pbtxt"
    expected = f"error {config}:2:17: 'max_batch_size: oops': Couldn't parse integer: oops"
    assert expected in " ".join(result.stdout.split())
    assert result.stdout.count(str(config)) == 1
    finding = validate_repository([tmp_path]).models[0].findings[0]
    assert (finding.line, finding.column) == (2, 17)
    assert finding.message == "'max_batch_size: oops': Couldn't parse integer: oops"


def test_model_config_name_checks_the_config_trt_serve_would_read(tmp_path: Path) -> None:
    write_simple(tmp_path, config='name: "simple"\n' + ADD_SUB)
    (tmp_path / "simple" / "configs").mkdir()
    named = tmp_path / "simple" / "configs" / "h100.pbtxt"
    named.write_text(ADD_SUB.replace("max_batch_size: 8", "max_batch_size: oops"))
    assert run_trt("repo", "validate", str(tmp_path)).returncode == 0  # config.pbtxt is sound
    result = run_trt("repo", "validate", str(tmp_path), "--model-config-name=h100")
    assert result.returncode == 1
    assert f"error {named}:2:17: 'max_batch_size: oops'" in " ".join(result.stdout.split())
    assert run_trt("repo", "validate", str(tmp_path), "--model-config-name=a100").returncode == 0  # none
    refused = run_trt("repo", "validate", str(tmp_path), "--model-config-name=../simple")
    assert refused.returncode == 2 and "--model-config-name takes a name" in refused.stdout + refused.stderr


def test_an_undefined_enum_number_is_named_once_at_its_line(tmp_path: Path) -> None:
    write_simple(tmp_path, config=ADD_SUB.replace('"INPUT1" data_type: TYPE_INT32', '"INPUT1" data_type: 32'))
    finding = validate_repository([tmp_path]).models[0].findings[0]
    assert finding.location == f"{tmp_path / 'simple' / 'config.pbtxt'}:5"
    assert finding.message == "input[1].data_type: 32 is not a value of DataType"


def test_one_model_can_be_checked_alone_and_a_wrong_name_is_named(tmp_path: Path) -> None:
    build(tmp_path)
    report = validate_repository([tmp_path], model="simple")
    assert [m.name for m in report.models] == ["simple"] and report.errors == 0
    # An ensemble checked alone still reads the models its steps run.
    alone = validate_repository([tmp_path], model="ensemble_dtype_mismatch")
    assert any("takes TYPE_INT32" in f.message for f in alone.all_findings())
    missing = validate_repository([tmp_path], model="simpl")
    assert missing.errors == 1
    assert "no model folder named 'simpl' (did you mean 'simple'?)" in missing.findings[0].message


def test_a_name_in_two_repositories_is_reported(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    write_simple(first, config=ADD_SUB)
    write_simple(second, config=ADD_SUB)
    report = validate_repository([first, second])
    assert "is in more than one repository" in report.models[0].findings[0].message


def test_with_namespacing_a_name_may_repeat_across_repositories(tmp_path: Path) -> None:
    """As trt serve --model-namespacing: both copies check and load, each repository's ensemble runs
    its own; an ensemble in a third repository cannot tell which of the two its step means."""
    first, second, third = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for repo in (first, second):
        write_simple(repo, config=ADD_SUB)
        write_one_step_ensemble(repo, f"pipeline_{repo.name}", "simple")
    write_one_step_ensemble(third, "pipeline_c", "simple")
    args = [
        "repo",
        "validate",
        str(first),
        str(second),
        str(third),
        "--model-namespacing",
        "--load",
        "--json",
    ]
    result = run_trt(*args)
    report = json.loads(result.stdout)
    assert result.returncode == 1, result.stderr
    models = {(m["name"], Path(m["path"]).parent.name): m for m in report["models"]}
    for key in (("simple", "a"), ("simple", "b"), ("pipeline_a", "a"), ("pipeline_b", "b")):
        assert models[key]["ok"] and models[key]["loaded"], models[key]
    assert not models[("pipeline_c", "c")]["ok"]
    (finding,) = [f for f in report["findings"] if f["model"] == "pipeline_c"]
    assert "which 2 repositories hold, none of them this ensemble's" in finding["message"]
    # Without the flag, the name in two repositories is the fault.
    plain = validate_repository([first, second])
    assert any("is in more than one repository" in f.message for f in plain.all_findings())


def test_list_with_namespacing_shows_each_repository_s_copy(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for repo in (first, second):
        write_simple(repo, config=ADD_SUB)
    namespaced = list_models([first, second], namespacing=True)
    assert [(m.name, Path(m.path).parent.name, m.error) for m in namespaced] == [
        ("simple", "a", ""),
        ("simple", "b", ""),
    ]
    (plain,) = list_models([first, second])
    assert "more than one repository" in plain.error
    table = run_trt("repo", "list", str(first), str(second), "--model-namespacing").stdout
    assert "Folder" in table and table.count("│ simple ") == 2, table


def test_a_missing_repository_is_an_error_not_a_crash(tmp_path: Path) -> None:
    result = run_trt("repo", "validate", str(tmp_path / "nowhere"), "--json")
    assert result.returncode == 1
    assert "does not exist" in json.loads(result.stdout)["findings"][0]["message"]


def test_load_loads_each_sound_model_and_runs_one_inference(tmp_path: Path) -> None:
    write_simple(tmp_path, config=ADD_SUB)
    raising_initialize = (
        "def initialize(self, args):\n        raise RuntimeError('no GPU driver')\n\n    def execute"
    )
    python_model(PY_CONFIG, GOOD_PY.replace("def execute", raising_initialize))(tmp_path / "fails_to_load")
    raising_execute = "raise ValueError('bad weights')\n        return ["
    python_model(PY_CONFIG, GOOD_PY.replace("return [", raising_execute))(tmp_path / "fails_to_infer")
    result = run_trt("repo", "validate", str(tmp_path), "--load", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1, result.stderr
    models = {m["name"]: m for m in report["models"]}
    assert models["simple"]["loaded"] is True and models["simple"]["ok"] is True
    assert models["fails_to_load"]["loaded"] is False
    assert models["fails_to_infer"]["loaded"] is True and models["fails_to_infer"]["ok"] is False
    by_model = {f["model"]: f for f in report["findings"]}
    assert by_model["fails_to_load"]["check"] == "load"
    assert "no GPU driver" in by_model["fails_to_load"]["message"]
    assert by_model["fails_to_infer"]["check"] == "infer"
    assert "bad weights" in by_model["fails_to_infer"]["message"]


def test_the_example_repository_validates_and_loads() -> None:
    result = run_trt("repo", "validate", "model_repository", "--load", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 0, result.stdout
    assert all(m["ok"] and m["loaded"] for m in report["models"])


def test_the_loader_refuses_what_validate_reports() -> None:
    config = parse_config_text(ADD_SUB + "dynamic_batching { preferred_batch_size: [ 16 ] }\n")
    with pytest.raises(ModelConfigError, match="preferred_batch_size 16") as raised:
        check_config(config)
    assert raised.value.field == "dynamic_batching.preferred_batch_size"


def test_config_lines_point_at_fields_as_written() -> None:
    lines = ConfigLines(
        'name: "m"  # comment with { brace\n'
        "input [\n"
        "  {\n"
        '    name: "INPUT0"\n'
        "    dims: [ 16 ]\n"
        "  },\n"
        '  { name: "INPUT1" dims: [ 4 ] }\n'
        "]\n"
        'ensemble_scheduling { step [ { model_name: "a" },\n'
        '  { model_name: "b" input_map { key: "x" value: "y" } } ] }\n'
    )
    assert lines.line_of("name") == 1
    assert lines.line_of("input[INPUT0].dims") == 5
    assert lines.line_of("input[INPUT1].dims") == 7
    assert lines.line_of("input[1]") == 7
    assert lines.line_of("ensemble_scheduling.step[1].input_map") == 10
    assert lines.line_of("input[NOPE].dims") == 3  # the tensor is not written: its list is
    assert lines.line_of("version_policy") is None


@pytest.mark.parametrize("gpus", [0, 1], ids=["cpu_host", "gpu_host"])
def test_list_reads_a_pytorch_model_without_importing_torch_and_validate_opens_its_file(
    tmp_path: Path, gpus: int
) -> None:
    """Listing is an inventory: importing torch alone took 3 s of every ``trt repo list``. The model
    file itself is validate's to open, so a file torch cannot read shows there and not in the list.
    On a host whose NVML sees a GPU too, where KIND_AUTO asks a backend whether its library can use it
    (found on a lent H200: listing imported torch there)."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "model_repository" / "torch_mlp", repo / "torch_mlp")
    (repo / "torch_mlp" / "1" / "model.pt").write_bytes(b"not TorchScript")
    probe = (
        "import json, sys\n"
        f"import trt.server.core.devices as devices; devices.gpu_count = lambda: {gpus}\n"
        "from trt.server.repo.inventory import list_models\n"
        "(model,) = list_models([sys.argv[1]])\n"
        "print(json.dumps([model.error, model.backend, model.inputs, 'torch' in sys.modules]))\n"
    )
    listed = subprocess.run(
        [sys.executable, "-c", probe, str(repo)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert json.loads(listed.stdout) == ["", "pytorch", ["INPUT__0 FP32 [64]"], False], listed
    errors = [f.message for f in validate_repository([repo]).all_findings()]
    assert len(errors) == 1 and "torch.jit.load could not read" in errors[0], errors
