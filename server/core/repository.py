"""The model repository on disk, in Triton's layout.

``<repo>/<model>/config.pbtxt`` and numbered version folders ``<repo>/<model>/<N>/``. Folders whose
names are not numbers, or that start with "0", are not versions (Triton ignores them too). A model
name found in more than one repository is ambiguous and is not served.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from server.core.errors import ModelLoadError


@dataclass(frozen=True, slots=True)
class ModelLocation:
    name: str
    path: Path
    duplicate_of: Path | None = None  # set when another repository holds the same name


class ModelRepository:
    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = tuple(Path(root) for root in roots)

    def check_roots(self) -> None:
        for root in self.roots:
            if not root.is_dir():
                raise ModelLoadError(f"model repository '{root}' does not exist or is not a directory")

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

    def locate(self, name: str) -> ModelLocation | None:
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            return None
        return self.scan().get(name)


def version_folders(model_dir: Path) -> dict[int, Path]:
    """Numbered version folders of a model, by version."""
    versions: dict[int, Path] = {}
    try:
        entries = list(model_dir.iterdir())
    except OSError:
        return versions
    for entry in entries:
        name = entry.name
        if entry.is_dir() and name.isdigit() and not name.startswith("0"):
            versions[int(name)] = entry
    return versions


def fingerprint(model_dir: Path) -> tuple[tuple[str, int, int], ...]:
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
