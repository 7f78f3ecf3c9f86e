"""trt installs beside today's ML stack without changing it, at both ends of its dependency bounds.

Each test builds a fresh virtual environment from the package registry, as a user's machine would,
and installs trt from a wheel of this checkout (not editable), then runs the installed ``trt`` from a
folder outside the checkout so that nothing is imported from the source tree.

One current pip drives every environment from outside (``pip --python``): the pip that ``python -m venv``
bundles with Python 3.11 takes over twice as long to choose among PyPI's files, and most of this module's
time went there. The environments themselves hold neither pip nor setuptools, as Python 3.12's do not.
The installs run in the background two at a time (see ``environments``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ROOT, ServerProcess

# What a Triton user already has: the current client with every extra, and onnx.
STACK = ["tritonclient[all]", "onnx"]
# The wire libraries trt must leave as it found them.
SHARED = ("protobuf", "grpcio", "tritonclient", "onnx", "numpy")

pytestmark = pytest.mark.timeout(900)


class Venv:
    """A virtual environment of its own, run through its own interpreter, its packages managed by ``pip``
    (an interpreter whose pip is current) with ``--python``."""

    def __init__(self, path: Path, pip: str) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
        self.path = path
        self.python = str(path / "bin" / "python")
        self._pip = [pip, "-m", "pip", "--python", self.python, "--disable-pip-version-check"]

    def install(self, *requirements: str) -> None:
        # --no-compile: writing .pyc files for every installed module took half of each install, and
        # nothing here depends on them (Python compiles what it imports).
        self._run(*self._pip, "install", "-q", "--no-compile", *requirements)

    def versions(self) -> dict[str, str]:
        listed = self._run(*self._pip, "list", "--format=json")
        return {row["name"].lower(): row["version"] for row in json.loads(listed)}

    def pip_check(self) -> str:
        return self._run(*self._pip, "check")

    def run_python(self, code: str, cwd: Path) -> str:
        return self._run(self.python, "-c", code, cwd=cwd)

    def top_level_names(self, distribution: str) -> set[str]:
        """The import names a distribution puts into site-packages."""
        code = (
            "import importlib.metadata as m, json\n"
            f"files = m.distribution({distribution!r}).files or []\n"
            "print(json.dumps(sorted({f.parts[0] for f in files if '..' not in f.parts"
            " and not f.parts[0].endswith(('.dist-info', '.egg-info', '.pth'))})))\n"
        )
        return set(json.loads(self.run_python(code, self.path)))

    def _run(self, *args: str, cwd: Path | None = None) -> str:
        result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (built,) = out.glob("trt_serve-*.whl")
    return built


@pytest.fixture(scope="module")
def pip(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The interpreter of a virtual environment holding the current pip from the registry."""
    path = tmp_path_factory.mktemp("pip") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    python = str(path / "bin" / "python")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--upgrade", "pip"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return python


# trt with its wire libraries at the lowest versions it allows, and at the newest majors.
BOUNDS = {
    "lowest": ["protobuf==6.30.0", "grpcio==1.72.1"],
    "newest": ["protobuf>=7", "grpcio>=1.85"],
}


@dataclass(frozen=True)
class StackAlone:
    """A fresh environment with the stack alone, and the versions it resolved to before anything else."""

    env: Venv
    versions: dict[str, str]


def _stack_alone(path: Path, pip: str) -> StackAlone:
    env = Venv(path, pip)
    env.install(*STACK)
    return StackAlone(env, env.versions())


def _trt_then_stack(path: Path, pip: str, wheel: Path) -> Venv:
    env = Venv(path, pip)
    env.install(str(wheel))
    env.install(*STACK)
    return env


def _trt_at(path: Path, pip: str, wheel: Path, bounds: list[str]) -> Venv:
    env = Venv(path, pip)
    env.install(str(wheel), *bounds)
    return env


@dataclass(frozen=True)
class Environments:
    """Each test's fresh environment, as its installs finish."""

    stack_alone: Future[StackAlone]  # its versions are read before a test adds trt to its env
    trt_then_stack: Future[Venv]
    trt_at: dict[str, Future[Venv]]  # by the name of the end of BOUNDS


@pytest.fixture(scope="module")
def environments(wheel: Path, pip: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environments]:
    """Every environment of the module, installed in the background two at a time from the first test on
    (even when only one test is run): pip spends its time on one core, and CI's machine has two. A test
    waits for its own; a failed install fails the tests that use that environment."""
    folder = lambda name: tmp_path_factory.mktemp(name) / "venv"  # noqa: E731
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield Environments(
            stack_alone=pool.submit(_stack_alone, folder("stack"), pip),
            trt_then_stack=pool.submit(_trt_then_stack, folder("trt_then_stack"), pip, wheel),
            trt_at={end: pool.submit(_trt_at, folder(end), pip, wheel, b) for end, b in BOUNDS.items()},
        )


