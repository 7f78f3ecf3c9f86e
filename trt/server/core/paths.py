"""The one rule for names and paths that come from a client or a config: they stay in their folder.

A *name* (a model name, a shared memory key) is one path segment; a *relative path* (a pushed file's
``file:<path>``, a config's ``label_filename``, ``default_model_filename``, warm-up or initial-state
data files, ``EXECUTION_ENV_PATH`` in a pushed config) is segments joined by ``/`` that must land
inside the folder it is relative to. The check is on the text, not on the file system: no ``..``,
``.`` or empty segment, not absolute, no backslash, no NUL, no segment longer than a file name may
be. Resolving symlinks is not needed for what clients send (the folders they write into are new and
hold only regular files) and would refuse repositories that an operator links together on purpose.

A name an operator wrote in the repository's own config.pbtxt (and a file a backend opens by a
config's name) is judged by ``escape_problem``/``contained``: the same containment after ``.`` and
``..`` are resolved in the text, so that an existing ``weights/./model.onnx`` still loads. What a
client sends (a pushed model's files, a load request's config) meets the strict rule.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path, PurePosixPath

from trt.server.core.errors import UnsafePath

MAX_SEGMENT_BYTES = 255  # NAME_MAX on Linux
MAX_PATH_BYTES = 4096  # PATH_MAX


def unsafe_segment(segment: str) -> str | None:
    """Why ``segment`` cannot be one segment of a path (None when it can)."""
    if segment in ("", ".", ".."):
        return "an empty, '.' or '..' segment"
    if "/" in segment or "\\" in segment:
        return "a path separator"
    if "\x00" in segment:
        return "a NUL byte"
    if len(segment.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
        return f"a segment over {MAX_SEGMENT_BYTES} bytes"
    return None


def relative_path_problem(value: str) -> str | None:
    """Why ``value`` is not a relative path that stays inside its folder (None when it is)."""
    if len(value.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"over {MAX_PATH_BYTES} bytes in all"
    if value.startswith("/"):
        return "an absolute path"
    for segment in value.split("/"):
        reason = unsafe_segment(segment)
        if reason is not None:
            return reason
    return None


def safe_name(value: str, what: str) -> str:
    """``value`` if it is one safe path segment; UnsafePath naming ``what`` otherwise."""
    reason = unsafe_segment(value)
    if reason is not None:
        raise UnsafePath(f"{what} '{shown(value)}' is not a valid name (found {reason})")
    return value


def safe_relative_path(value: str, what: str) -> PurePosixPath:
    """``value`` as a relative path that stays inside the folder it is joined to."""
    reason = relative_path_problem(value)
    if reason is not None:
        raise UnsafePath(
            f"{what} '{shown(value)}' must be a relative path that stays inside its folder "
            f"(found {reason}; no absolute path, no '..' or empty segments)"
        )
    return PurePosixPath(value)


def inside(folder: Path, relative: str, what: str) -> Path:
    """``folder`` joined with ``relative``, which must be a safe relative path."""
    return folder.joinpath(*safe_relative_path(relative, what).parts)


def escape_problem(value: str) -> str | None:
    """Why ``value``, once its ``.`` and ``..`` are resolved, leaves its folder (None when it does
    not): the rule for names an operator wrote in the repository."""
    if "\x00" in value:
        return "a NUL byte"
    normal = posixpath.normpath(value)
    if normal.startswith("/"):
        return "an absolute path"
    if normal == ".." or normal.startswith("../"):
        return "'..' climbing out of it"
    return None


def contained(folder: Path, relative: str) -> Path | None:
    """``folder`` joined with ``relative`` once ``.`` and ``..`` in it are resolved; None when the
    result would leave ``folder``."""
    if escape_problem(relative) is not None:
        return None
    return folder / posixpath.normpath(relative)


def shown(value: str) -> str:
    """A name as an error message may quote it: bounded, control characters escaped."""
    text = value if len(value) <= 80 else value[:77] + "..."
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


def relative_to_holder(text: str, holder: Path) -> str:
    """``text`` with every path under ``holder`` shown relative to it: a model's files as
    ``<model>/1/model.onnx``, as clients see them, not where the server keeps its repository. Only a
    path that starts a word is rewritten (``/m/`` inside ``/mnt/m/x`` is left alone); under ``/`` itself,
    nothing (every absolute path would lose its first '/')."""
    for spelling in {str(holder), str(holder.resolve())} - {"/"}:
        text = re.sub(r"(?<![^\s'\"(:=,])" + re.escape(spelling.rstrip("/") + "/"), "", text)
    return text
