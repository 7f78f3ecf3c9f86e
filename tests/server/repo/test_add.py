"""``trt repo add`` for each format, then served by ``trt serve`` and called with tritonclient; and
``list``, ``show``, ``remove``, ``init`` on what it wrote. Models that need files beside them (a Python
model's modules, ONNX external data) are added and served apart, so a fault there fails only their tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import set_external_data

from tests.server.repo.test_validate import run_trt
from tests.support import ROOT, ServerProcess, add_sub_model, save_onnx, simple_inputs
from trt.server.core.models.config import read_config_file

SIMPLE_ONNX = ROOT / "model_repository" / "simple" / "1" / "model.onnx"


def run_trt_each(*commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """``run_trt`` for commands that neither write nor read what another writes, two at a time: each
    spends a second or more on one core starting Python and importing trt (and torch for some)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda command: run_trt(*command), commands))


AUTO_COMPLETE_PY = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.add_input({"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]})
        auto_complete_model_config.add_output({"name": "LENGTH", "data_type": "TYPE_INT32", "dims": [1]})
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            lengths = np.array([[len(t[0])] for t in text], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("LENGTH", lengths)]))
        return responses
"""

PLAIN_PY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 3)]))
        return responses
"""


class Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2.0, (y + 1).sum(dim=1, keepdim=True)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sources")
    torch.jit.script(Scale()).save(str(folder / "scale.pt"))
    (folder / "lengths").mkdir()
    (folder / "lengths" / "model.py").write_text(AUTO_COMPLETE_PY)
    (folder / "triple.py").write_text(PLAIN_PY)
    save_onnx(add_sub_model(), folder / "addsub.onnx")
    return folder


@pytest.fixture(scope="module")
def added(sources: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("added")
    into = ["-r", str(repo)]
    commands = [
        ["repo", "add", str(sources / "addsub.onnx"), *into, "--max-batch-size", "8", "--instances", "2"],
        ["repo", "add", str(sources / "scale.pt"), *into, "--input", "INPUT__0:FP32:-1",
         "--input", "INPUT__1:INT64:4"],
        ["repo", "add", str(sources / "lengths" / "model.py"), *into],
        ["repo", "add", str(sources / "triple.py"), *into, "--name", "triple", "--max-batch-size", "0",
         "--input", "X:FP32:2,2", "--output", "Y:FP32:2,2"],
    ]  # fmt: skip
    for command in commands:
        result = run_trt(*command)
        assert result.returncode == 0, f"{command}: {result.stdout}{result.stderr}"
    return repo


@pytest.fixture(scope="module")
def served(added: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """trt serve on what add wrote (it goes live only once every model has loaded)."""
    server = ServerProcess([added]).start(tmp_path_factory.mktemp("logs"))
    yield server
    server.stop()


def test_onnx_config_is_read_from_the_file(added: Path) -> None:
    config = read_config_file(added / "addsub" / "config.pbtxt")
    assert (added / "addsub" / "1" / "model.onnx").is_file()
    assert config.platform == "onnxruntime_onnx" and config.max_batch_size == 8
    assert [(t.name, list(t.dims)) for t in config.input] == [("INPUT0", [16]), ("INPUT1", [16])]
    assert [t.name for t in config.output] == ["OUTPUT0", "OUTPUT1"]
    assert config.HasField("dynamic_batching")
    assert config.instance_group[0].count == 2


def test_torchscript_outputs_and_batching_are_read_by_running_it(added: Path) -> None:
    config = read_config_file(added / "scale" / "config.pbtxt")
    assert config.platform == "pytorch_libtorch" and config.max_batch_size == 4
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [
        ("OUTPUT__0", 11, [-1]),  # TYPE_FP32, variable like its input
        ("OUTPUT__1", 9, [1]),  # TYPE_INT64
    ]


def test_python_models_take_auto_complete_or_the_given_tensors(added: Path) -> None:
    lengths = read_config_file(added / "lengths" / "config.pbtxt")
    assert lengths.backend == "python" and lengths.max_batch_size == 4
    assert [t.name for t in lengths.input] == ["TEXT"] and [t.name for t in lengths.output] == ["LENGTH"]
    triple = read_config_file(added / "triple" / "config.pbtxt")
    assert triple.max_batch_size == 0 and list(triple.input[0].dims) == [2, 2]
    assert (added / "triple" / "1" / "model.py").is_file()


def test_every_added_model_serves_with_tritonclient(served: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(served.http_url)
    try:
        data = np.arange(32, dtype=np.int32).reshape(2, 16)
        result = client.infer("addsub", simple_inputs(httpclient, data))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)

        x = httpclient.InferInput("INPUT__0", [2, 3], "FP32")
        x.set_data_from_numpy(np.ones((2, 3), np.float32))
        y = httpclient.InferInput("INPUT__1", [2, 4], "INT64")
        y.set_data_from_numpy(np.ones((2, 4), np.int64))
        result = client.infer("scale", [x, y])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), np.full((2, 3), 2.0, np.float32))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), np.full((2, 1), 8))

        text = httpclient.InferInput("TEXT", [2, 1], "BYTES")
        text.set_data_from_numpy(np.array([[b"abc"], [b"hello"]], dtype=np.object_))
        np.testing.assert_array_equal(client.infer("lengths", [text]).as_numpy("LENGTH"), [[3], [5]])

        square = httpclient.InferInput("X", [2, 2], "FP32")
        square.set_data_from_numpy(np.eye(2, dtype=np.float32))
        np.testing.assert_array_equal(client.infer("triple", [square]).as_numpy("Y"), np.eye(2) * 3)
    finally:
        client.close()


