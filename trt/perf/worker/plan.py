"""The messages that cross into a worker process: its plan (once) and a load assignment per level."""

from __future__ import annotations

import random
from dataclasses import dataclass

from trt.perf.encoding import EncodedRequest, GrpcFramer, HttpFramer
from trt.perf.options import LoadKind, Protocol, SequenceOptions
from trt.perf.schedule import ScheduleSpec
from trt.perf.worker.sources import IdPool, RequestCycle, SequenceSource


@dataclass(frozen=True)
class WorkerPlan:
    index: int
    count: int
    protocol: Protocol
    host: str
    port: int
    infer_path: str
    streams: tuple[tuple[EncodedRequest, ...], ...]
    sequence: SequenceOptions | None  # None: not a sequence model
    lengths_from_data: bool = False
    async_mode: bool = True
    streaming: bool = False
    decoupled: bool = False
    timeout_s: float = 30.0
    max_threads: int = 16
    http_headers: tuple[tuple[str, str], ...] = ()
    seed: int = 0


@dataclass(frozen=True)
class LoadAssignment:
    """Closed loop: ``slots`` requests in flight; open loop: arrivals from ``schedule``."""

    kind: LoadKind
    slots: int = 0
    slot_offset: int = 0
    schedule: ScheduleSpec | None = None


class SourceFactory:
    """Builds each slot's request source; frames static requests once per worker."""

    def __init__(self, plan: WorkerPlan) -> None:
        self.plan = plan
        framer = (
            GrpcFramer()
            if plan.protocol is Protocol.GRPC
            else HttpFramer(plan.host, plan.port, plan.infer_path, plan.http_headers)
        )
        self._frame = framer.frame
        self._payloads = [framer.frame(r, None) for r in plan.streams[0]] if plan.sequence is None else []
        self._rng = random.Random(plan.seed * 7919 + plan.index)
        self.ids: IdPool | None = None
        if plan.sequence is not None:
            share = max(1, plan.sequence.id_count // plan.count)
            self.ids = IdPool(plan.sequence.id_start + plan.index * share, share)

    def source(self, slot: int) -> RequestCycle | SequenceSource:
        if self.plan.sequence is None:
            return RequestCycle(self._payloads, slot)
        assert self.ids is not None
        return SequenceSource(
            self.plan.streams,
            self._frame,
            self.ids,
            self.plan.sequence,
            self.plan.lengths_from_data,
            self._rng,
        )

    def release(self, source: RequestCycle | SequenceSource) -> None:
        """A slot stops: its sequence id (if any) is free again."""
        if isinstance(source, SequenceSource) and self.ids is not None and source.sequence_id:
            self.ids.release(source.sequence_id)
