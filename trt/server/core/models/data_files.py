"""Data files a config names by a path relative to a folder of the model's directory (Triton's
``warmup/`` for ``model_warmup``, ``initial_state/`` for a sequence's initial state): read only from
inside that folder, so a config cannot reach other files of the machine."""

from __future__ import annotations

from pathlib import Path

from trt.server.core.errors import ModelConfigError


def read_data_file(model_dir: Path, folder_name: str, relative: str, what: str) -> bytes:
    folder = (model_dir / folder_name).resolve()
    path = (folder / relative).resolve()
    if not path.is_relative_to(folder):
        raise ModelConfigError(f"{what}: '{relative}' must be inside {folder_name}/")
    if not path.is_file():
        raise ModelConfigError(f"{what}: no file {folder_name}/{relative}")
    return path.read_bytes()