def test_show_prints_what_the_server_reports_as_its_config(added: Path, served: ServerProcess) -> None:
    models = ("addsub", "scale", "lengths")
    *shown_json, pbtxt = run_trt_each(
        *(["repo", "show", model, "-r", str(added), "--json"] for model in models),
        ["repo", "show", "addsub", "-r", str(added)],
    )
    client = httpclient.InferenceServerClient(served.http_url)
    try:
        for model, shown in zip(models, shown_json, strict=True):
            assert shown.returncode == 0, shown.stderr
            assert json.loads(shown.stdout) == client.get_model_config(model)
    finally:
        client.close()
    assert 'name: "addsub"' in pbtxt.stdout and "kind: KIND_CPU" in pbtxt.stdout


def test_list_describes_each_model(added: Path) -> None:
    result, table = run_trt_each(["repo", "list", str(added), "--json"], ["repo", "list", str(added)])
    assert result.returncode == 0, result.stderr
    models = {m["name"]: m for m in json.loads(result.stdout)}
    assert set(models) == {"addsub", "scale", "lengths", "triple"}
    assert models["addsub"]["inputs"] == ["INPUT0 INT32 [16]", "INPUT1 INT32 [16]"]
    assert models["addsub"]["batching"] == "dynamic (max 8)" and models["addsub"]["instances"] == "2x CPU"
    assert models["triple"]["batching"] == "none" and models["scale"]["backend"] == "pytorch"
    assert all(m["error"] == "" for m in models.values())
    assert "addsub" in table.stdout and "OUTPUT__1 INT64 [1]" in table.stdout


def test_a_second_add_is_the_next_version_and_keeps_the_config(tmp_path: Path) -> None:
    assert run_trt("repo", "add", str(SIMPLE_ONNX), "-r", str(tmp_path), "--dynamic-batching").returncode == 0
    config_before = (tmp_path / "simple" / "config.pbtxt").read_text()
    again = run_trt("repo", "add", str(SIMPLE_ONNX), "-r", str(tmp_path), "--json")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["version"] == 2 and summary["config_written"] is False
    assert (tmp_path / "simple" / "2" / "model.onnx").is_file()
    assert (tmp_path / "simple" / "config.pbtxt").read_text() == config_before


