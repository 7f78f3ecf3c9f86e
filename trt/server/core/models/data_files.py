"""Data files a config names by a path relative to a folder of the model's directory (Triton's
``warmup/`` for ``model_warmup``, ``initial_state/`` for a sequence's initial state): read only from
inside that folder (``core.paths``' rule), so a config cannot reach other files of the machine."""

from __future__ import annotations

from pathlib import Path

from trt.server.core.errors import ModelConfigError
from trt.server.core.paths import relative_path_problem, shown


def read_data_file(model_dir: Path, folder_name: str, relative: str, what: str) -> bytes:
    reason = relative_path_problem(relative)
    if reason is not None:
        raise ModelConfigError(f"{what}: '{shown(relative)}' must be inside {folder_name}/ (found {reason})")
    path = model_dir / folder_name / relative
    if not path.is_file():
        raise ModelConfigError(f"{what}: no file {folder_name}/{relative}")
    return path.read_bytes()
