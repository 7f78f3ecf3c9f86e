"""The tensors the sequence batcher adds to a stateful model's inputs, one row per batch slot.

``control_input`` entries become START / END / READY columns (each control's ``*_false_true`` pair
gives its values) and a CORRID column carrying the sequence's id in the control's ``data_type``.
``state`` entries become the implicit state inputs: when a sequence starts, the state's
``initial_state`` (``zero_data``, or ``data_file`` read once at load from the model's
``initial_state/`` folder) or else zeros (a variable dimension counting as 1, as in Triton);
afterwards the state output of the sequence's previous request.
A row that has no request in this execution (an idle ``direct`` slot) gets READY=false, START and
END false, CORRID 0 and a zero state, and its outputs are thrown away.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trt.protos import model_config_pb2
from trt.server.core.datatypes import (
    FIXED_SIZE_DTYPES,
    config_to_wire,
    element_count,
    numpy_to_wire,
    tensor_from_bytes,
    wire_to_numpy,
)
from trt.server.core.errors import InvalidInput, ModelConfigError, ServerError, Unavailable, request_label
from trt.server.core.models.data_files import check_config_tensor_size, read_data_file

Control = model_config_pb2.ModelSequenceBatching.Control
# max_sequence_idle_microseconds when a config leaves it 0 (Triton's SEQUENCE_IDLE_DEFAULT_MICROSECONDS)
DEFAULT_IDLE_US = 1_000_000
_U64 = (1 << 64) - 1
_FLAG_KINDS = (
    Control.CONTROL_SEQUENCE_START,
    Control.CONTROL_SEQUENCE_END,
    Control.CONTROL_SEQUENCE_READY,
)


def _dtype_of(data_type: int) -> np.dtype:
    return wire_to_numpy(config_to_wire(model_config_pb2.DataType.Name(data_type)))


INITIAL_STATE_FOLDER = "initial_state"


def _initial_value(state: model_config_pb2.ModelSequenceBatching.State, model_dir: Path | None) -> np.ndarray:
    """One state's value when a sequence starts (without the batch dimension)."""
    what = f"state '{state.input_name}'"
    if not state.initial_state:
        shape = tuple(max(int(d), 1) for d in state.dims)
        zeros_type = config_to_wire(model_config_pb2.DataType.Name(state.data_type))
        check_config_tensor_size(what, shape, zeros_type)
        return np.zeros(shape, wire_to_numpy(zeros_type))
    if len(state.initial_state) > 1:
        raise ModelConfigError(f"{what} has {len(state.initial_state)} initial_state entries; one is allowed")
    initial = state.initial_state[0]
    shape = tuple(int(d) for d in initial.dims)
    if any(d < 0 for d in shape):
        raise ModelConfigError(f"{what}: initial_state dims must be fixed, got {list(initial.dims)}")
    data_type = initial.data_type or state.data_type
    if data_type != state.data_type:
        raise ModelConfigError(
            f"{what}: initial_state data_type {model_config_pb2.DataType.Name(data_type)} differs from "
            f"the state's {model_config_pb2.DataType.Name(state.data_type)}"
        )
    datatype = config_to_wire(model_config_pb2.DataType.Name(data_type))
    check_config_tensor_size(f"{what}: initial_state", shape, datatype)
    which = initial.WhichOneof("state_data")
    if which == "data_file":
        if model_dir is None:
            raise ModelConfigError(f"{what}: initial_state data_file needs the model's directory")
        raw = read_data_file(
            model_dir, INITIAL_STATE_FOLDER, initial.data_file, f"{what}: initial_state data_file"
        )
        fixed = FIXED_SIZE_DTYPES.get(datatype)  # None for BYTES: tensor_from_bytes checks its elements
        if fixed is not None and len(raw) != element_count(shape) * fixed.itemsize:
            raise ModelConfigError(
                f"{what}: initial_state data_file {initial.data_file} has {len(raw)} bytes; dims "
                f"{list(shape)} of {datatype} need {element_count(shape) * fixed.itemsize}"
            )
        try:
            value = tensor_from_bytes(raw, datatype, shape, state.input_name)
        except ServerError as exc:  # BYTES elements that do not parse
            raise ModelConfigError(
                f"{what}: initial_state data_file {initial.data_file}: {exc.message}"
            ) from None
    elif which == "zero_data":
        if datatype == "BYTES":
            value = np.full(shape, b"", dtype=np.object_)
        else:
            value = np.zeros(element_count(shape), wire_to_numpy(datatype)).reshape(shape)
    else:
        raise ModelConfigError(f"{what}: initial_state needs zero_data or data_file")
    value.flags.writeable = False  # shared by every sequence that starts
    return value


