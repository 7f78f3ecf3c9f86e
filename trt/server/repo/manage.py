"""``trt repo init`` and ``trt repo remove``: creating a repository and taking models out of it."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from trt.server.core.models.object_store import is_remote
from trt.server.core.models.repository import ModelRepository, version_folders
from trt.server.repo.add import RepoError, valid_model_name


@dataclass(frozen=True, slots=True)
class Removal:
    removed: Path
    model_left_without_versions: bool  # a version was removed and none is left: the model cannot load


def init_repository(path: Path) -> bool:
    """Create the repository folder; False when it already existed."""
    _local_only(path, "init")
    if path.exists() and not path.is_dir():
        raise RepoError(f"{path} exists and is not a folder")
    created = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    return created


def count_models(path: Path) -> int:
    return len(ModelRepository([path]).scan())


def remove_model(repository: Path, name: str, version: int | None = None) -> Removal:
    _local_only(repository, "remove")
    if not valid_model_name(name):
        raise RepoError(f"'{name}' is not a model name")
    model_dir = repository / name
    if not model_dir.is_dir():
        raise RepoError(f"no model folder named '{name}' in {repository}")
    if version is None:
        shutil.rmtree(model_dir)
        return Removal(model_dir, False)
    versions = version_folders(model_dir)
    if version not in versions:
        raise RepoError(f"model '{name}' has no version {version}; its versions are {sorted(versions)}")
    shutil.rmtree(versions[version])
    return Removal(versions[version], len(versions) == 1)


def _local_only(path: Path | str, command: str) -> None:
    if is_remote(path):
        raise RepoError(
            f"trt repo {command} works on local folders; change object storage with its own tools "
            "(e.g. aws s3 sync) and check it with trt repo validate"
        )
