"""Model files pushed through the repository extension's ``load`` (``file:<path>`` parameters).

As in Triton, the files are not written into the user's repository: each push gets a fresh folder of its
own, the model loads from there, and the folder lives until the model is pushed again, reloaded from the
repository or unloaded, and the requests its versions still run are done (they may read from it), or
until the server stops. The model name and every path go through ``core.paths`` before
anything is written, so nothing lands outside that folder; and a folder is only ever removed when it is
one this object made, whatever name a client sent. The files are written on a thread of their own: a
push of one 40 MB file held every model's requests for half a second on the event loop, and one of
20,000 small files for 2.6 s. At most ``MAX_PUSHED_FILES`` files a push (Triton has no such bound):
a 64 MiB request of empty files would otherwise make over a million.

Messages never show where the folders are (a server-side temporary path): the lifecycle names a
model's files from its folder (``<model>/1/model.py``) in every load error, pushed or not.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from pathlib import Path, PurePosixPath

from trt.server.core.errors import InvalidArgument, ServerError, UnsafePath
from trt.server.core.models.load_failures import poll_failure
from trt.server.core.paths import relative_path_problem, shown, unsafe_segment

logger = logging.getLogger("trt.repository")

FILE_PREFIX = "file:"
MAX_PUSHED_FILES = 10_000
STOPPING = "the server is stopping"


def check_model_name(name: str) -> None:
    """A name a client asks to load must be one folder name (it names a folder of the repository or
    of a push), checked as it is and without its surrounding blanks; refused in Triton's words (its
    ``ValidateModelName``, which its L0_input_validation test matches)."""
    trimmed = name.strip()
    if not trimmed:
        raise InvalidArgument("Model name cannot be empty. Please enter a valid name to deploy.")
    reason = unsafe_segment(name) or unsafe_segment(trimmed)
    if reason is not None:
        raise UnsafePath(
            f"invalid model name '{shown(name)}', model name must not contain path traversal characters "
            f"(found {reason})"
        )


def _relative_path(name: str, key: str) -> PurePosixPath:
    text = key[len(FILE_PREFIX) :]
    reason = relative_path_problem(text)
    if reason is not None:
        raise UnsafePath(
            poll_failure(
                name,
                f"Invalid file path in load parameter '{shown(key)}' (found {reason}): a file path must "
                "stay inside the model folder, as 'file:<version>/<name>'",
            )
        )
    return PurePosixPath(text)


class PushedModels:
    """The folders of pushed models, by model name."""

    def __init__(self) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="trt-pushed-"))
        self._folders: dict[str, Path] = {}
        self._closed = False

    async def stage(self, name: str, files: dict[str, bytes]) -> Path:
        """Write ``files`` into a fresh folder for ``name``, off the event loop; return the folder
        (named ``name``, as loaders expect). A caller cancelled meanwhile leaves nothing behind."""
        check_model_name(name)
        if len(files) > MAX_PUSHED_FILES:
            raise InvalidArgument(
                poll_failure(
                    name, f"{len(files)} files pushed: at most {MAX_PUSHED_FILES} may be, in one load"
                )
            )
        paths = {key: _relative_path(name, key) for key in files}  # all checked before anything is written
        writing = asyncio.ensure_future(asyncio.to_thread(self._write, name, files, paths))
        try:
            return await asyncio.shield(writing)
        except asyncio.CancelledError:
            writing.add_done_callback(self._discard_written)
            raise

    def _discard_written(self, writing: asyncio.Future[Path]) -> None:
        if not writing.cancelled() and writing.exception() is None:
            self.discard(writing.result())

    def _write(self, name: str, files: dict[str, bytes], paths: dict[str, PurePosixPath]) -> Path:
        holder: Path | None = None
        try:
            holder = Path(tempfile.mkdtemp(prefix="push-", dir=self._root))
            folder = holder / name
            folder.mkdir()
            for key, relative in paths.items():
                target = folder.joinpath(*relative.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(files[key])
        except OSError as exc:
            if holder is not None:
                self._remove(holder)
            what = f"cannot write the pushed files: {exc.strerror or type(exc).__name__}"
            raise ServerError(poll_failure(name, STOPPING if self._closed else what)) from None
        finally:
            if self._closed:
                # The server stopped while this wrote, and removed the folders; the writes since (their
                # ``mkdir(parents=True)`` makes them again) would outlive it.
                shutil.rmtree(self._root, ignore_errors=True)
        if self._closed:
            raise ServerError(poll_failure(name, STOPPING))
        return folder

    def adopt(self, name: str, folder: Path | None) -> Path | None:
        """``folder`` now serves ``name`` (None: the repository does, or nothing). Returns the previous
        push's folder, for the caller to ``discard`` once the versions loaded from it have retired."""
        previous = self._folders.pop(name, None)
        if folder is not None:
            self._folders[name] = folder
        return previous if previous != folder else None

    def discard(self, folder: Path) -> None:
        self._remove(folder.parent)

    def close(self) -> None:
        self._closed = True  # first: a write still running sees it when done, and removes what it made
        shutil.rmtree(self._root, ignore_errors=True)
        self._folders.clear()

    def _remove(self, holder: Path) -> None:
        """Remove one push's folder; refuse anything that is not a folder this object made."""
        if holder.parent != self._root or not holder.name.startswith("push-"):
            logger.error("refusing to remove %s: not a folder of pushed models", holder)
            return
        shutil.rmtree(holder, ignore_errors=True)
