"""Triton's request tracing (``triton`` mode): one request in every ``rate`` is traced, and written
to a JSON trace file that Triton's ``trace_summary.py`` reads: with level ``TIMESTAMPS`` its
timestamps, with ``TENSORS`` the tensors the model was given (``TENSOR_QUEUE_INPUT``) and gave back
(``TENSOR_BACKEND_OUTPUT``), their values as comma-separated text, as Triton writes them.

Settings are global, with per-model overrides, changeable at run time through the trace extension
(HTTP ``/v2[/models/{m}]/trace/setting``, gRPC ``TraceSetting``); values travel as strings, as
Triton sends them. The transports decide which requests to trace (``start``) and stamp their own
receive and send times; the core stamps the request, queue and compute times.

The trace file: with ``log_frequency`` 0 every trace goes to ``trace_file`` when the server stops;
with N, each N traces go to ``trace_file.<k>``, k = 0, 1, ... (the rest too, when the server stops).
The file is set on the command line only: a path from the network is a place to write to.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from trt.server.core.errors import InvalidArgument, Unsupported, quoted

LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
_KEYS = ("trace_level", "trace_rate", "trace_count", "log_frequency", "trace_file", "trace_mode")


@dataclass(frozen=True)
class TraceSettings:
    level: tuple[str, ...] = ("OFF",)
    rate: int = 1000
    count: int = -1  # traces left to take; -1 = no limit
    log_frequency: int = 0
    file: str = ""

    def as_strings(self) -> dict[str, Any]:
        return {
            "trace_level": list(self.level),
            "trace_rate": str(self.rate),
            "trace_count": str(self.count),
            "log_frequency": str(self.log_frequency),
            "trace_file": self.file,
            "trace_mode": "triton",
        }

    @property
    def on(self) -> bool:
        traced = "TIMESTAMPS" in self.level or "TENSORS" in self.level
        return traced and self.count != 0 and bool(self.file)


@dataclass(frozen=True, slots=True)
class TransportPoints:
    """A transport's names for its four trace points: when the request was read (start, end) and
    when the reply was sent (start, end), e.g. HTTP_RECV_START ... HTTP_SEND_END."""

    receive_start: str
    receive_end: str
    send_start: str
    send_end: str


@dataclass
class Trace:
    """One traced request: what it was, the timestamps (name, ns on the monotonic clock) and, at
    level TENSORS, its tensors."""

    id: int
    model_name: str
    model_version: str
    request_id: str
    timestamps: list[tuple[str, int]] = field(default_factory=list)
    parent_id: int | None = None  # an ensemble step or a BLS call: the trace of the request it serves
    with_timestamps: bool = True
    with_tensors: bool = False
    tensors: list[dict[str, Any]] = field(default_factory=list)

    def stamp(self, name: str, ns: int) -> None:
        self.timestamps.append((name, ns))

    def tensor(self, activity: str, name: str, datatype: str, data: np.ndarray) -> None:
        """Record a tensor now (as text: its buffer may be reused once the request moves on)."""
        self.tensors.append({
            "id": self.id,
            "activity": activity,
            "tensor": {
                "name": name,
                "data": tensor_text(data, datatype),
                "shape": ",".join(str(dim) for dim in data.shape),
                "dtype": datatype,
            },
        })  # fmt: skip

    def as_json(self) -> list[dict[str, Any]]:
        about: dict[str, Any] = {"id": self.id, "model_name": self.model_name}
        if self.model_version.isascii() and self.model_version.isdigit():
            about["model_version"] = int(self.model_version)
        if self.request_id:
            about["request_id"] = self.request_id
        if self.parent_id is not None:
            about["parent_id"] = self.parent_id
        entries = [about]
        if self.with_timestamps:
            ordered = sorted(self.timestamps, key=lambda stamp: stamp[1])
            entries.append({"id": self.id, "timestamps": [{"name": n, "ns": ns} for n, ns in ordered]})
        return entries + self.tensors


def tensor_text(data: np.ndarray, datatype: str) -> str:
    """A tensor's values as Triton's trace file gives them: comma-separated, row-major; floats with
    six significant digits, BOOL as 1/0, BYTES each in double quotes."""
    flat = data.reshape(-1)
    if datatype == "BYTES":
        return ",".join(
            '"' + (item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)) + '"'
            for item in flat
        )
    if datatype == "BOOL":
        return ",".join("1" if item else "0" for item in flat.tolist())
    if datatype in ("FP16", "FP32", "FP64"):
        return ",".join(format(item, "g") for item in flat.tolist())
    return ",".join(str(item) for item in flat.tolist())


class Tracer:
    def __init__(self, settings: TraceSettings | None = None) -> None:
        self._global = settings or TraceSettings()
        self._models: dict[str, dict[str, Any]] = {}  # per-model overrides, by setting key
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}  # requests counted toward the sampling rate, by settings owner
        self._next_id = 1
        self._pending: dict[str, list[Trace]] = {}  # finished traces not yet written, by file
        self._file_index: dict[str, int] = {}
        # Read by the transports on every request before anything else: one attribute, no call.
        self.active = self._global.on

    def _refresh(self) -> None:
        self.active = self._global.on or any(self._effective_locked(m).on for m in self._models)

    # -- settings ------------------------------------------------------------------------------

    def settings(self, model: str = "") -> dict[str, Any]:
        return self._effective(model).as_strings()

    def update(self, model: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply a settings request (values as strings, a level as a list; None clears a model's
        override, or resets a global setting); answers the settings now in force."""
        with self._lock:
            current = self._global if not model else self._effective_locked(model)
            updated = current
            for key, value in changes.items():
                if key not in _KEYS:
                    raise InvalidArgument(f"unknown trace setting '{key}'")
                if key == "trace_file" and value is not None and value != current.file:
                    # A file name from the network is a place to write to: only the command line sets it.
                    raise Unsupported("trace_file can't be changed through the trace API; use --trace-config")
                if value is None:
                    continue
                updated = with_setting(updated, key, value)
            if model:
                override = self._models.setdefault(model, {})
                for key, value in changes.items():
                    if value is None:
                        override.pop(key, None)
                    else:
                        override[key] = value
            else:
                for key, value in changes.items():
                    if value is None and key != "trace_file":
                        updated = with_setting(updated, key, TraceSettings().as_strings()[key])
                self._global = updated
            self._refresh()
            return (self._effective_locked(model) if model else self._global).as_strings()

    def _effective(self, model: str) -> TraceSettings:
        with self._lock:
            return self._effective_locked(model)

    def _effective_locked(self, model: str) -> TraceSettings:
        settings = self._global
        for key, value in self._models.get(model, {}).items():
            settings = with_setting(settings, key, value)
        return settings

    # -- traces --------------------------------------------------------------------------------

    def start(self, model_name: str, model_version: str, request_id: str) -> Trace | None:
        """A trace for this request if it is the one in ``rate`` to take, else None."""
        with self._lock:
            owner = model_name if model_name in self._models else ""
            settings = self._effective_locked(model_name)
            if not settings.on:
                return None
            seen = self._seen.get(owner, 0) + 1
            self._seen[owner] = seen
            if seen % settings.rate:
                return None
            if settings.count > 0:
                self._count_one(owner, settings.count - 1)
                self._refresh()
            trace = Trace(
                self._next_id,
                model_name,
                model_version,
                request_id,
                with_timestamps="TIMESTAMPS" in settings.level,
                with_tensors="TENSORS" in settings.level,
            )
            self._next_id += 1
            return trace

    def child(self, parent: Trace, model_name: str, model_version: str, request_id: str) -> Trace:
        """The trace of a request made on behalf of a traced one (an ensemble's step, a BLS call):
        taken with it, whatever the rate and count, at its levels, and written beside it."""
        with self._lock:
            trace = Trace(
                self._next_id,
                model_name,
                model_version,
                request_id,
                parent_id=parent.id,
                with_timestamps=parent.with_timestamps,
                with_tensors=parent.with_tensors,
            )
            self._next_id += 1
            return trace

    def finish(self, trace: Trace) -> None:
        with self._lock:
            settings = self._effective_locked(trace.model_name)
            pending = self._pending.setdefault(settings.file, [])
            pending.append(trace)
            if settings.log_frequency and len(pending) >= settings.log_frequency:
                self._write(settings.file, pending, numbered=True)
                pending.clear()

    def flush(self) -> None:
        """Write every trace not yet written (the server is stopping)."""
        with self._lock:
            self._write_pending()

    def _count_one(self, owner: str, left: int) -> None:
        if owner:
            self._models[owner]["trace_count"] = str(left)
        else:
            self._global = replace(self._global, count=left)

    def _write_pending(self) -> None:
        for file, traces in self._pending.items():
            if traces:
                numbered = file in self._file_index or self._global.log_frequency > 0
                self._write(file, traces, numbered)
                traces.clear()

    def _write(self, file: str, traces: list[Trace], numbered: bool) -> None:
        path = file
        if numbered:
            index = self._file_index.get(file, 0)
            self._file_index[file] = index + 1
            path = f"{file}.{index}"
        entries = [entry for trace in traces for entry in trace.as_json()]
        try:
            with open(path, "w", encoding="utf-8") as out:
                json.dump(entries, out)
        except OSError:
            pass  # tracing must not take requests down; the file's folder may be gone