def initial_state_values(
    config: model_config_pb2.ModelConfig, model_dir: Path | None
) -> dict[str, np.ndarray]:
    """Each state input's value when a sequence starts, by input name (without the batch dimension)."""
    values = {}
    for index, state in enumerate(config.sequence_batching.state):
        try:
            values[state.input_name] = _initial_value(state, model_dir)
        except ModelConfigError as exc:
            raise ModelConfigError(exc.message, field=f"sequence_batching.state[{index}]") from None
    return values


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

    def __init__(self, config: model_config_pb2.ModelConfig, model_dir: Path | None = None) -> None:
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
        self._initial = {
            name: value[None] if self.batching else value
            for name, value in initial_state_values(config, model_dir).items()
        }

    def initial_state(self) -> dict[str, np.ndarray]:
        return dict(self._initial)

    def check_id(self, sequence_id: int | str, model: str, request_id: str = "") -> None:
        """Refuse a string id where the CORRID control carries numbers, in current Triton's words (core
        ``ValidateCorrelationId``; 2.51 took it). A number for a STRING control is carried as its text,
        as 2.51 carries it (current Triton refuses that too)."""
        if not isinstance(sequence_id, str):
            return
        for name, dtype in self._corrids:
            if dtype.kind != "O":
                raise InvalidInput(
                    f"{request_label(request_id)}sequence batching control '{name}' data-type is 'BYTES', "
                    f"but model '{model}' expects '{numpy_to_wire(dtype)}'"
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


class IterativeIds:
    """Sequence ids for iterative requests (``iterative_sequence: true``) that came without one: a
    counter from 1, as Triton's, that skips the ids of sequences still open (a client's own)."""

    def __init__(self) -> None:
        self._next = 1

    def take(self, open_ids: Container[int | str]) -> int:
        while self._next in open_ids:
            self._next += 1
        self._next += 1
        return self._next - 1


def slots_per_instance(config: model_config_pb2.ModelConfig) -> int:
    """Sequence slots of each instance, as Triton's sequence batcher has them: ``max_batch_size`` (one
    when the model does not batch) for ``direct``, ``max_candidate_sequences`` for ``oldest``."""
    settings = config.sequence_batching
    if settings.WhichOneof("strategy_choice") == "oldest" and settings.oldest.max_candidate_sequences:
        return settings.oldest.max_candidate_sequences
    return max(config.max_batch_size, 1)


def backlog_timeout() -> Unavailable:
    """What each request of a sequence dropped from the backlog gets: its ``timeout`` ran out before
    the sequence found a slot (Triton's sequence batcher's words)."""
    return Unavailable("timeout of the corresponding sequence has been expired")


def missing_sequence_id(model: str) -> InvalidInput:
    """A sequence model's request with no id, 0 or "" (Triton's words, its sequence_utils.h)."""
    return InvalidInput(
        f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
    )


def batched_sequence_request(model: str) -> InvalidInput:
    """A request of more than one row to a sequence model (Triton's words): a sequence is one row."""
    return InvalidInput(
        f"inference request to model '{model}' must specify batch-size 1 due to requirements of sequence "
        "batcher"
    )
