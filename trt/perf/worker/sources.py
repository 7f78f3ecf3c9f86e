"""What each concurrency slot (or open-loop lane) sends next: a cycle over pre-framed requests, or the
steps of a sequence with ``sequence_id``/``sequence_start``/``sequence_end`` as perf_analyzer sets them."""

from __future__ import annotations

import random
from collections.abc import Callable

from trt.perf.encoding import EncodedRequest, Parameters
from trt.perf.options import SequenceOptions

Framer = Callable[[EncodedRequest, Parameters | None], bytes]


class RequestCycle:
    """Round-robin over the requests, each slot starting at its own offset."""

    ended = False

    def __init__(self, payloads: list[bytes], offset: int) -> None:
        self._payloads = payloads
        self._index = offset % len(payloads)

    def next(self) -> bytes:
        payload = self._payloads[self._index]
        self._index = (self._index + 1) % len(self._payloads)
        return payload


class IdPool:
    """Sequence ids of one worker: ``start .. start+count-1`` in turn, never one still in use."""

    def __init__(self, start: int, count: int) -> None:
        self.start, self.count = start, max(1, count)
        self._next = 0
        self.in_use: set[int] = set()

    def acquire(self) -> int:
        for _ in range(self.count):
            candidate = self.start + self._next % self.count
            self._next += 1
            if candidate not in self.in_use:
                self.in_use.add(candidate)
                return candidate
        raise RuntimeError(f"all {self.count} sequence ids are in use: widen --sequence-id-range")

    def release(self, sequence_id: int) -> None:
        self.in_use.discard(sequence_id)


class SequenceSource:
    """One sequence after another: a fresh id, a length of ``length`` +- variation percent (or the
    length of a JSON data stream), start on the first request and end on the last."""

    def __init__(
        self,
        streams: tuple[tuple[EncodedRequest, ...], ...],
        frame: Framer,
        ids: IdPool,
        options: SequenceOptions,
        lengths_from_data: bool,
        rng: random.Random,
    ) -> None:
        self._streams, self._frame, self._ids = streams, frame, ids
        self._options, self._from_data, self._rng = options, lengths_from_data, rng
        self.sequence_id = 0
        self._remaining = 0
        self._step = 0
        self._stream: tuple[EncodedRequest, ...] = streams[0]
        self.ended = False

    def _length(self) -> int:
        if self._from_data and not self._options.length_given:
            return len(self._stream)
        base = self._options.length
        offset = int((2 * self._rng.random() - 1) * self._options.length_variation / 100 * base)
        return max(1, base + offset)

    def next(self) -> bytes:
        start = self._remaining == 0
        if start:
            if self.sequence_id:
                self._ids.release(self.sequence_id)
            self.sequence_id = self._ids.acquire()
            self._stream = self._streams[self._rng.randrange(len(self._streams))]
            self._remaining = self._length()
            self._step = 0
        self.ended = self._remaining == 1
        parameters: Parameters = {
            "sequence_id": self.sequence_id,
            "sequence_start": start,
            "sequence_end": self.ended,
        }
        request = self._stream[self._step % len(self._stream)]
        self._step += 1
        self._remaining -= 1
        return self._frame(request, parameters)

    def finish(self) -> bytes | None:
        """The request that ends the open sequence early (when the level changes), or None."""
        if self._remaining == 0:
            return None
        self._remaining = 1
        return self.next()
