"""The core's one entry point for transports: ``InferenceServer``.

Every operation a client can ask for over HTTP or gRPC is a method here, taking and returning the
protocol-neutral types of ``server.core.types`` (or the ``ModelConfig`` proto, which is the config's
own schema). Tests and the analyzer can drive it without sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from trt import __version__
from trt.protos import model_config_pb2
from trt.server.core.datatypes import set_max_bytes_elements
from trt.server.core.errors import (
    AlreadyExists,
    DecoupledModelNeedsStream,
    InvalidArgument,
    ModelConfigError,
    ModelLoadError,
    UnsafePath,
)
from trt.server.core.extensions.custom_metrics import CustomMetricsRegistry
from trt.server.core.extensions.log_settings import LogSettings
from trt.server.core.extensions.shared_memory import SharedMemoryRegistry
from trt.server.core.extensions.statistics import ModelStatistics
from trt.server.core.extensions.tracing import Trace, Tracer, TransportPoints
from trt.server.core.models.config import config_from_json, read_config_file
from trt.server.core.models.config_paths import check_config_paths
from trt.server.core.models.lifecycle import ModelManager
from trt.server.core.models.load_failures import poll_failure
from trt.server.core.models.pushed_models import PushedModels, check_model_name
from trt.server.core.models.table import parse_version
from trt.server.core.models.version import ModelVersion
from trt.server.core.options import CoreOptions, ModelControlMode
from trt.server.core.scheduling.cpu_colocation import CpuColocation
from trt.server.core.scheduling.queued_bytes import QueuedBytes, request_bytes
from trt.server.core.types import (
    TRITON_CONTROL_PARAMETERS,
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    RepositoryIndexEntry,
    ServerMetadata,
    StreamItem,
    TensorMetadata,
)

logger = logging.getLogger("trt.server")

Reply = TypeVar("Reply")

# Protocol extensions this server implements, in Triton's order.
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)


class StartupError(Exception):
    """Start-up failed and --exit-on-error says to stop."""


class InferenceServer:
    def __init__(self, options: CoreOptions) -> None:
        self.options = options
        self.models = ModelManager(options)
        self.models.services = self
        # Shared by both transports, so a change over HTTP shows over gRPC and the other way round.
        # What the logging API reports; `trt serve` applied these settings before the server existed.
        self.log_settings = LogSettings(options.log)
        self.tracer = Tracer(options.trace)
        self.shared_memory = SharedMemoryRegistry(options.allow_client_shm)
        # Bytes held by requests taken and not yet answered (--max-queued-bytes); HTTP counts its
        # bodies here too while they arrive.
        self.queued_bytes = QueuedBytes(options.max_queued_bytes)
        set_max_bytes_elements(options.max_bytes_elements)  # process-wide: both codecs decode through it
        self.custom_metrics = CustomMetricsRegistry()  # what models define (pb_utils.MetricFamily)
        self.colocation = CpuColocation(enabled=options.cpu_colocation)
        # Python models' initialize() runs on loader threads; its model-control calls come here.
        self.event_loop: asyncio.AbstractEventLoop | None = None
        self.pushed = PushedModels()
        self.stop_deadline: float | None = None  # set by stop()
        # What the stop had to cut short at the exit timeout (a model's process killed): the server
        # then exits 1, as tritonserver does when its timeout expires with work unfinished.
        self.cut_short: list[str] = []
        self._live = False
        self._shutting_down = False

    async def start(self) -> dict[str, str]:
        """Load the start-up models; with --exit-on-error, any failure stops the server."""
        self.event_loop = asyncio.get_running_loop()
        try:
            failures = await self.models.start()
        except ModelLoadError as exc:  # the repository itself is unreadable: nothing can be served
            raise StartupError(exc.message) from None
        if failures and self.options.exit_on_error:
            raise StartupError(
                "failed to load all models: "
                + "; ".join(f"{name}: {reason}" for name, reason in sorted(failures.items()))
            )
        self._live = True
        return failures

    async def stop(self, deadline: float | None = None) -> None:
        """Release every model. ``deadline`` (``time.monotonic()``): when the process must be gone; a
        Python model's ``finalize()`` gets what is left of it (at least a second), not its usual grace."""
        self._shutting_down = True
        self.stop_deadline = deadline
        await self.models.stop()
        self.colocation.stop()
        self.shared_memory.close()
        self.pushed.close()
        self.tracer.flush()

    def note_cut_short(self, what: str) -> None:
        self.cut_short.append(what)

    def requests_in_flight(self) -> int:
        return self.models.table.requests_in_flight()

    # -- health and metadata ------------------------------------------------------------------

    def is_live(self) -> bool:
        return self._live and not self._shutting_down

    def is_ready(self) -> bool:
        if not self.is_live():
            return False
        return self.models.table.all_ready() if self.options.strict_readiness else True

    def metadata(self) -> ServerMetadata:
        return ServerMetadata(self.options.server_id, __version__, EXTENSIONS)

    def model_ready(self, name: str, version: str = "") -> bool:
        return self.models.table.is_serving(name, version)

    def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        model = self.models.table.resolve(name, version)
        entry = self.models.table.named(name)
        versions = tuple(str(v) for v in sorted(entry.versions)) if entry else (model.version_str,)
        signature = model.signature
        return ModelMetadata(
            name=name,
            versions=versions,
            platform=model.config.platform or model.config.backend,
            inputs=tuple(TensorMetadata(s.name, s.datatype, s.shape) for s in signature.inputs.values()),
            outputs=tuple(TensorMetadata(s.name, s.datatype, s.shape) for s in signature.outputs.values()),
        )

    def model_config(self, name: str, version: str = "") -> model_config_pb2.ModelConfig:
        return self.models.table.resolve(name, version).config

    def check_trace_model(self, name: str) -> None:
        """A model's own trace settings are read and set only while it is ready: else INVALID_ARG in
        Triton's words (its trace handlers, HTTP and gRPC, and its tests, which match on them)."""
        if not self.model_ready(name):
            raise InvalidArgument(f"Request for unknown model : {name}")

    # -- inference ----------------------------------------------------------------------------

    def model(self, name: str, version: str = "") -> ModelVersion:
        return self.models.table.resolve(name, version)

    def infer(self, request: InferenceRequest) -> Coroutine[Any, Any, InferenceResponse]:
        """Run ``request``; await the result. The version is picked now (an unknown model, or a bad
        parameter, raises here) and the request runs in ``_infer_on``'s coroutine: no layer of its own."""
        if request.parameters:  # most requests have none: no call to check them
            _check_reserved_keys(request.parameters)
        model = self.models.table.resolve(request.model_name, request.model_version, request.model_namespace)
        return self._infer_on(model, request)

    def _model_for(self, request: InferenceRequest) -> ModelVersion:
        """The version that serves ``request``, picked once (canary routing picks on each call)."""
        _check_reserved_keys(request.parameters)
        return self.models.table.resolve(request.model_name, request.model_version, request.model_namespace)

    async def _infer_on(self, model: ModelVersion, request: InferenceRequest) -> InferenceResponse:
        if request.raw_input is not None:
            request.inputs = [model.signature.raw_input(request.raw_input, request.id)]
            request.raw_input = None
        if model.decoupled:
            raise DecoupledModelNeedsStream(
                f"model '{model.name}' uses the decoupled transaction policy (zero or many responses per "
                "request): this end point doesn't support models with decoupled transaction policy; "
                "use gRPC ModelStreamInfer",
                model.name,
            )
        uses_shm_inputs, uses_shm_outputs = _shared_memory_use(request)
        if uses_shm_inputs:
            await self.shared_memory.resolve_inputs(request)
        if uses_shm_outputs:
            self.shared_memory.check_outputs(request)
        held = request_bytes(request)
        self.queued_bytes.admit(held)
        try:
            response = await model.infer(request)
        finally:
            self.queued_bytes.release(held)
        if uses_shm_outputs:
            await self.shared_memory.write_outputs(request, response)
        return response

    async def infer_traced(
        self,
        request: InferenceRequest,
        trace: Trace,
        points: TransportPoints,
        received: tuple[int, int],
        encode: Callable[[InferenceResponse], Reply],
    ) -> tuple[Reply, Callable[[], None]]:
        """``infer`` for a request being traced, as every transport traces one: its receive points
        (``received``: start and end, ns), the core's own points, the reply ``encode`` made from the
        response and the send start. Returns the reply and what the transport calls once the reply
        is sent (the send end; the trace is then complete). A failed request is traced as far as it
        went."""
        trace.stamp(points.receive_start, received[0])
        trace.stamp(points.receive_end, received[1])
        request.trace = trace
        tracer = self.tracer
        try:
            reply = encode(await self.infer(request))
        except BaseException:
            tracer.finish(trace)
            raise
        trace.stamp(points.send_start, time.perf_counter_ns())

        def sent() -> None:
            trace.stamp(points.send_end, time.perf_counter_ns())
            tracer.finish(trace)

        return reply, sent

    def infer_stream(self, request: InferenceRequest) -> AsyncGenerator[StreamItem, None]:
        """Every answer to ``request``: one for ordinary models, as many as a decoupled model sends."""
        return self._stream_on(None, request)

    def hold_model(self, name: str, version: str = "", namespace: str = "") -> HeldVersion:
        return HeldVersion(self, self.models.table.resolve(name, version, namespace))

    async def _stream_on(
        self, model: ModelVersion | None, request: InferenceRequest
    ) -> AsyncGenerator[StreamItem, None]:
        """``infer_stream`` on ``model`` (None: the one the request names, picked as it starts)."""
        if model is None:
            model = self._model_for(request)
        if not model.decoupled:
            yield StreamItem(await self._infer_on(model, request), None, True)
            return
        if any(tensor.data is None for tensor in request.inputs):
            await self.shared_memory.resolve_inputs(request)
        held = request_bytes(request)
        self.queued_bytes.admit(held)
        try:
            async with contextlib.aclosing(model.infer_decoupled(request, self.queued_bytes)) as items:
                async for item in items:
                    yield item
        finally:
            self.queued_bytes.release(held)

    # -- repository ---------------------------------------------------------------------------

    def repository_index(self, ready_only: bool = False) -> list[RepositoryIndexEntry]:
        return self.models.index(ready_only)

    async def load_model(
        self, name: str, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        self.models.require_explicit_mode()
        check_model_name(name)
        if files and config_json is None:
            raise InvalidArgument(
                f"failed to load '{name}': file overrides need a 'config' parameter as well"
            )
        override = None
        if config_json is not None:
            try:
                override = config_from_json(config_json)
            except ModelLoadError as exc:
                raise ModelLoadError(poll_failure(name, exc.message)) from None
            try:
                check_config_paths(override, from_client=True)
            except ModelConfigError as exc:
                raise UnsafePath(poll_failure(name, exc.message)) from None
        folder = await self.pushed.stage(name, files) if files else None
        if folder is None:
            await self.models.refresh_repository()  # as Triton, a load reads the repository anew
        try:
            await self.models.load(name, override, folder)
        except BaseException:
            if folder is not None:
                self.pushed.discard(folder)
            raise
        self._let_go_of_push(name, folder)

    async def load_model_folder(self, name: str, folder: Path) -> None:
        """Load the model in ``folder``, outside the repository, and serve it as ``name`` (Triton's
        register-a-repository-with-a-name-mapping, which SageMaker's multi-model endpoints use)."""
        self.models.require_explicit_mode()
        override = None
        config_file = folder / "config.pbtxt"
        if config_file.is_file():
            config = read_config_file(config_file)
            if config.name and config.name != name:  # the mapping names the model, not its config
                config.name = name
                override = config
        if self.models.table.is_loaded(name):
            raise AlreadyExists(f"model '{name}' is already loaded")
        await self.models.load(name, override, folder)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self.models.require_explicit_mode()
        await self.models.unload(name, unload_dependents)
        self._let_go_of_push(name, None)

    async def unloads_finished(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until the models unloaded so far have released their
        instances (an unload returns before that, as Triton's does); whether they have."""
        return await self.models.retirements.current(timeout)

    def _let_go_of_push(self, name: str, folder: Path | None) -> None:
        """``folder`` (None: none) now holds ``name``'s pushed files; the folder before it goes once the
        versions loaded from it finish their requests, which may still read their files."""
        previous = self.pushed.adopt(name, folder)
        if previous is not None:
            self.models.retirements.after_current(lambda: self.pushed.discard(previous))

    # -- statistics ---------------------------------------------------------------------------

    def statistics(self, name: str = "", version: str = "") -> list[ModelStatistics]:
        if not name:
            return [model.stats for model in self.models.table.loaded_models()]
        entry = self.models.table.named(name)
        if entry is None or not entry.versions:
            raise InvalidArgument(f"requested model '{name}' is not available")  # as Triton: 400
        if version:
            model = entry.versions.get(parse_version(version))
            if model is None:
                raise InvalidArgument(f"requested model version is not available for model '{name}'")
            return [model.stats]
        return [entry.versions[v].stats for v in sorted(entry.versions)]

    @property
    def explicit_mode(self) -> bool:
        return self.options.model_control_mode == ModelControlMode.EXPLICIT


def _check_reserved_keys(parameters: dict[str, object]) -> None:
    for key in parameters:
        if key.startswith("triton_") and key not in TRITON_CONTROL_PARAMETERS:
            raise InvalidArgument(
                "parameter keys starting with 'triton_' are reserved for Triton usage and should "
                "not be specified."
            )


def _shared_memory_use(request: InferenceRequest) -> tuple[bool, bool]:
    """Whether inputs are read from, and outputs written to, shared memory regions (plain loops:
    this runs for every request)."""
    inputs = outputs = False
    for tensor in request.inputs:
        if tensor.data is None:
            inputs = True
    if request.outputs is not None:
        for output in request.outputs:
            if "shared_memory_region" in output.parameters:
                outputs = True
    return inputs, outputs


class HeldVersion:
    """A version an ensemble's request runs a step on, held until ``release`` (``ModelVersion.hold``):
    its step requests go to it rather than to whatever version the model's name finds then."""

    __slots__ = ("_server", "model")

    def __init__(self, server: InferenceServer, model: ModelVersion) -> None:
        self._server = server
        self.model = model
        model.hold()

    def infer(self, request: InferenceRequest) -> Coroutine[Any, Any, InferenceResponse]:
        return self._server._infer_on(self.model, request)

    def infer_stream(self, request: InferenceRequest) -> AsyncGenerator[StreamItem, None]:
        return self._server._stream_on(self.model, request)

    def release(self) -> None:
        self.model.let_go()
