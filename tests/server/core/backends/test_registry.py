"""How a model's backend is found: trt's own backends through the ``trt.backends`` entry points its
pyproject declares, chosen by config or files as Triton chooses; optional backends fail alone, naming
the extra to install."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from google.protobuf import text_format

from tests.support import ROOT
from trt.protos import model_config_pb2
from trt.server.core.backends.base import ModelFiles
from trt.server.core.backends.registry import BackendEntry, catalog, model_filenames, resolve_entry
from trt.server.core.errors import ModelConfigError


@pytest.mark.parametrize(
    ("module", "backend", "extra"),
    [
        ("torch", "pytorch", "torch"),
        ("tensorrt", "tensorrt", "tensorrt"),
        ("openvino", "openvino", "openvino"),
        ("tensorflow", "tensorflow", "tensorflow"),
    ],
)
def test_a_missing_package_names_the_extra_to_install(module: str, backend: str, extra: str) -> None:
    # Found when the backend is first asked for, or (PyTorch, which imports torch only for a model
    # file) when a model is first checked.
    probe = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from pathlib import Path\n"
        "from trt.protos.model_config_pb2 import ModelConfig\n"
        "from trt.server.core.backends.base import ModelFiles\n"
        "from trt.server.core.backends.registry import catalog, get_backend\n"
        f"try:\n    backend = get_backend(catalog().by_name({backend!r}))\n"
        "    backend.validate(ModelConfig(), ModelFiles('m', 1, Path('m'), Path('m/1')))\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.startswith("BackendUnavailable ")
    assert f"pip install 'trt-serve[{extra}]'" in result.stdout


def test_trts_backends_are_the_entry_points_its_pyproject_declares_in_order() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["trt.backends"]
    assert [entry.name for entry in catalog().entries] == [*declared, "ensemble"]
    assert catalog().broken == {}
    assert all(isinstance(entry, BackendEntry) for entry in catalog().entries)


def test_finding_the_backends_imports_no_heavy_library() -> None:
    probe = (
        "import sys\nfrom trt.server.core.backends.registry import catalog\ncatalog()\n"
        "heavy = ('torch', 'openvino', 'tensorflow', 'tensorrt', 'onnxruntime')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "[]", result.stderr


def _resolve(text: str, files: dict[str, str], tmp_path: Path) -> tuple[str, model_config_pb2.ModelConfig]:
    version = tmp_path / "model" / "1"
    version.mkdir(parents=True)
    for name, kind in files.items():
        if kind == "dir":
            (version / name).mkdir()
        else:
            (version / name).write_bytes(b"")
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    return resolve_entry(config, [version]).name, config


@pytest.mark.parametrize(
    ("text", "files", "backend", "platform"),
    [
        ('backend: "pytorch"', {}, "pytorch", "pytorch_libtorch"),
        ('backend: "tensorflow"', {"model.graphdef": "file"}, "tensorflow", "tensorflow_graphdef"),
        ('backend: "tensorflow"', {"model.savedmodel": "dir"}, "tensorflow", "tensorflow_savedmodel"),
        ('backend: "tensorflow"', {}, "tensorflow", "tensorflow_savedmodel"),
        (
            'backend: "tensorflow" default_model_filename: "model.graphdef"',
            {},
            "tensorflow",
            "tensorflow_graphdef",
        ),
        ('platform: "tensorflow_graphdef"', {}, "tensorflow", "tensorflow_graphdef"),
        ("", {"model.savedmodel": "dir"}, "tensorflow", "tensorflow_savedmodel"),
        ("", {"model.xml": "file", "model.bin": "file"}, "openvino", ""),
        ('backend: "openvino" default_model_filename: "model.onnx"', {"model.onnx": "file"}, "openvino", ""),
        ("", {"model.onnx": "file", "model.plan": "file"}, "tensorrt", "tensorrt_plan"),  # Triton's order
        ("", {"model.py": "file"}, "python", ""),
    ],
)
def test_the_backend_comes_from_the_config_or_the_files_as_in_triton(
    text: str, files: dict[str, str], backend: str, platform: str, tmp_path: Path
) -> None:
    name, config = _resolve(text, files, tmp_path)
    assert (name, config.backend, config.platform) == (backend, backend, platform)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'backend: "onnxruntime" platform: "pytorch_libtorch"',
            "expected platform 'onnxruntime_onnx' or none",
        ),
        ('backend: "openvino" platform: "onnxruntime_onnx"', "expected platform none"),
        ('platform: "openvino"', 'did you mean backend: "openvino"? it has no platform'),
        ('backend: "tensorflow" platform: "tensorrt_plan"', "expected platform 'tensorflow_savedmodel' or "),
        (
            'platform: "tensorflow"',
            'did you mean platform: "tensorflow_savedmodel" or backend: "tensorflow"?',
        ),
        ('platform: "onnxruntime"', 'did you mean platform: "onnxruntime_onnx" or backend: "onnxruntime"?'),
        (
            "",
            "expected one of model.savedmodel, model.graphdef, model.plan, model.onnx, model.xml, model.pt, "
            "model.py",
        ),
    ],
)
def test_a_config_that_names_no_known_backend_says_what_was_meant(
    text: str, message: str, tmp_path: Path
) -> None:
    with pytest.raises(ModelConfigError) as raised:
        _resolve(text, {}, tmp_path)
    assert message in str(raised.value)


def test_every_backends_model_file_is_known_for_trt_repo_validate() -> None:
    assert {
        "model.onnx",
        "model.pt",
        "model.plan",
        "model.py",
        "model.xml",
        "model.savedmodel",
        "model.graphdef",
    } <= set(model_filenames())


@pytest.mark.parametrize("name", ["../other/1/model.onnx", "/etc/passwd", "sub/../../model.onnx", ".."])
def test_a_model_file_named_outside_the_version_folder_is_refused(name: str, tmp_path: Path) -> None:
    files = ModelFiles("m", 1, tmp_path / "m", tmp_path / "m" / "1")
    config = model_config_pb2.ModelConfig(default_model_filename=name)
    with pytest.raises(ModelConfigError, match="leads outside the version folder") as raised:
        files.artifact(config, "model.onnx")
    assert raised.value.field == "default_model_filename"


def test_a_model_file_in_a_subfolder_of_the_version_is_taken(tmp_path: Path) -> None:
    files = ModelFiles("m", 1, tmp_path / "m", tmp_path / "m" / "1")
    config = model_config_pb2.ModelConfig(default_model_filename="weights/./model.onnx")
    assert files.artifact(config, "model.onnx") == tmp_path / "m" / "1" / "weights" / "model.onnx"
