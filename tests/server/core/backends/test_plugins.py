"""A backend from a package of its own: built here, installed with pip into a folder of its own (the
shared environment stays as it is), found through its ``trt.backends`` entry points by ``trt serve``
and serving over HTTP and gRPC. Its other entries show the two ways a plug-in fails: a dependency
that is not installed (named with the plug-in's own requirement) and an entry point that does not
load; either fails only its own models."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support import ServerProcess, write_simple

PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "trt-backend-scale"
version = "1.0"

[project.optional-dependencies]
heavy = ["a-package-that-is-not-installed"]

[project.entry-points."trt.backends"]
scale = "trt_backend_scale:ScaleBackend"
heavy = "trt_backend_scale.entries:HEAVY"
broken = "trt_backend_scale.no_such_module:Backend"
"""

# The backend class itself as the entry point: a model file "model.scale" holding a factor.
PLUGIN = '''
"""Multiplies INPUT by the factor in its model file."""

from __future__ import annotations

import numpy as np

from trt.protos import model_config_pb2
from trt.server.core.errors import ModelConfigError


class ScaleBackend:
    name = "scale"
    platform = ""
    default_filename = "model.scale"

    def auto_complete(self, config, files, default_max_batch_size):
        if not config.input:
            config.max_batch_size = config.max_batch_size or default_max_batch_size
            for tensors, name in ((config.input, "INPUT"), (config.output, "OUTPUT")):
                tensor = tensors.add(name=name, data_type=model_config_pb2.TYPE_FP32)
                tensor.dims.append(-1)

    def validate(self, config, files):
        try:
            float(files.require_artifact(config, self.default_filename).read_text())
        except ValueError:
            raise ModelConfigError("model.scale must hold a number") from None

    def create_instance(self, config, files, spec):
        return ScaleInstance(float(files.require_artifact(config, self.default_filename).read_text()))


class ScaleInstance:
    def __init__(self, factor):
        self.factor = np.float32(factor)

    def execute(self, inputs, output_names):
        return {"OUTPUT": inputs["INPUT"] * self.factor}

    def close(self):
        pass
'''

# A BackendEntry as the entry point: found without importing its module, which needs a package
# that is not installed.
ENTRIES = """
from trt.server.core.backends import BackendEntry, ModelFormat

HEAVY = BackendEntry(
    "heavy",
    "trt_backend_scale.heavy:HeavyBackend",
    (ModelFormat("heavy_platform", "model.heavy"),),
    install="trt-backend-scale[heavy]",
)
"""
HEAVY = "import a_package_that_is_not_installed  # noqa: F401\n"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plug-in installed by pip into a folder of its own, for PYTHONPATH."""
    source = tmp_path_factory.mktemp("plugin_source")
    (source / "pyproject.toml").write_text(PYPROJECT)
    package = source / "trt_backend_scale"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    (package / "entries.py").write_text(ENTRIES)
    (package / "heavy.py").write_text(HEAVY)
    target = tmp_path_factory.mktemp("plugin_site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--target", str(target), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert list(target.glob("trt_backend_scale-1.0.dist-info"))
    return target


@pytest.fixture(scope="module")
def server(plugin_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("plugin_repo")
    write_simple(repo)
    (repo / "tripled" / "1").mkdir(parents=True)
    (repo / "tripled" / "1" / "model.scale").write_text("3")  # no config: the file names the backend
    (repo / "halved" / "1").mkdir(parents=True)
    (repo / "halved" / "1" / "model.scale").write_text("0.5")
    (repo / "halved" / "config.pbtxt").write_text(
        'backend: "scale"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
    )
    (repo / "needs_heavy" / "1").mkdir(parents=True)
    (repo / "needs_heavy" / "config.pbtxt").write_text('platform: "heavy_platform"\n')
    (repo / "needs_broken" / "1").mkdir(parents=True)
    (repo / "needs_broken" / "config.pbtxt").write_text('backend: "broken"\n')
    process = ServerProcess([repo], env={"PYTHONPATH": str(plugin_path)})
    process.start(tmp_path_factory.mktemp("logs"))
    yield process
    assert process.alive(), process.log()
    process.stop()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_separately_installed_backend_serves_its_models(server: ServerProcess, protocol: str) -> None:
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    data = np.array([[1.0, 2.0, 4.0]], dtype=np.float32)
    tensor = module.InferInput("INPUT", [1, 3], "FP32")
    tensor.set_data_from_numpy(data)
    np.testing.assert_array_equal(client.infer("tripled", [tensor]).as_numpy("OUTPUT"), data * 3)
    pair = module.InferInput("INPUT", [2], "FP32")
    pair.set_data_from_numpy(np.array([3.0, 5.0], dtype=np.float32))
    np.testing.assert_array_equal(client.infer("halved", [pair]).as_numpy("OUTPUT"), [1.5, 2.5])


def test_the_plugin_models_config_names_its_backend(server: ServerProcess) -> None:
    config = httpclient.InferenceServerClient(server.http_url).get_model_config("tripled")
    assert config["backend"] == "scale" and config["max_batch_size"] == 4


def test_a_plugin_that_cannot_load_fails_only_its_own_models(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.is_server_ready()  # the two failures are skipped at start-up, not counted
    rows = {row["name"]: row for row in client.get_model_repository_index()}
    assert rows["simple"]["state"] == "READY"
    assert rows["needs_heavy"]["state"] == "UNAVAILABLE"
    assert (
        "backend 'heavy' is not available: a_package_that_is_not_installed is not installed; "
        "install it with: pip install 'trt-backend-scale[heavy]'" in rows["needs_heavy"]["reason"]
    )
    assert rows["needs_broken"]["state"] == "UNAVAILABLE"
    assert (
        "backend 'broken' (trt_backend_scale.no_such_module:Backend, from trt-backend-scale) could not be "
        "loaded: ModuleNotFoundError" in rows["needs_broken"]["reason"]
    )
