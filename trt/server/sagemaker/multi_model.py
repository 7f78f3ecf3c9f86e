"""SageMaker multi-model endpoints (MME): models loaded, listed and unloaded by SageMaker at run time.

SageMaker unpacks each model archive under ``/opt/ml/models/<hash>/model`` and calls ``POST /models``
with ``{"model_name": <hash>, "url": <that folder>}`` and the archive's name in
``X-Amzn-SageMaker-Target-Model``; the model is served under that target name. As in Triton, the folder
is either one model (``config.pbtxt`` at its root) or a repository holding one model, or an ensemble and
its steps. Answers are Triton's: 200 with an empty body, 409 for a name loaded twice, 404 for one not
loaded, 400 for anything else, 507 when a failure reads as out of memory.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import orjson

from trt.server.core.errors import AlreadyExists, ServerError
from trt.server.core.server import InferenceServer
from trt.server.http.messages import HttpResponse

logger = logging.getLogger("trt.sagemaker")

_JSON = [(b"content-type", b"application/json")]
_ENSEMBLE = re.compile(r'platform:(\s)*"ensemble"')
_SEGMENT = r"[0-9A-Za-z._]+"
# Texts that Triton's SageMaker server takes for an out-of-memory failure (answered with 507).
OUT_OF_MEMORY_TEXTS = (
    "CUDA out of memory", "CUDA_OUT_OF_MEMORY", "Out of memory", "Out Of Memory", "out of memory",
    "MemoryError", "OutOfMemory", "OOM", "Dst tensor is not initialized", "Src tensor is not initialized",
    "CNMEM_STATUS_OUT_OF_MEMORY", "CUDNN_STATUS_NOT_INITIALIZED", "CUBLAS_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_NOT_INITIALIZED", "Failed to allocate memory", "failed to allocate memory",
    "No space left on device",
)  # fmt: skip
# SageMaker gives an unload 360 s; as Triton, wait up to 350 for the model to release its instances
# before answering, since SageMaker may then delete its files or load another model in its memory.
UNLOAD_TIMEOUT_S = 350.0


class MultiModelEndpoint:
    """The models SageMaker loaded, by the hash it names them with."""

    def __init__(self, core: InferenceServer, models_root: Path) -> None:
        self.core = core
        self.models_root = models_root
        self._url_form = re.compile(
            rf"({re.escape(str(models_root).rstrip('/'))}/{_SEGMENT})/(model)/?({_SEGMENT})?"
        )
        self._loaded: dict[str, _LoadedArchive] = {}

    def has(self, name: str) -> bool:
        return name in self._loaded

    def list(self) -> HttpResponse:
        models = [
            {"modelName": name, "modelUrl": archive.url}
            for name, archive in self._loaded.items()
            if self.core.model_ready(archive.target)
        ]
        return HttpResponse(200, orjson.dumps({"models": models}), list(_JSON))

    def describe(self, name: str) -> HttpResponse:
        archive = self._loaded.get(name)
        if archive is None:
            return HttpResponse(404)
        return HttpResponse(200, orjson.dumps({"modelName": name, "modelUrl": archive.url}), list(_JSON))

    async def load(self, body: bytes, target_header: str | None) -> HttpResponse:
        try:
            document: Any = orjson.loads(body) if body.strip() else {}
        except orjson.JSONDecodeError as exc:
            return _error(400, f"failed to parse the load model request JSON buffer: {exc}")
        if not isinstance(document, dict):
            return _error(400, "the load model request must be a JSON object")
        name, url = document.get("model_name", ""), document.get("url", "")
        if not isinstance(name, str) or not isinstance(url, str):
            return _error(400, "'model_name' and 'url' must be strings")
        folder = os.path.normpath(os.path.abspath(url)) if url else os.path.abspath(".")
        if folder.startswith(("/dev/", "/proc/", "/sys/")):
            logger.error(
                'Invalid URL: %s. "url" property value cannot start with /dev/, /proc/, or /sys/.', url
            )
            return HttpResponse(400)
        target = target_header or name
        logger.info("Loading SageMaker TargetModel: %s", target)
        match = self._url_form.fullmatch(folder)
        if match is None or not _stays_inside(Path(folder), self.models_root):
            return _error(
                400,
                f"Invalid \"url\" '{url}': expected a path of the form "
                f"{self.models_root}/<hash>/model[/<subdir>]",
            )
        if name in self._loaded:
            return _error(409, f"model repository '{self._loaded[name].url}' has already been registered")
        archive = _archive(Path(folder), match.group(1), target)
        try:
            await self._load_archive(archive)
        except AlreadyExists as exc:
            return _error(409, exc.message)
        except ServerError as exc:
            return _error(self.failure_status_of(exc.message), exc.message)
        self._loaded[name] = archive
        return HttpResponse(200)

    async def unload(self, name: str, target_header: str | None) -> HttpResponse:
        archive = self._loaded.get(name)
        if archive is None:
            logger.debug("Model %s is not loaded.", name)
            return HttpResponse(404)
        target = target_header or archive.target
        logger.info("Unloading SageMaker TargetModel: %s", target)
        started = time.monotonic()
        try:
            for model in (archive.target, *archive.steps):
                await self.core.unload_model(model, unload_dependents=True)
        except ServerError as exc:
            return _error(400, exc.message)
        if await self.core.unloads_finished(UNLOAD_TIMEOUT_S):
            logger.info("UNLOAD for model %s completed in %.1f seconds.", target, time.monotonic() - started)
        else:
            logger.error(
                "UNLOAD did not complete within %d seconds. This may result in SageMaker UNLOAD timeout.",
                UNLOAD_TIMEOUT_S,
            )
        del self._loaded[name]
        return HttpResponse(200)

    def failure_status(self, body: bytes) -> int:
        """400, or 507 when an error body reads as out of memory."""
        return self.failure_status_of(body.decode("utf-8", "replace"))

    @staticmethod
    def failure_status_of(message: str) -> int:
        return 507 if any(text in message for text in OUT_OF_MEMORY_TEXTS) else 400

    async def _load_archive(self, archive: _LoadedArchive) -> None:
        loaded: list[str] = []
        try:
            for step, folder in archive.step_folders.items():  # an ensemble's steps first
                await self.core.load_model_folder(step, folder)
                loaded.append(step)
            await self.core.load_model_folder(archive.target, archive.model_folder)
        except BaseException:
            for step in loaded:
                await self.core.unload_model(step)
            raise


class _LoadedArchive:
    def __init__(self, url: str, target: str, model_folder: Path, step_folders: dict[str, Path]) -> None:
        self.url = url  # what the list and describe routes show: the archive's repository folder
        self.target = target  # the name the model is served under
        self.model_folder = model_folder
        self.step_folders = step_folders

    @property
    def steps(self) -> tuple[str, ...]:
        return tuple(self.step_folders)


def _archive(folder: Path, parent: str, target: str) -> _LoadedArchive:
    """What a load URL holds: one model at its root, or a repository with one model or an ensemble (the
    model served) beside the models its steps run."""
    if (folder / "config.pbtxt").is_file():
        return _LoadedArchive(parent, target, folder, {})
    subfolders = sorted(entry for entry in folder.iterdir() if entry.is_dir()) if folder.is_dir() else []
    chosen = subfolders[-1] if subfolders else folder
    for entry in subfolders:
        config = entry / "config.pbtxt"
        if config.is_file() and _ENSEMBLE.search(config.read_text(errors="replace")):
            chosen = entry
    steps = {entry.name: entry for entry in subfolders if entry != chosen and chosen != folder}
    if not _ENSEMBLE.search(_read(chosen / "config.pbtxt")):
        steps = {}  # only an ensemble brings the models beside it
    return _LoadedArchive(str(folder), target, chosen, steps)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _stays_inside(folder: Path, root: Path) -> bool:
    """Symbolic links must not lead a load out of the archive root."""
    try:
        return folder.resolve().is_relative_to(root.resolve())
    except OSError:
        return False


def _error(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, orjson.dumps({"error": message}), list(_JSON))