def with_setting(settings: TraceSettings, key: str, value: Any) -> TraceSettings:
    """``settings`` with one setting changed, checked (the trace extension's names: ``trace_level``,
    ``trace_rate``, ``trace_count``, ``log_frequency``, ``trace_file``, ``trace_mode``)."""
    if key == "trace_level":
        levels = tuple(value) if isinstance(value, list | tuple) else (value,)
        for level in levels:
            if level not in LEVELS:
                raise InvalidArgument(f"trace_level must be OFF, TIMESTAMPS or TENSORS, got {quoted(level)}")
        return replace(settings, level=levels or ("OFF",))
    if key == "trace_mode":
        if not isinstance(value, str):
            raise InvalidArgument(f"trace_mode must be a string, got {quoted(value)}")
        if value != "triton":
            raise Unsupported(f"trace mode {quoted(value)} is not supported; use triton")
        return settings
    if key == "trace_file":
        if not isinstance(value, str):
            raise InvalidArgument("trace_file must be a string")
        return replace(settings, file=value)
    number = _integer(key, value)
    if key == "trace_rate":
        if number < 1:
            raise InvalidArgument("trace_rate must be at least 1")
        return replace(settings, rate=number)
    if key == "trace_count":
        if number < -1:
            raise InvalidArgument("trace_count must be -1 (no limit) or more")
        return replace(settings, count=number)
    if number < 0:
        raise InvalidArgument("log_frequency must be 0 or more")
    return replace(settings, log_frequency=number)


def _integer(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise InvalidArgument(f"{key} must be an integer")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{key} must be an integer, got {quoted(value)}") from None