def _serve_and_infer(env: Venv, workdir: Path, client: str) -> str:
    """The installed ``trt serve`` on the example repository, answering one infer over gRPC and HTTP."""
    server = ServerProcess(
        [ROOT / "model_repository"], command_prefix=[str(env.path / "bin" / "trt")], cwd=workdir
    )
    server.start(workdir)
    try:
        return env.run_python(client.format(http=server.http_url, grpc=server.grpc_url), workdir)
    finally:
        assert server.stop() == 0, server.log()


# Infers through NVIDIA's client, both protocols, and checks readiness of the whole repository.
_TRITONCLIENT = """
import numpy as np, tritonclient.grpc as g, tritonclient.http as h
a = np.arange(16, dtype=np.int32).reshape(1, 16)
for module, url in ((g, "{grpc}"), (h, "{http}")):
    client = module.InferenceServerClient(url)
    assert client.is_server_ready(), "not ready"
    inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    assert (client.infer("simple", inputs).as_numpy("OUTPUT0") == 2 * a).all()
print("ok")
"""

# Infers through trt's own generated stubs (no tritonclient), over gRPC, and checks readiness over HTTP.
_OWN_STUBS = """
import urllib.request, grpc, numpy as np
from trt.protos import grpc_service_pb2 as pb, grpc_service_pb2_grpc as rpc
with urllib.request.urlopen("http://{http}/v2/health/ready") as reply:
    assert reply.status == 200
stub = rpc.GRPCInferenceServiceStub(grpc.insecure_channel("{grpc}"))
a = np.arange(16, dtype=np.int32).reshape(1, 16)
request = pb.ModelInferRequest(model_name="simple", raw_input_contents=[a.tobytes(), a.tobytes()])
for name in ("INPUT0", "INPUT1"):
    request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
reply = stub.ModelInfer(request, timeout=30)
assert (np.frombuffer(reply.raw_output_contents[0], np.int32) == 2 * a.ravel()).all()
print("ok")
"""


def test_trt_after_tritonclient_and_onnx_changes_neither(
    wheel: Path, environments: Environments, tmp_path: Path
) -> None:
    # The stack's own environment, trt added on top: what a Triton user does.
    stack = environments.stack_alone.result()
    env, before = stack.env, stack.versions
    env.install(str(wheel))
    after = env.versions()
    assert {name: after[name] for name in SHARED} == {name: before[name] for name in SHARED}
    env.pip_check()
    env.run_python("import onnx, tritonclient.grpc, tritonclient.http, trt.server.grpc.service", tmp_path)
    assert env.top_level_names("trt-serve") == {"trt"}
    version = subprocess.run(
        [str(env.path / "bin" / "trt"), "--version"], capture_output=True, text=True, timeout=60
    )
    assert version.returncode == 0 and version.stdout.startswith("trt "), version.stdout + version.stderr
    assert _serve_and_infer(env, tmp_path, _TRITONCLIENT).strip() == "ok"


def test_tritonclient_and_onnx_after_trt_resolve_as_they_would_alone(
    environments: Environments, tmp_path: Path
) -> None:
    env = environments.trt_then_stack.result()  # trt installed, then the stack
    after = env.versions()
    alone = environments.stack_alone.result().versions
    assert {name: after[name] for name in SHARED} == {name: alone[name] for name in SHARED}
    env.pip_check()
    env.run_python(
        "import onnx, tritonclient.grpc, trt.server.grpc.service, trt.perf.transport.grpc_clients", tmp_path
    )


@pytest.mark.parametrize("end", list(BOUNDS))
def test_trt_serves_at_either_end_of_its_wire_library_bounds(
    environments: Environments, end: str, tmp_path: Path
) -> None:
    env = environments.trt_at[end].result()  # trt installed with BOUNDS[end]
    versions = env.versions()
    for bound in BOUNDS[end]:
        name, operator, wanted = bound.partition("==") if "==" in bound else bound.partition(">=")
        if operator == "==":
            assert versions[name] == wanted
        else:
            assert versions[name].split(".")[0] == wanted.split(".")[0], versions[name]
    env.pip_check()
    assert _serve_and_infer(env, tmp_path, _OWN_STUBS).strip() == "ok"
