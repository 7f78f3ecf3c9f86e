"""Tensors a config supplies (Triton's ``model_warmup`` inputs and a sequence's initial state), from
data files or made from dims.

A data file is named by a path relative to a folder of the model's directory (``warmup/``,
``initial_state/``) and read only from inside that folder (``core.paths``' rule), so a config cannot
reach other files of the machine. A tensor's size is checked before it is made or read
(``check_config_tensor_size``): the server would otherwise allocate whatever dims a config names."""

from __future__ import annotations

from pathlib import Path

from trt.server.core.datatypes import element_count, wire_to_numpy
from trt.server.core.errors import ModelConfigError
from trt.server.core.paths import relative_path_problem, shown

# The most one such tensor may take. Far above a real warm-up batch or state, it stops dims such as
# [ 100000, 100000 ] from being allocated (and, as random data, written) in the server's memory.
MAX_CONFIG_TENSOR_BYTES = 1 << 30


def check_config_tensor_size(what: str, shape: tuple[int, ...], datatype: str) -> None:
    """Refuse a tensor of ``shape`` and ``datatype`` (a wire name) over ``MAX_CONFIG_TENSOR_BYTES``;
    a BYTES element counts as the object reference numpy holds for it."""
    size = element_count(shape) * wire_to_numpy(datatype).itemsize
    if size > MAX_CONFIG_TENSOR_BYTES:
        raise ModelConfigError(
            f"{what}: shape {list(shape)} of {datatype} takes {size:,} bytes, more than a tensor "
            f"a config supplies may ({MAX_CONFIG_TENSOR_BYTES:,})"
        )


def read_data_file(model_dir: Path, folder_name: str, relative: str, what: str) -> bytes:
    reason = relative_path_problem(relative)
    if reason is not None:
        raise ModelConfigError(f"{what}: '{shown(relative)}' must be inside {folder_name}/ (found {reason})")
    path = model_dir / folder_name / relative
    if not path.is_file():
        raise ModelConfigError(f"{what}: no file {folder_name}/{relative}")
    return path.read_bytes()