def test_nothing_is_overwritten_without_force(tmp_path: Path) -> None:
    assert run_trt("repo", "add", str(SIMPLE_ONNX), "-r", str(tmp_path)).returncode == 0
    clash = run_trt("repo", "add", str(SIMPLE_ONNX), "-r", str(tmp_path), "--version", "1")
    assert clash.returncode == 2 and "already has version 1" in clash.stderr and "--force" in clash.stderr
    change = run_trt("repo", "add", str(SIMPLE_ONNX), "-r", str(tmp_path), "--instances", "3")
    assert change.returncode == 2 and "would change it" in change.stderr
    other = ROOT / "model_repository" / "simple_fp32" / "1" / "model.onnx"
    misfit = run_trt("repo", "add", str(other), "-r", str(tmp_path), "--name", "simple")
    assert misfit.returncode == 2 and "does not fit" in misfit.stderr and "TYPE_FP32" in misfit.stderr
    assert sorted(p.name for p in (tmp_path / "simple").iterdir()) == ["1", "config.pbtxt"]
    forced = run_trt(
        "repo", "add", str(other), "-r", str(tmp_path), "--name", "simple", "--version", "1", "--force"
    )
    assert forced.returncode == 0, forced.stderr
    assert read_config_file(tmp_path / "simple" / "config.pbtxt").input[0].data_type == 11  # TYPE_FP32
    assert (tmp_path / "simple" / "config.pbtxt.orig").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "staging left behind"


def test_bad_requests_are_refused_with_what_to_do(tmp_path: Path, sources: Path) -> None:
    cases = [
        (["repo", "add", str(sources / "scale.pt"), "-r", str(tmp_path)], "give each input of forward(x, y)"),
        (["repo", "add", str(sources / "triple.py"), "-r", str(tmp_path)], "has no auto_complete_config()"),
        (["repo", "add", str(tmp_path / "missing.onnx"), "-r", str(tmp_path)], "no model file at"),
        (["repo", "add", str(sources / "triple.py"), "-r", str(tmp_path), "--input", "X:FP32"],
         "give a tensor as NAME:TYPE:DIMS"),
        (["repo", "add", str(SIMPLE_ONNX), "-r", str(tmp_path), "--name", "../escape"],
         "cannot be a model name"),
        (["repo", "add", str(SIMPLE_ONNX), "-r", str(tmp_path), "--kind", "tpu"], "--kind takes cpu or gpu"),
        (["repo", "add", str(sources / "scale.pt"), "-r", str(tmp_path), "--input", "INPUT__0:FP32:3"],
         "did not run on zeros"),
    ]  # fmt: skip
    for (command, message), result in zip(cases, run_trt_each(*(c for c, _ in cases)), strict=True):
        assert result.returncode == 2, command
        assert message in " ".join(result.stderr.split()), (command, result.stderr)
    (tmp_path / "model.bin").write_bytes(b"x")
    unknown = run_trt("repo", "add", str(tmp_path / "model.bin"), "-r", str(tmp_path))
    assert unknown.returncode == 2 and "cannot tell the format" in unknown.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"], "a refused add left files behind"


def test_a_tensorrt_plan_needs_the_tensorrt_extra(tmp_path: Path) -> None:
    try:
        import tensorrt  # noqa: F401

        pytest.skip("tensorrt is installed: reading a real engine is tested on a GPU machine")
    except ImportError:
        pass
    (tmp_path / "engine.plan").write_bytes(b"not an engine")
    result = run_trt("repo", "add", str(tmp_path / "engine.plan"), "-r", str(tmp_path / "repo"))
    assert result.returncode == 2
    assert "pip install 'trt-serve[tensorrt]'" in result.stderr


