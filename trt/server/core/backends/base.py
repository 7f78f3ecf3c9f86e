"""The interface every backend implements, and the data a backend is given.

A backend turns a model's files into running instances. It knows nothing about transports,
scheduling or statistics: the core hands an instance a dict of named numpy arrays and takes a dict
back, from a worker thread (``execute`` may block; release the GIL where the library allows).

A backend is a class with Triton's ``name`` (and ``platform``, ``default_filename``) and the three
methods of ``Backend``; ``create_instance`` returns a ``ModelInstance`` (tensors in, tensors out,
batched by the core) or a ``RequestLevelInstance`` (whole requests). It is registered under the
``trt.backends`` entry points, as a ``BackendEntry`` or as the class itself (see
``core.backends.registry``): that is how trt's own backends register too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from trt.protos import model_config_pb2
from trt.server.core.errors import ModelConfigError, ModelLoadError
from trt.server.core.paths import contained, shown

if TYPE_CHECKING:
    from trt.server.core.errors import ServerError
    from trt.server.core.extensions.custom_metrics import CustomMetricsRegistry
    from trt.server.core.extensions.tracing import Trace, Tracer
    from trt.server.core.scheduling.cpu_colocation import CpuColocation
    from trt.server.core.types import InferenceRequest, InferenceResponse, StreamItem


class HeldModel(Protocol):
    """The version of a model a request of an ensemble runs a step on: it takes the request's step
    requests until ``release``, even once unloaded or reloaded (as Triton's ensemble holds its
    steps' models for the request's lifetime)."""

    def infer(self, request: InferenceRequest) -> Awaitable[InferenceResponse]: ...

    def infer_stream(self, request: InferenceRequest) -> AsyncGenerator[StreamItem, None]: ...

    def release(self) -> None: ...


class ServerServices(Protocol):
    """What the server offers to backends that call back into it: BLS, custom metrics and model
    control from Python models."""

    custom_metrics: CustomMetricsRegistry
    colocation: CpuColocation  # Python model processes share the loop's CPU while the load is light
    tracer: Tracer
    event_loop: asyncio.AbstractEventLoop | None  # the loop serving requests, once started
    # time.monotonic() by which a stopping server must be gone (--exit-timeout-secs from the signal),
    # None while it serves: what a model's finalize() may still be given.
    stop_deadline: float | None

    def note_cut_short(self, what: str) -> None:
        """A stopping server's exit timeout cut ``what`` short (a model's process killed): it exits 1."""
        ...

    def model_ready(self, name: str, version: str = "") -> bool: ...

    def model_config(self, name: str, version: str = "") -> model_config_pb2.ModelConfig: ...

    async def load_model(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None: ...

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...

    async def infer(self, request: InferenceRequest) -> InferenceResponse: ...

    def infer_stream(self, request: InferenceRequest) -> AsyncGenerator[StreamItem, None]: ...

    def hold_model(self, name: str, version: str = "", namespace: str = "") -> HeldModel:
        """The version a request for ``name`` would run now (``namespace``'s model of that name
        preferred), held until the ``HeldModel`` is released."""
        ...


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """Where and how one instance of a model runs."""

    name: str  # Triton's "<group name>_<index>", shown in logs and to Python models
    kind: str  # "KIND_CPU" or "KIND_GPU"
    device_id: int  # GPU ordinal for KIND_GPU, 0 otherwise
    cpu_threads: int  # intra-op threads this instance may use without oversubscribing the cores
    services: ServerServices | None = field(default=None, compare=False)
    # The group's rate_limiter: resources (name, count) and priority, used with --rate-limit.
    resources: tuple[tuple[str, int], ...] = ()
    rate_priority: int = 0
    # ``passive: true`` in its group: loaded (and warmed up) like the others, but the scheduler
    # never hands it a request, as in Triton.
    passive: bool = False


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """The on-disk location of one version of one model."""

    model_name: str
    version: int
    model_dir: Path  # <repo>/<model>
    version_dir: Path  # <repo>/<model>/<version>
    namespace: str = ""  # the model's repository with --model-namespacing (``server.core.models.table``)

    def artifact(self, config: model_config_pb2.ModelConfig, default_filename: str) -> Path:
        """The model file in this version's folder; a name that leads out of it is refused (a config
        sent with a load request could otherwise point a backend at any file on the host)."""
        return self.inside(config.default_model_filename or default_filename, "default_model_filename")

    def inside(self, name: str, field: str) -> Path:
        """``name`` (a config value) as a path in the version folder, which it must not leave."""
        path = contained(self.version_dir, name)
        if path is None:
            raise ModelConfigError(
                f"{field} '{shown(name)}' leads outside the version folder {self.version_dir}; "
                "name a file inside it",
                field,
            )
        return path

    def require_artifact(self, config: model_config_pb2.ModelConfig, default_filename: str) -> Path:
        """The model file, which must exist (a folder is accepted where a backend takes one)."""
        path = self.artifact(config, default_filename)
        if not path.exists():
            raise ModelLoadError(f"model file not found: {path}{self._misnamed_hint(path)}")
        return path

    def _misnamed_hint(self, expected: Path) -> str:
        """Name the file that is there instead, and the two ways to make it the model file."""
        try:
            present = sorted(p.name for p in self.version_dir.iterdir() if not p.name.startswith("."))
        except OSError:
            return f"; version folder {self.version_dir} cannot be read"
        if not present:
            return f"; version {self.version} is empty: put {expected.name} in {self.version_dir}"
        alike = [name for name in present if Path(name).suffix == expected.suffix]
        if alike:
            return (
                f"; found {alike[0]}: rename it to {expected.name} or set "
                f'default_model_filename: "{alike[0]}" in config.pbtxt'
            )
        return f"; version {self.version} holds {', '.join(present[:5])}"


class ModelInstance(Protocol):
    """One loaded copy of a model. ``execute`` may block; the core runs it in a worker thread."""

    def execute(
        self, inputs: Mapping[str, np.ndarray], output_names: Sequence[str]
    ) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


# BackendRequest.flags, as Triton's TRITONSERVER_REQUEST_FLAG_SEQUENCE_START / _END.
SEQUENCE_START, SEQUENCE_END = 1, 2


@dataclass(slots=True)
class BackendRequest:
    """One request as the schedulers and backends see it: its input arrays, the outputs asked for, and
    its metadata (a request-level backend such as a Python model sees it whole)."""

    id: str
    inputs: dict[str, np.ndarray]
    requested_outputs: tuple[str, ...]
    parameters: dict[str, Any]
    correlation_id: int | str = 0
    flags: int = 0
    # The request's ``priority`` level and ``timeout`` (microseconds), for the schedulers that use them.
    priority: int = 0
    timeout_us: int = 0
    # Decoupled models: called with each response as the model sends it, and final=True once it is
    # done (with None when the final flag came without a response). None: collect one response.
    on_response: Callable[[BackendResponse | None, bool], None] | None = None
    # The request's trace, when it is one being traced (an ensemble traces its steps under it).
    trace: Trace | None = None
    # Set once whoever asked stopped waiting (a gRPC client cancelled, a stream closed): a model that
    # asks (``request.is_cancelled()``) can stop early; its answer would go nowhere.
    cancelled: bool = False
    # Set by an instance that holds the request before it starts it (an execution slot): told at
    # ``cancel()``, so that a request cancelled while it waits is never executed.
    on_cancel: Callable[[], object] | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self.on_cancel is not None:
            self.on_cancel()


@dataclass(slots=True)
class BackendResponse:
    outputs: dict[str, np.ndarray]
    parameters: dict[str, Any] = field(default_factory=dict)
    error: ServerError | None = None
    # The model released the request with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE: not its answer;
    # it is to run again (an iterative sequence's scheduler does that, any other refuses it).
    rescheduled: bool = False


class RequestLevelInstance(Protocol):
    """An instance that takes whole requests (a list of them per execution) and answers each one,
    possibly with an error for some and outputs for others. ``execute_requests`` runs on the event
    loop and must not block it.

    An instance may also offer ``start_requests(requests, done)``, which starts an execution and
    returns at once, calling ``done(responses, None)`` or ``done(None, error)`` on the loop when it
    ends; the request scheduler prefers it, as it saves a task and two loop passes per execution
    (the Python backend offers it). ``done`` also gets when the execution really started (it may
    have waited behind another), or None.

    ``execution_slots`` (default 1), where present, is how many executions the instance accepts at
    once: it runs them one after another, in order."""

    async def execute_requests(self, requests: list[BackendRequest]) -> list[BackendResponse]: ...

    async def aclose(self) -> None: ...

    def close(self) -> None: ...


class Backend(Protocol):
    name: ClassVar[str]  # Triton's backend name, e.g. "onnxruntime"
    platform: ClassVar[str]  # Triton's platform name for this backend, "" if it has none
    default_filename: ClassVar[str]

    def auto_complete(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, default_max_batch_size: int
    ) -> None:
        """Fill what the config leaves out (inputs, outputs, max_batch_size) from the model itself."""
        ...

    def validate(self, config: model_config_pb2.ModelConfig, files: ModelFiles) -> None:
        """Raise ModelConfigError where the config disagrees with the model files."""
        ...

    def create_instance(
        self, config: model_config_pb2.ModelConfig, files: ModelFiles, spec: InstanceSpec
    ) -> ModelInstance | RequestLevelInstance: ...


def gpu_unavailable_reason(backend: Backend) -> str | None:
    """Why this installation of a GPU-capable backend cannot run on a GPU (a CPU build of its library),
    or None when it can. A backend tells by an optional ``gpu_unavailable_reason()`` method; one without
    it is taken at its word."""
    probe = getattr(backend, "gpu_unavailable_reason", None)
    reason: str | None = probe() if probe is not None else None
    return reason
