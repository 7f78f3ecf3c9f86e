"""The HTTP/REST front of the server: one handler behind ``server.http.protocol``.

Routes and status codes follow Triton's HTTP server: health answers 200/400 with an empty body,
errors are ``{"error": "..."}`` with the status each ``ServerError`` carries, unknown routes are
404 and known routes with the wrong method are 405. A JSON body is read whatever its
``Content-Type`` (tritonclient sends none).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import orjson

from trt.server.core.errors import DecoupledModelNeedsStream, InvalidArgument, ServerError
from trt.server.core.extensions.tracing import TransportPoints
from trt.server.core.models.config import config_to_json
from trt.server.core.server import InferenceServer
from trt.server.core.types import InferenceRequest, InferenceResponse
from trt.server.header_forwarding import HeaderForwarding
from trt.server.http import codec, compression, generate
from trt.server.http.generate_route import answer_generate
from trt.server.http.header_numbers import inference_header_length
from trt.server.http.messages import HttpRequest, HttpResponse
from trt.server.http.model_push import load_parameters
from trt.server.http.shared_memory_bodies import cuda_registration, status_rows, system_registration
from trt.server.http.statistics import statistics_json
from trt.server.restrictions import Restrictions

logger = logging.getLogger("trt.http")

HTTP_TRACE_POINTS = TransportPoints("HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END")

_MODEL_ROUTE = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|ready|config|stats))?")
_GENERATE_ROUTE = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?/(generate|generate_stream)")
_REPOSITORY_ROUTE = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")
_SHM_ROUTE = re.compile(r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)")

_JSON_HEADERS = [(b"content-type", b"application/json")]


@dataclass(frozen=True, slots=True, eq=False)
class _InferRoute:
    """Where an inference request goes and how its answer is encoded: what its head decides."""

    app: HttpApp
    model_name: str
    model_version: str
    header_length: int | None  # Inference-Header-Content-Length
    accept_encoding: str | None


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class HttpApp:
    """The request handler; one instance per server."""

    def __init__(
        self,
        core: InferenceServer,
        max_input_size: int = 64 * 1024 * 1024,
        restrictions: Restrictions | None = None,
        header_cache_bytes: int = codec.DEFAULT_HEADER_CACHE_BYTES,
        header_forwarding: HeaderForwarding | None = None,
    ) -> None:
        self.core = core
        self.max_input_size = max_input_size
        self.restrictions = restrictions or Restrictions()
        self.header_forwarding = header_forwarding  # --http-header-forward-pattern
        self._decoder = codec.RequestDecoder(header_cache_bytes)

    @staticmethod
    def cancellable(path: str) -> bool:
        """Inference stops when its client disconnects; a load or an unload always runs to its end."""
        return _is_inference(path)

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        plan = request.plan
        if plan is not None:  # a head seen before: its route, if it was an inference, is known
            route = plan.route
            if type(route) is _InferRoute and route.app is self:
                try:
                    return await self._infer_on(request, route)
                except Exception as exc:
                    return _error_response(exc, f"{request.method} {request.path}")
        path = request.path
        if self.restrictions.by_category:
            unmet = self.restrictions.unmet(_category(path), request.headers.get)
            if unmet is not None:
                return _error(403, f"This API is restricted, expecting header '{unmet.header}'")
        try:
            if path.endswith("/infer") and path.startswith("/v2/models/"):
                return await self._infer(request)
            if path.startswith("/v2/models/") and path.endswith(("/generate", "/generate_stream")):
                return await self._generate(request)
            return await self._route(request)
        except Exception as exc:
            return _error_response(exc, f"{request.method} {path}")

    # -- inference (the hot path) --------------------------------------------------------------

    async def _infer(self, http_request: HttpRequest) -> HttpResponse:
        match = _MODEL_ROUTE.fullmatch(http_request.path)
        if match is None:
            raise HttpError(404, "Not Found")
        if http_request.method != "POST":
            raise HttpError(405, "Method Not Allowed")
        headers = http_request.headers
        body = http_request.body if "content-encoding" not in headers else await self._body(http_request)
        header_length = headers.get("inference-header-content-length")
        length = None if header_length is None else inference_header_length(header_length)
        route = _InferRoute(
            self, match.group(1), match.group(2) or "", length, headers.get("accept-encoding")
        )
        plan = http_request.plan
        # Everything the route holds follows from the head; a compressed body is not remembered, so
        # that the requests of its head go through ``_body`` each time.
        if plan is not None and headers.get("content-encoding") is None:
            plan.route = route
        return await self._infer_on(http_request, route, body)

    def _infer_on(
        self, http_request: HttpRequest, route: _InferRoute, body: bytes | None = None
    ) -> Coroutine[Any, Any, HttpResponse]:
        """Decodes now (raising what the body breaks) and returns the run to await: no coroutine of
        its own on the hot path."""
        request, binary_choice, default_binary = self._decoder.decode(
            route.model_name,
            route.model_version,
            http_request.body if body is None else body,
            route.header_length,
        )
        if self.header_forwarding is not None:
            self.header_forwarding.apply(request, http_request.spelt_headers())
        timestamps = (http_request.started_ns, http_request.received_ns)
        return self._run(request, route, binary_choice, default_binary, timestamps)

    async def _run(
        self,
        request: InferenceRequest,
        route: _InferRoute,
        binary_choice: dict[str, bool],
        default_binary: bool,
        timestamps: tuple[int, int],
    ) -> HttpResponse:
        tracer = self.core.tracer
        if tracer.active and (trace := tracer.start(request.model_name, request.model_version, request.id)):
            http_response, sent = await self.core.infer_traced(
                request,
                trace,
                HTTP_TRACE_POINTS,
                timestamps,
                lambda response: self._infer_response(route, response, binary_choice, default_binary),
            )
            http_response.sent = sent
        else:
            response = await self.core.infer(request)
            http_response = self._infer_response(route, response, binary_choice, default_binary)
        if route.accept_encoding:
            http_response.body, http_response.headers = await compression.compressed(
                http_response.body, http_response.headers, route.accept_encoding
            )
        return http_response

    # -- inference sent apart by a front-end worker (``frontend.layouts``) ---------------------

    @property
    def answers_split(self) -> bool:
        """Whether ``answer_split`` may serve: not where inference is restricted or headers are
        forwarded, since a request sent apart comes without its headers."""
        return self.restrictions.by_category.get("inference") is None and self.header_forwarding is None

    def infer_route(
        self, model_name: str, model_version: str, header_length: int, accept_encoding: str
    ) -> object:
        """What requests to ``model_name`` with a JSON header of ``header_length`` bytes share, for
        ``answer_split``; an opaque object to keep."""
        return _InferRoute(self, model_name, model_version, header_length, accept_encoding or None)

    async def answer_split(
        self, route: object, header: bytes, binary: bytes, started_ns: int, received_ns: int
    ) -> HttpResponse:
        """A binary inference request whose body came in two parts, its JSON header (seen before) and
        its tensors, answered as ``__call__`` answers the whole body sent to its route: the same
        decoding (the header's plan when the decoder remembers it), errors and tracing."""
        assert type(route) is _InferRoute and route.app is self
        try:
            request, binary_choice, default_binary = self._decoder.decode_split(
                route.model_name, route.model_version, header, binary
            )
            timestamps = (started_ns, received_ns)
            return await self._run(request, route, binary_choice, default_binary, timestamps)
        except Exception as exc:
            return _error_response(exc, f"inference of {route.model_name}")

    def _infer_response(
        self,
        route: _InferRoute,
        response: InferenceResponse,
        binary_choice: dict[str, bool],
        default_binary: bool,
    ) -> HttpResponse:
        payload, json_length = codec.encode_response(response, binary_choice, default_binary)
        if json_length is None:
            out_headers = [(b"content-type", b"application/json")]
        else:
            out_headers = [
                (b"content-type", b"application/octet-stream"),
                (b"inference-header-content-length", str(json_length).encode()),
            ]
        return HttpResponse(200, payload, out_headers)

    # -- the generate extension ----------------------------------------------------------------

    async def _generate(self, http_request: HttpRequest) -> HttpResponse:
        match = _GENERATE_ROUTE.fullmatch(http_request.path)
        if match is None:
            raise HttpError(404, "Not Found")
        if http_request.method != "POST":
            raise HttpError(405, "Method Not Allowed")
        name, version, action = match.group(1), match.group(2) or "", match.group(3)
        config = self.core.model_config(name, version)  # an unknown model before a body it cannot read
        body = await self._body(http_request)
        request = generate.decode_generate_request(name, version, body, config)
        return await answer_generate(self.core, request, streamed=action == "generate_stream")

    async def _body(self, request: HttpRequest) -> bytes:
        encoding = request.headers.get("content-encoding")
        if encoding is None:
            return request.body
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            return request.body
        try:
            return await compression.decompressed(request.body, encoding, self.max_input_size)
        except compression.UnsupportedEncoding as exc:
            raise HttpError(415, str(exc)) from None

    # -- everything else -----------------------------------------------------------------------

    async def _route(self, request: HttpRequest) -> HttpResponse:
        core = self.core
        method, path = request.method, request.path
        if path in ("/v2/health/live", "/v2/health/ready"):
            _allow(method, "GET")
            ok = core.is_live() if path.endswith("live") else core.is_ready()
            return HttpResponse(200 if ok else 400)
        if path in ("/v2", "/v2/"):
            _allow(method, "GET")
            meta = core.metadata()
            return _json({"name": meta.name, "version": meta.version, "extensions": list(meta.extensions)})
        if path == "/v2/models/stats":
            _allow(method, "GET")
            return _json(statistics_json(core.statistics()))
        if path == "/v2/logging":
            if method == "GET":
                return _json(self.core.log_settings.current())
            _allow(method, "POST")
            return _json(self.core.log_settings.update(_parse_json_object(await self._body(request))))
        if path == "/v2/trace/setting" or (
            path.startswith("/v2/models/") and path.endswith("/trace/setting")
        ):
            model = ""
            if path != "/v2/trace/setting":
                model = path.removeprefix("/v2/models/").removesuffix("/trace/setting")
                self.core.check_trace_model(model)
            if method == "GET":
                return _json(self.core.tracer.settings(model))
            _allow(method, "POST")
            return _json(self.core.tracer.update(model, _parse_json_object(await self._body(request))))
        match = _MODEL_ROUTE.fullmatch(path)
        if match is not None:
            return await self._model_route(method, match)
        match = _REPOSITORY_ROUTE.fullmatch(path)
        if match is not None:
            return await self._repository_route(request, match)
        match = _SHM_ROUTE.fullmatch(path)
        if match is not None:
            return await self._shared_memory(request, match.group(1), match.group(2) or "", match.group(3))
        raise HttpError(404, "Not Found")

    async def _shared_memory(self, request: HttpRequest, kind: str, region: str, action: str) -> HttpResponse:
        registry = self.core.shared_memory
        if action == "status":
            _allow(request.method, "GET")
            regions = registry.status(region) if kind == "system" else registry.cuda_status(region)
            return _json(status_rows(regions))
        _allow(request.method, "POST")
        if action == "unregister":
            if kind == "system":
                registry.unregister(region)
            else:
                registry.unregister_cuda(region)
            return HttpResponse(200, b"", _JSON_HEADERS)
        registry.check_allowed()
        if not region:
            raise InvalidArgument(f"'region name' is necessary to register {kind} shared memory region")
        body = _parse_json_object(await self._body(request))
        if kind == "system":
            system = system_registration(body)
            registry.register(region, system.key, system.offset, system.byte_size)
        else:
            cuda = cuda_registration(body)
            await registry.register_cuda(region, cuda.raw_handle, cuda.device_id, cuda.byte_size)
        return HttpResponse(200, b"", _JSON_HEADERS)

    async def _model_route(self, method: str, match: re.Match[str]) -> HttpResponse:
        name, version, action = match.group(1), match.group(2) or "", match.group(3)
        _allow(method, "GET")
        if action == "ready":
            if self.core.model_ready(name, version):
                return HttpResponse(200)
            return _error(400, "Model version not ready")
        if action == "config":
            return HttpResponse(200, config_to_json(self.core.model_config(name, version)), _JSON_HEADERS)
        if action == "stats":
            return _json(statistics_json(self.core.statistics(name, version)))
        meta = self.core.model_metadata(name, version)
        return _json(
            {
                "name": meta.name,
                "versions": list(meta.versions),
                "platform": meta.platform,
                "inputs": [
                    {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in meta.inputs
                ],
                "outputs": [
                    {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in meta.outputs
                ],
            }
        )

    async def _repository_route(self, request: HttpRequest, match: re.Match[str]) -> HttpResponse:
        _allow(request.method, "POST")
        repository, action, model_name, model_action = match.groups()
        raw = await self._body(request)
        body = _parse_json_object(raw)
        if action == "index":
            ready = body.get("ready", False)
            if not isinstance(ready, bool):
                raise InvalidArgument("Invalid value for 'ready': expected a boolean")
            rows = []
            for row in self.core.repository_index(ready):
                item: dict[str, str] = {"name": row.name}
                if row.version:
                    item["version"] = row.version
                if row.state:
                    item["state"] = row.state
                if row.reason:
                    item["reason"] = row.reason
                rows.append(item)
            return _json(rows)
        if repository:
            raise HttpError(501, "'repository_name' specification is not supported")
        parameters = body.get("parameters", {})
        if not isinstance(parameters, dict):
            raise InvalidArgument("'parameters' must be a JSON object")
        if model_action == "load":
            load = await load_parameters(parameters, len(raw))
            await self.core.load_model(model_name, load.config, load.files or None)
        else:
            unload_dependents = parameters.get("unload_dependents", False)
            await self.core.unload_model(model_name, bool(unload_dependents))
        return HttpResponse(200, b"", _JSON_HEADERS)


def _is_inference(path: str) -> bool:
    return path.startswith("/v2/models/") and path.endswith(("/infer", "/generate", "/generate_stream"))


def _category(path: str) -> str | None:
    """The restricted-API category of a route (``--http-restricted-api``), as Triton groups them."""
    if path.startswith("/v2/health/"):
        return "health"
    if path in ("/v2", "/v2/"):
        return "metadata"
    if path == "/v2/models/stats":
        return "statistics"
    if path == "/v2/logging":
        return "logging"
    if path.endswith("/trace/setting"):
        return "trace"
    if path.startswith("/v2/repository"):
        return "model-repository"
    if path.startswith(("/v2/systemsharedmemory", "/v2/cudasharedmemory")):
        return "shared-memory"
    if _is_inference(path):
        return "inference"
    if path.startswith("/v2/models/"):
        match = _MODEL_ROUTE.fullmatch(path)
        action = match.group(3) if match is not None else None
        return {"ready": "health", "config": "model-config", "stats": "statistics"}.get(
            action or "", "metadata"
        )
    return None


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise HttpError(405, "Method Not Allowed")


def _parse_json_object(body: bytes) -> dict[str, Any]:
    """Optional JSON bodies (repository, logging): empty means no settings."""
    return codec.parse_json_object(body) if body.strip() else {}


def _json(value: Any) -> HttpResponse:
    return HttpResponse(200, orjson.dumps(value), _JSON_HEADERS)


def _error(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, orjson.dumps({"error": message}), _JSON_HEADERS)


def _error_response(exc: Exception, handling: str) -> HttpResponse:
    """What a client hears when handling its request raised ``exc``: a ``ServerError``'s status and
    text, a route's ``HttpError``; anything else is a bug of ours, logged and answered with a 500, so
    that it never takes the server down."""
    if isinstance(exc, DecoupledModelNeedsStream):  # Triton's words, then which model and what to use
        return _error(
            exc.http_status,
            "HTTP end point doesn't support models with decoupled transaction policy (model "
            f"'{exc.model_name}': use /generate_stream or gRPC ModelStreamInfer)",
        )
    if isinstance(exc, ServerError):
        return _error(exc.http_status, exc.message)
    if isinstance(exc, HttpError):
        return _error(exc.status, exc.message)
    logger.error("unhandled error on %s", handling, exc_info=exc)
    return _error(500, f"internal error: {exc}")