def test_init_and_remove(tmp_path: Path) -> None:
    repo = tmp_path / "fresh"
    created = run_trt("repo", "init", str(repo), "--json")
    assert json.loads(created.stdout) == {"repository": str(repo), "created": True, "models": 0}
    assert run_trt("repo", "add", str(SIMPLE_ONNX), "-r", str(repo)).returncode == 0
    assert run_trt("repo", "add", str(SIMPLE_ONNX), "-r", str(repo)).returncode == 0
    assert json.loads(run_trt("repo", "init", str(repo), "--json").stdout)["created"] is False
    unconfirmed = run_trt("repo", "remove", "simple", "-r", str(repo))
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    one = run_trt("repo", "remove", "simple", "-r", str(repo), "--version", "1", "--yes")
    assert one.returncode == 0 and not (repo / "simple" / "1").exists() and (repo / "simple" / "2").exists()
    missing = run_trt("repo", "remove", "simple", "-r", str(repo), "--version", "7", "--yes")
    assert missing.returncode == 2 and "has no version 7" in missing.stderr
    last = run_trt("repo", "remove", "simple", "-r", str(repo), "--version", "2", "--yes", "--json")
    assert json.loads(last.stdout)["no_version_left"] is True
    assert run_trt("repo", "remove", "simple", "-r", str(repo), "--yes").returncode == 0
    assert not (repo / "simple").exists()
    assert run_trt("repo", "remove", "..", "-r", str(repo), "--yes").returncode == 2


# -- models that need files beside them ----------------------------------------------------------

# A model folder: model.py imports a sibling module and a sibling package, as Triton's Python backend
# allows (the version folder is on sys.path). auto_complete_config() runs the imports during the add.
FOLDER_MODEL_PY = """import triton_python_backend_utils as pb_utils

import helpers
from ops import shift


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
        auto_complete_model_config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [2]})
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", shift(x, helpers.OFFSET))]))
        return responses
"""

INCLUDING_PY = """import triton_python_backend_utils as pb_utils

import factors


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * factors.FACTOR)]))
        return responses
"""

WIDTH = 1024  # BIAS is 4 KiB: over onnx.save's size_threshold, so it goes to the data file; the scalars stay
BIAS = np.arange(WIDTH, dtype=np.float32)


def branch_bias_model() -> onnx.ModelProto:
    """Y = X * 2 + BIAS where X sums above 0, else X * 2; BIAS is an initializer of the If's subgraph."""
    row = ["batch", WIDTH]
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["DOUBLED", "BIAS"], ["BIASED"])], "then", [],
        [helper.make_tensor_value_info("BIASED", TensorProto.FLOAT, row)],
        [numpy_helper.from_array(BIAS, "BIAS")],
    )  # fmt: skip
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["DOUBLED"], ["SAME"])], "else", [],
        [helper.make_tensor_value_info("SAME", TensorProto.FLOAT, row)],
    )  # fmt: skip
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["X", "TWO"], ["DOUBLED"]),
            helper.make_node("ReduceSum", ["X"], ["SUM"], keepdims=0),
            helper.make_node("Greater", ["SUM", "ZERO"], ["POSITIVE"]),
            helper.make_node("If", ["POSITIVE"], ["Y"], then_branch=then_branch, else_branch=else_branch),
        ],
        "branch_bias",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, row)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, row)],
        [numpy_helper.from_array(np.float32(2), "TWO"), numpy_helper.from_array(np.float32(0), "ZERO")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def bias_model_with_data_at(location: str) -> onnx.ModelProto:
    """Y = X + BIAS, with BIAS said to be in the external file ``location`` (which is not written)."""
    bias = numpy_helper.from_array(BIAS, "BIAS")
    set_external_data(bias, location)
    bias.data_location = TensorProto.EXTERNAL
    bias.ClearField("raw_data")
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "BIAS"], ["Y"])], "bias",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [WIDTH])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [WIDTH])], [bias],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def file_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("file_sources")
    shifter = folder / "shifter"
    (shifter / "ops" / "__pycache__").mkdir(parents=True)
    (shifter / "model.py").write_text(FOLDER_MODEL_PY)
    (shifter / "helpers.py").write_text("OFFSET = 100.0\n")
    (shifter / "ops" / "__init__.py").write_text("def shift(x, by):\n    return x + by\n")
    (shifter / "ops" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"stale")
    (shifter / "__pycache__").mkdir()
    (shifter / "__pycache__" / "helpers.cpython-311.pyc").write_bytes(b"stale")
    (shifter / "stale.pyc").write_bytes(b"stale")
    (shifter / ".ipynb_checkpoints").mkdir()
    (shifter / ".ipynb_checkpoints" / "model-checkpoint.py").write_text("")
    (shifter / ".env").write_text("SECRET=1\n")

    (folder / "fivefold.py").write_text(INCLUDING_PY)
    (folder / "factors.py").write_text("FACTOR = 5.0\n")
    (folder / "assets" / ".cache").mkdir(parents=True)
    (folder / "assets" / "labels.txt").write_text("cat\ndog\n")

    # As users save big models: the weights in weights/branch_bias.bin, the graph in the .onnx file.
    (folder / "external" / "weights").mkdir(parents=True)
    onnx.save(
        branch_bias_model(), str(folder / "external" / "branch_bias.onnx"), save_as_external_data=True,
        location="weights/branch_bias.bin",
    )  # fmt: skip
    return folder


