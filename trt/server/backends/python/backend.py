"""The Python backend: ``model.py`` files written for Triton, run unchanged.

Each instance runs in its own process, so Python models scale past the GIL and a crash stays
contained. ``parameters { key: "EXECUTION_ENV_PATH" ... }`` picks the interpreter: an unpacked
environment (a venv or conda folder with ``bin/python``) or a ``.tar.gz`` of one (conda-pack), which
is unpacked once into ``$TRT_CACHE_DIR`` (default ``~/.cache/trt``): not beside the model, where it
would look like a change to the repository and where the repository may be read-only.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from trt.protos import model_config_pb2
from trt.server.backends.python.extras import missing_extra
from trt.server.backends.python.instance import PythonModelInstance
from trt.server.backends.python.process import STUB
from trt.server.core.backends.base import InstanceSpec, ModelFiles
from trt.server.core.errors import ModelConfigError, ModelLoadError
from trt.server.core.models.config import config_from_json, config_to_dict, config_to_json

logger = logging.getLogger("trt.backends.python")


def model_directory_token(value: str, model_dir: Path) -> str:
    return value.replace("$$TRITON_MODEL_DIRECTORY", str(model_dir))


def interpreter_for(config: model_config_pb2.ModelConfig, model_dir: Path) -> str:
    """The Python that runs the model: the server's own, or the one in EXECUTION_ENV_PATH."""
    parameter = config.parameters.get("EXECUTION_ENV_PATH")
    if parameter is None or not parameter.string_value:
        return sys.executable
    path = Path(model_directory_token(parameter.string_value, model_dir))
    if not path.is_absolute():
        path = model_dir / path
    if path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
        path = _unpacked(path)
    for candidate in (path / "bin" / "python3", path / "bin" / "python"):
        if candidate.exists():
            return str(candidate)
    raise ModelConfigError(
        f"EXECUTION_ENV_PATH '{parameter.string_value}' has no bin/python; give an unpacked environment "
        "folder (python -m venv / conda) or a conda-pack .tar.gz"
    )


def _cache_dir() -> Path:
    return Path(os.environ.get("TRT_CACHE_DIR") or Path.home() / ".cache" / "trt") / "environments"


UNPACKED_MARK = ".trt-unpacked"  # written last: an unpacking cut short (a crash, a kill) is done again


def _unpacked(archive: Path) -> Path:
    """The environment packed in ``archive`` (conda-pack or a tarred venv), unpacked once into the cache
    under its digest. Its members must stay inside the folder it unpacks into (tarfile's ``data``
    filter: no absolute paths, no ``..``, no links out, no devices); one that does not fails the load
    and leaves nothing behind. One unpacking at a time per archive, under a lock on a file of the
    cache: models loading it at once, and servers sharing the cache, wait for it and use it, fixed by
    ``conda-unpack`` before any of them runs it."""
    with archive.open("rb") as file:  # read in blocks: a conda environment is often gigabytes
        digest = hashlib.file_digest(file, "sha256").hexdigest()[:16]
    cache = _cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / digest
    if (target / UNPACKED_MARK).exists():
        return target
    with (cache / f".{digest}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process dies
        if (target / UNPACKED_MARK).exists():
            return target  # unpacked while this load waited
        shutil.rmtree(target, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(dir=cache, prefix=".unpacking_"))
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(staging, filter="data")
        except (tarfile.TarError, OSError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise ModelLoadError(f"EXECUTION_ENV_PATH {archive.name} cannot be unpacked: {exc}") from None
        staging.rename(target)
        activate = target / "bin" / "conda-unpack"
        if activate.exists():  # conda-pack: fix the prefixes baked into the environment, where it lies
            subprocess.run([str(activate)], check=False)
        (target / UNPACKED_MARK).touch()
    return target


class PythonBackend:
    name = "python"
    platform = ""
    default_filename = "model.py"

    def _model_py(self, config: model_config_pb2.ModelConfig, files: ModelFiles) -> Path:
        return files.require_artifact(config, self.default_filename)

    def auto_complete(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, default_max_batch_size: int
    ) -> None:
        """Run ``TritonPythonModel.auto_complete_config`` in the model's own interpreter."""
        model_py = self._model_py(config, files)
        if "auto_complete_config" not in model_py.read_text(encoding="utf-8", errors="replace"):
            return
        with tempfile.NamedTemporaryFile(suffix=".json") as result:
            process = subprocess.run(
                [interpreter_for(config, files.model_dir), str(STUB), "--auto-complete", str(model_py),
                 "--result", result.name],
                input=json.dumps(config_to_dict(config)), capture_output=True, text=True, timeout=120,
                env=_stub_env(files),
            )  # fmt: skip
            if process.returncode != 0:
                last = process.stderr.strip().splitlines()[-1:] or ["no output"]
                raise missing_extra(last[0]) or ModelConfigError(f"auto_complete_config() failed: {last[0]}")
            completed = config_from_json(Path(result.name).read_text(encoding="utf-8"))
        config.CopyFrom(completed)

    def validate(self, config: model_config_pb2.ModelConfig, files: ModelFiles) -> None:
        self._model_py(config, files)

    def create_instance(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, spec: InstanceSpec
    ) -> PythonModelInstance:
        args = {
            "model_config": config_to_json(config).decode(),
            "model_instance_kind": spec.kind.removeprefix("KIND_"),
            "model_instance_name": spec.name,
            "model_instance_device_id": str(spec.device_id),
            "model_repository": str(files.model_dir),
            "model_version": str(files.version),
            "model_name": files.model_name,
        }
        try:
            return PythonModelInstance(
                interpreter_for(config, files.model_dir),
                self._model_py(config, files),
                args,
                spec.services,
            )
        except ModelLoadError as exc:
            unavailable = missing_extra(exc.message)
            if unavailable is None:
                raise
            raise unavailable from None


def _stub_env(files: ModelFiles) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(STUB.parent), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    return env
