"""The model repository on disk, in Triton's layout.

``<repo>/<model>/config.pbtxt`` and numbered version folders ``<repo>/<model>/<N>/``. Folders whose
names are not numbers, or that start with "0", are not versions (Triton ignores them too). A model
name found in more than one repository is ambiguous and is not served, unless models are namespaced
(``--model-namespacing``): then each repository is a namespace of its own (``server.core.models.table``).

A repository is a local folder or a remote one (``s3://...``), which ``server.core.object_store``
mirrors into a local folder; everything past ``refresh`` reads folders either way.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from trt.server.core.errors import ModelLoadError
from trt.server.core.models.object_store import RemoteRepository, is_remote
from trt.server.core.models.table import ModelKey
from trt.server.core.paths import unsafe_segment


class RepositorySource(Protocol):
    root: Path  # the folder models are read from

    def sync(self) -> tuple[int, int]: ...

    def display(self, local: Path) -> str: ...


class LocalRepository:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __str__(self) -> str:
        return str(self.root)

    def sync(self) -> tuple[int, int]:
        return 0, 0  # a local folder is always current

    def display(self, local: Path) -> str:
        return str(local)


def open_source(location: str | Path) -> RepositorySource:
    return RemoteRepository(str(location)) if is_remote(location) else LocalRepository(location)


@dataclass(frozen=True, slots=True)
class ModelLocation:
    name: str
    path: Path
    duplicate_of: Path | None = None  # set when another repository holds the same name


class ModelRepository:
    def __init__(self, locations: Sequence[str | Path], namespacing: bool = False) -> None:
        self.sources = [open_source(location) for location in locations]
        self.roots = tuple(source.root for source in self.sources)
        self.namespacing = namespacing

    def refresh(self) -> None:
        """Bring remote repositories' mirrors up to date (blocking: run it in a thread)."""
        for source in self.sources:
            source.sync()

    def check_roots(self) -> None:
        for source in self.sources:
            if not source.root.is_dir():
                raise ModelLoadError(f"model repository '{source}' does not exist or is not a directory")

    def display(self, local: Path) -> str:
        """A local path as the user knows it (remote paths for files of a remote repository)."""
        for source in self.sources:
            if local == source.root or source.root in local.parents:
                return source.display(local)
        return str(local)

    def describe(self) -> str:
        return ", ".join(str(source) for source in self.sources)

    def scan(self) -> dict[str, ModelLocation]:
        found: dict[str, ModelLocation] = {}
        for root in self.roots:
            if not root.is_dir():
                continue
            for entry in sorted(root.iterdir()):
                if not entry.is_dir() or entry.name.startswith("."):
                    continue
                if entry.name in found:
                    first = found[entry.name]
                    found[entry.name] = ModelLocation(entry.name, first.path, duplicate_of=entry)
                else:
                    found[entry.name] = ModelLocation(entry.name, entry)
        return found

    def scan_by_key(self) -> dict[ModelKey, ModelLocation]:
        """Every model, keyed by namespace and name: each repository's own namespace when namespacing
        (as the user named the repository, which is what Triton calls it), else "" (``scan``'s view,
        where a name in two repositories is one ambiguous model)."""
        if not self.namespacing:
            return {ModelKey("", name): location for name, location in self.scan().items()}
        found: dict[ModelKey, ModelLocation] = {}
        for source in self.sources:
            if not source.root.is_dir():
                continue
            for entry in sorted(source.root.iterdir()):
                if entry.is_dir() and not entry.name.startswith("."):
                    found[ModelKey(str(source), entry.name)] = ModelLocation(entry.name, entry)
        return found

    def locate(self, key: ModelKey) -> ModelLocation | None:
        if unsafe_segment(key.name) is not None:  # not a folder name: no folder of the repository
            return None
        return self.scan_by_key().get(key)

    def keys_named(self, name: str) -> list[ModelKey]:
        """The keys of the models called ``name`` (one for each namespace that holds one)."""
        if unsafe_segment(name) is not None:
            return []
        return [key for key in self.scan_by_key() if key.name == name]


def version_folders(model_dir: Path) -> dict[int, Path]:
    """Numbered version folders of a model, by version."""
    versions: dict[int, Path] = {}
    try:
        entries = list(model_dir.iterdir())
    except OSError:
        return versions
    for entry in entries:
        name = entry.name
        # ASCII digits: str.isdigit() alone takes superscripts (int() refuses) and other scripts' digits
        if entry.is_dir() and name.isascii() and name.isdigit() and not name.startswith("0"):
            versions[int(name)] = entry
    return versions


Fingerprint = tuple[tuple[str, int, int], ...]  # each file's relative path, size and mtime (ns)


def fingerprint(model_dir: Path) -> Fingerprint:
    """What changed on disk, cheaply: every file's relative path, size and mtime."""
    items: list[tuple[str, int, int]] = []
    for dirpath, dirnames, filenames in os.walk(model_dir):
        dirnames.sort()
        for filename in sorted(filenames):
            path = os.path.join(dirpath, filename)
            try:
                stat = os.stat(path)
            except OSError:
                continue
            items.append((os.path.relpath(path, model_dir), stat.st_size, stat.st_mtime_ns))
    return tuple(items)