@dataclass
class AddedWithFiles:
    """What ``trt repo add`` said for each model, so each test fails only for its own model."""

    repo: Path
    results: dict[str, subprocess.CompletedProcess[str]]

    def version_folder(self, model: str) -> Path:
        result = self.results[model]
        assert result.returncode == 0, f"trt repo add ({model}): {result.stdout}{result.stderr}"
        return self.repo / model / "1"


@pytest.fixture(scope="module")
def added_with_files(file_sources: Path, tmp_path_factory: pytest.TempPathFactory) -> AddedWithFiles:
    repo = tmp_path_factory.mktemp("added_with_files")
    commands = {
        "shifter": [str(file_sources / "shifter"), "--max-batch-size", "0"],
        "fivefold": [str(file_sources / "fivefold.py"), "--include", str(file_sources / "factors.py"),
                     "--include", str(file_sources / "assets"), "--max-batch-size", "0",
                     "--input", "X:FP32:2", "--output", "Y:FP32:2"],
        "branch_bias": [str(file_sources / "external" / "branch_bias.onnx"), "--json"],
    }  # fmt: skip
    results = {model: run_trt("repo", "add", *args, "-r", str(repo)) for model, args in commands.items()}
    return AddedWithFiles(repo, results)


def files_in(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def test_a_python_model_folder_comes_whole_but_for_caches_and_hidden_files(
    added_with_files: AddedWithFiles,
) -> None:
    version = added_with_files.version_folder("shifter")
    assert files_in(version) == ["helpers.py", "model.py", "ops", "ops/__init__.py"]
    config = read_config_file(version.parent / "config.pbtxt")  # auto_complete_config() imported them
    assert config.backend == "python" and [t.name for t in config.input] == ["X"]


def test_include_copies_files_and_folders_beside_the_model_file(added_with_files: AddedWithFiles) -> None:
    version = added_with_files.version_folder("fivefold")
    assert files_in(version) == ["assets", "assets/labels.txt", "factors.py", "model.py"]


def test_onnx_external_data_goes_where_the_model_says_and_loads(added_with_files: AddedWithFiles) -> None:
    version = added_with_files.version_folder("branch_bias")
    # The data file holds only BIAS, which is an initializer inside the If's subgraph.
    assert files_in(version) == ["model.onnx", "weights", "weights/branch_bias.bin"]
    assert json.loads(added_with_files.results["branch_bias"].stdout)["extra_files"] == [
        "weights/branch_bias.bin"
    ]
    session = ort.InferenceSession(str(version / "model.onnx"), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"X": np.ones((2, WIDTH), np.float32)})
    np.testing.assert_array_equal(y, np.tile(2 + BIAS, (2, 1)))
    config = read_config_file(version.parent / "config.pbtxt")
    assert config.max_batch_size == 4 and list(config.input[0].dims) == [WIDTH]


