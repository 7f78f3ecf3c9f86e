"""The tensors the sequence batcher adds to a stateful model's inputs, one row per batch slot.

``control_input`` entries become START / END / READY columns (each control's ``*_false_true`` pair
gives its values) and a CORRID column carrying the sequence's id in the control's ``data_type``.
``state`` entries become the implicit state inputs: zeros when a sequence starts (a variable
dimension counts as 1, as in Triton), afterwards the state output of the sequence's previous request.
A row that has no request in this execution (an idle ``direct`` slot) gets READY=false, START and
END false, CORRID 0 and a zero state, and its outputs are thrown away.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from protos import model_config_pb2
from server.core.datatypes import config_to_wire, wire_to_numpy
from server.core.errors import InvalidInput, ModelConfigError

Control = model_config_pb2.ModelSequenceBatching.Control
_U64 = (1 << 64) - 1
_FLAG_KINDS = (
    Control.CONTROL_SEQUENCE_START,
    Control.CONTROL_SEQUENCE_END,
    Control.CONTROL_SEQUENCE_READY,
)


def _dtype_of(data_type: int) -> np.dtype:
    return wire_to_numpy(config_to_wire(model_config_pb2.DataType.Name(data_type)))


def control_value(control: model_config_pb2.ModelSequenceBatching.Control, flag: bool) -> np.ndarray:
    index = 1 if flag else 0
    if control.int32_false_true:
        return np.array(control.int32_false_true[index], dtype=np.int32)
    if control.fp32_false_true:
        return np.array(control.fp32_false_true[index], dtype=np.float32)
    if control.bool_false_true:
        return np.array(control.bool_false_true[index], dtype=np.bool_)
    raise ModelConfigError("a sequence control needs int32_false_true, fp32_false_true or bool_false_true")


@dataclass(frozen=True, slots=True)
class Row:
    """What one batch row tells the model: its flags and its sequence's id (None: an idle slot)."""

    sequence_id: int | str | None
    start: bool = False
    end: bool = False


@dataclass(frozen=True, slots=True)
class _FlagControl:
    name: str
    kind: int
    false_value: np.ndarray
    true_value: np.ndarray


class SequenceControls:
    """Builds the control and initial state tensors of one model's ``sequence_batching``."""

    def __init__(self, config: model_config_pb2.ModelConfig) -> None:
        settings = config.sequence_batching
        self.batching = config.max_batch_size > 0
        self._flags: list[_FlagControl] = []
        self._corrids: list[tuple[str, np.dtype]] = []
        for entry in settings.control_input:
            for control in entry.control:
                if control.kind in _FLAG_KINDS:
                    self._flags.append(
                        _FlagControl(
                            entry.name,
                            control.kind,
                            control_value(control, False),
                            control_value(control, True),
                        )
                    )
                elif control.kind == Control.CONTROL_SEQUENCE_CORRID:
                    self._corrids.append((entry.name, _dtype_of(control.data_type)))
        self.states = list(settings.state)
        self.state_outputs = [s.output_name for s in self.states]

    def initial_state(self) -> dict[str, np.ndarray]:
        state = {}
        for entry in self.states:
            dims = tuple(max(int(d), 1) for d in entry.dims)
            state[entry.input_name] = np.zeros(
                ((1,) if self.batching else ()) + dims, _dtype_of(entry.data_type)
            )
        return state

    def check_id(self, sequence_id: int | str) -> None:
        """Refuse an id that the CORRID control's data type cannot carry (a string for UINT64...)."""
        for name, dtype in self._corrids:
            if dtype.kind != "O" and not isinstance(sequence_id, int):
                raise InvalidInput(
                    f"sequence id '{sequence_id}' is a string but control '{name}' carries "
                    f"{dtype.name} correlation ids; send an integer sequence_id"
                )

    def columns(self, rows: Sequence[Row]) -> dict[str, np.ndarray]:
        """The control inputs for ``rows``: shape [rows, 1] for a batching model, [1] otherwise."""
        shape = (len(rows), 1) if self.batching else (1,)
        columns: dict[str, np.ndarray] = {}
        for control in self._flags:
            if control.kind == Control.CONTROL_SEQUENCE_START:
                flags = [row.start for row in rows]
            elif control.kind == Control.CONTROL_SEQUENCE_END:
                flags = [row.end for row in rows]
            else:
                flags = [row.sequence_id is not None for row in rows]
            values = np.where(flags, control.true_value, control.false_value)
            columns[control.name] = values.astype(control.false_value.dtype, copy=False).reshape(shape)
        for name, dtype in self._corrids:
            if dtype.kind == "O":
                ids = [b"" if r.sequence_id is None else str(r.sequence_id).encode() for r in rows]
                columns[name] = np.array(ids, dtype=np.object_).reshape(shape)
            else:
                # 32-bit CORRID controls keep the low bits of the id, as Triton does.
                ids_int = [0 if r.sequence_id is None else int(r.sequence_id) & _U64 for r in rows]
                columns[name] = np.array(ids_int, dtype=np.uint64).astype(dtype).reshape(shape)
        return columns
