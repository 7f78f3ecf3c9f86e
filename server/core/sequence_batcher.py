"""Triton's sequence batcher for tensor backends (``sequence_batching { ... }``): stateful models.

A request carries ``sequence_id`` (an integer or a string), ``sequence_start`` and ``sequence_end``.
A sequence is bound to one instance when it starts and its requests run there one at a time, in
the order they arrive. The server adds the control inputs the config names (START, END, READY with
their false/true values, CORRID with the id) and, for implicit ``state``, feeds each request the
state output of the one before it (zeros at the start). A sequence idle for longer than
``max_sequence_idle_microseconds`` (default 1 s) is released. A request for an unknown sequence
without the start flag is refused.

Simplified against Triton: requests of different sequences are not batched together, so the
``direct`` and ``oldest`` strategies behave alike here.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from protos import model_config_pb2
from server.backends.base import ModelInstance
from server.core.datatypes import config_to_wire, wire_to_numpy
from server.core.errors import InvalidInput
from server.core.instance_pool import InstancePool
from server.core.statistics import ModelStatistics
from server.core.timing import ExecutionTimes

Control = model_config_pb2.ModelSequenceBatching.Control
DEFAULT_IDLE_US = 1_000_000


@dataclass
class _Sequence:
    instance: ModelInstance
    state: dict[str, np.ndarray]
    last_used: float = field(default_factory=time.monotonic)
    order: asyncio.Lock = field(default_factory=asyncio.Lock)


def control_value(control: model_config_pb2.ModelSequenceBatching.Control, flag: bool) -> np.ndarray:
    index = 1 if flag else 0
    if control.int32_false_true:
        return np.array(control.int32_false_true[index], dtype=np.int32)
    if control.fp32_false_true:
        return np.array(control.fp32_false_true[index], dtype=np.float32)
    if control.bool_false_true:
        return np.array(control.bool_false_true[index], dtype=np.bool_)
    raise InvalidInput("a sequence control needs int32_false_true, fp32_false_true or bool_false_true")


class SequenceBatcher:
    def __init__(
        self,
        model_name: str,
        pool: InstancePool,
        instances: Sequence[ModelInstance],
        stats: ModelStatistics,
        config: model_config_pb2.ModelConfig,
    ) -> None:
        self._name = model_name
        self._pool = pool
        self._instances = list(instances)
        self._locks = {id(i): asyncio.Lock() for i in self._instances}
        self._next_instance = itertools.cycle(self._instances)
        self._stats = stats
        self._batching = config.max_batch_size > 0
        settings = config.sequence_batching
        self._idle_s = (settings.max_sequence_idle_microseconds or DEFAULT_IDLE_US) / 1e6
        self._controls = [(c.name, c.control[0]) for c in settings.control_input if c.control]
        self._states = list(settings.state)
        self._sequences: dict[int | str, _Sequence] = {}
        self._reaper: asyncio.Task[None] | None = None

    def _shaped(self, value: np.ndarray, batch: int) -> np.ndarray:
        shape = (batch, 1) if self._batching else (1,)
        return np.broadcast_to(value, shape).copy()

    def _initial_state(self) -> dict[str, np.ndarray]:
        state = {}
        for entry in self._states:
            dims = tuple(max(int(d), 1) for d in entry.dims)
            dtype = wire_to_numpy(config_to_wire(model_config_pb2.DataType.Name(entry.data_type)))
            state[entry.input_name] = np.zeros(((1,) if self._batching else ()) + dims, dtype=dtype)
        return state

    async def execute(
        self,
        feeds: Mapping[str, np.ndarray],
        output_names: Sequence[str],
        batch_size: int,
        sequence_id: int | str,
        start: bool,
        end: bool,
    ) -> tuple[dict[str, np.ndarray], ExecutionTimes]:
        if sequence_id in (0, "", None):
            raise InvalidInput(f"model '{self._name}' is a sequence model: each request needs a sequence_id")
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._release_idle())
        sequence = self._sequences.get(sequence_id)
        if start or sequence is None:
            if not start:
                raise InvalidInput(
                    f"inference request for sequence {sequence_id} to model '{self._name}' must specify "
                    "the START flag on the first request of the sequence"
                )
            sequence = self._sequences[sequence_id] = _Sequence(
                next(self._next_instance), self._initial_state()
            )
        queued = time.perf_counter_ns()
        async with sequence.order:
            batch = max(batch_size, 1)
            inputs = dict(feeds)
            for name, control in self._controls:
                if control.kind == Control.CONTROL_SEQUENCE_CORRID:
                    dtype = wire_to_numpy(config_to_wire(model_config_pb2.DataType.Name(control.data_type)))
                    value = np.array(sequence_id, dtype=dtype if dtype.kind != "O" else np.object_)
                else:
                    flag = {Control.CONTROL_SEQUENCE_START: start, Control.CONTROL_SEQUENCE_END: end}.get(
                        control.kind,
                        True,  # READY: this request is ready
                    )
                    value = control_value(control, flag)
                inputs[name] = self._shaped(value, batch)
            inputs.update(sequence.state)
            names = [
                *output_names,
                *(s.output_name for s in self._states if s.output_name not in output_names),
            ]
            lock = self._locks[id(sequence.instance)]
            await lock.acquire()
            started = time.perf_counter_ns()
            outputs, compute_ns = await self._pool.execute_on(sequence.instance, inputs, names, lock.release)
            for entry in self._states:
                sequence.state[entry.input_name] = outputs[entry.output_name]
            sequence.last_used = time.monotonic()
            if end:
                self._sequences.pop(sequence_id, None)
        self._stats.record_execution(batch, 0, compute_ns, 0)
        return {n: outputs[n] for n in output_names}, ExecutionTimes(started - queued, 0, compute_ns, 0)

    async def _release_idle(self) -> None:
        while True:
            await asyncio.sleep(max(self._idle_s / 2, 0.05))
            cutoff = time.monotonic() - self._idle_s
            for key, sequence in list(self._sequences.items()):
                if sequence.last_used < cutoff and not sequence.order.locked():
                    del self._sequences[key]

    def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