def test_models_added_with_their_files_serve(added_with_files: AddedWithFiles, tmp_path: Path) -> None:
    for model in added_with_files.results:
        added_with_files.version_folder(model)
    server = ServerProcess([added_with_files.repo]).start(tmp_path)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        x = httpclient.InferInput("X", [2], "FP32")
        x.set_data_from_numpy(np.array([1, 2], np.float32))
        np.testing.assert_array_equal(client.infer("shifter", [x]).as_numpy("Y"), [101, 102])
        np.testing.assert_array_equal(client.infer("fivefold", [x]).as_numpy("Y"), [5, 10])
        row = httpclient.InferInput("X", [1, WIDTH], "FP32")
        row.set_data_from_numpy(np.ones((1, WIDTH), np.float32))
        np.testing.assert_array_equal(client.infer("branch_bias", [row]).as_numpy("Y"), [2 + BIAS])
    finally:
        client.close()
        server.stop()


def test_files_that_cannot_go_beside_the_model_are_refused(file_sources: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    fivefold = str(file_sources / "fivefold.py")
    shifter = file_sources / "shifter"
    (tmp_path / "model.py").write_text(PLAIN_PY)
    (tmp_path / "no_model").mkdir()
    (tmp_path / "no_model" / "helpers.py").write_text("")
    cases = [
        (["--include", str(tmp_path / "missing.py")], fivefold, "--include " + str(tmp_path / "missing.py")
         + ": no such file or folder"),
        (["--include", str(tmp_path / "model.py")], fivefold, "would overwrite the model file model.py"),
        (["--include", str(shifter / "helpers.py")], str(shifter), "would both be 'helpers.py'"),
        ([], str(tmp_path / "no_model"), "is a folder without model.py"),
        (["--include", str(tmp_path)], fivefold, f"the repository {repo} is inside {tmp_path}"),
    ]  # fmt: skip
    results = run_trt_each(
        *(
            ["repo", "add", model, "-r", str(repo), "--max-batch-size", "0", *options]
            for options, model, _ in cases
        )
    )
    for (options, _, message), result in zip(cases, results, strict=True):
        assert result.returncode == 2, (options, result.stdout)
        assert message in " ".join(result.stderr.split()), (options, result.stderr)
    assert not repo.exists(), "a refused add wrote to the repository"


def test_missing_or_escaping_external_data_is_refused_by_name(file_sources: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    lonely = tmp_path / "lonely" / "branch_bias.onnx"
    lonely.parent.mkdir()
    lonely.write_bytes((file_sources / "external" / "branch_bias.onnx").read_bytes())  # without weights/
    missing = run_trt("repo", "add", str(lonely), "-r", str(repo))
    assert missing.returncode == 2
    assert (
        f"branch_bias.onnx keeps tensor 'BIAS' in {lonely.parent / 'weights' / 'branch_bias.bin'}, which "
        "does not exist"
    ) in " ".join(missing.stderr.split())
    outside = tmp_path / "outside.bin"
    outside.write_bytes(BIAS.tobytes())
    for location in ("../outside.bin", str(outside)):
        save_onnx(bias_model_with_data_at(location), tmp_path / "escaping" / "model.onnx")
        result = run_trt("repo", "add", str(tmp_path / "escaping" / "model.onnx"), "-r", str(repo))
        assert result.returncode == 2, location
        assert f"at '{location}', outside the folder of the model" in " ".join(result.stderr.split())
    assert not repo.exists(), "a refused add wrote to the repository"


def test_without_onnx_installed_plain_models_add_and_external_data_is_hinted(
    file_sources: Path, tmp_path: Path
) -> None:
    """onnx is needed only to find external data: without it, a model that needs them says what to install."""
    (tmp_path / "no_onnx").mkdir()
    (tmp_path / "no_onnx" / "onnx.py").write_text("raise ImportError('No module named onnx')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "no_onnx"), str(ROOT)])}

    def add(model: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "trt", "repo", "add", str(model), "-r", str(tmp_path / "repo")],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip

    assert add(SIMPLE_ONNX).returncode == 0
    external = add(file_sources / "external" / "branch_bias.onnx")
    assert external.returncode == 2
    assert "pip install onnx so trt repo add can find and copy them" in " ".join(external.stderr.split())
