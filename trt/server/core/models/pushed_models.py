"""Model files pushed through the repository extension's ``load`` (``file:<path>`` parameters).

As in Triton, the files are not written into the user's repository: each push gets a fresh folder of its
own, the model loads from there, and the folder lives until the model is pushed again, reloaded from the
repository, or the server stops. Every path is checked so that nothing lands outside that folder."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path, PurePosixPath

from trt.server.core.errors import InvalidArgument

logger = logging.getLogger("trt.repository")

FILE_PREFIX = "file:"


def _relative_path(key: str) -> PurePosixPath:
    text = key[len(FILE_PREFIX) :]
    path = PurePosixPath(text)
    if (
        not text
        or "\\" in text
        or "\x00" in text
        or path.is_absolute()
        or any(part in ("", ".", "..") for part in text.split("/"))
    ):
        raise InvalidArgument(
            f"load parameter '{key}': a file path must stay inside the model folder, as "
            "'file:<version>/<name>' (no absolute path, no '..' or empty segments)"
        )
    return path


class PushedModels:
    """The folders of pushed models, by model name."""

    def __init__(self) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="trt-pushed-"))
        self._folders: dict[str, Path] = {}

    def stage(self, name: str, files: dict[str, bytes]) -> Path:
        """Write ``files`` into a fresh folder for ``name``; return it (named ``name``, as loaders expect)."""
        paths = {key: _relative_path(key) for key in files}  # all checked before anything is written
        folder = Path(tempfile.mkdtemp(prefix="push-", dir=self._root)) / name
        folder.mkdir()
        base = folder.resolve()
        for key, relative in paths.items():
            target = folder.joinpath(*relative.parts)
            # The folder is new, so no segment can be a symlink yet; checked all the same.
            if not target.resolve().is_relative_to(base):
                raise InvalidArgument(f"load parameter '{key}': the path leaves the model folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(files[key])
        return folder

    def adopt(self, name: str, folder: Path | None) -> None:
        """``folder`` now serves ``name`` (None: the repository does); the previous push is removed."""
        previous = self._folders.pop(name, None)
        if folder is not None:
            self._folders[name] = folder
        if previous is not None and previous != folder:
            shutil.rmtree(previous.parent, ignore_errors=True)

    def discard(self, folder: Path) -> None:
        shutil.rmtree(folder.parent, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)
        self._folders.clear()
