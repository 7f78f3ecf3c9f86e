"""Vertex AI's prediction-container contract on ``AIP_HTTP_PORT``, as Triton's Vertex AI server answers it.

``AIP_HEALTH_ROUTE`` answers readiness; ``AIP_PREDICT_ROUTE`` runs the default model's infer, or, with an
``X-Vertex-Ai-Triton-Redirect: v2/...`` header on a POST, the read-only part of Triton's HTTP API:
metrics, statistics, model ready / metadata / config / stats / infer, server metadata and health,
shared-memory status and the repository index. Other redirects that Triton's API has (register,
load, ...) are refused with 403; anything else is a 400 with an empty body. Inference goes through the
HTTP app (same decoding, errors and ``--http-restricted-api``); the binary form announces its JSON header
in the content type (``application/vnd.vertex-ai-triton.binary+json;json-header-size=N``), bodies are
never compressed, and a binary answer carries ``Inference-Header-Content-Length`` as on port 8000.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import orjson

from trt.server.core.errors import ServerError
from trt.server.http.app import HttpApp
from trt.server.http.forwarded import as_http_request, json_header_size
from trt.server.http.messages import HttpRequest, HttpResponse

logger = logging.getLogger("trt.vertex_ai")

BINARY_MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
REDIRECT_HEADER = "x-vertex-ai-triton-redirect"
# Triton's HTTP routes, as its Vertex AI server matches a redirect against them.
_MODEL = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?"
)
_SERVER = re.compile(r"/v2(?:/health/(live|ready))?")
_SHARED_MEMORY = re.compile(r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)")
_REPOSITORY = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")


class VertexAiApp:
    """The handler behind ``--allow-vertex-ai``; one per server."""

    def __init__(
        self,
        http: HttpApp,
        default_model: str,
        predict_route: re.Pattern[str],
        health_route: re.Pattern[str],
        metrics: Callable[[], bytes] | None,
    ) -> None:
        self.http = http
        self.default_model = default_model
        self.predict_route = predict_route
        self.health_route = health_route
        self.metrics = metrics  # None when --allow-metrics=false: the redirect is then a 400

    def cancellable(self, path: str) -> bool:
        return self.predict_route.fullmatch(path) is not None

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path
        if self.health_route.fullmatch(path):
            return await self.http(as_http_request(request, "/v2/health/ready"))
        if self.predict_route.fullmatch(path):
            redirect = request.headers.get(REDIRECT_HEADER)
            if redirect is None:
                return await self._infer(request, f"/v2/models/{self.default_model}/infer")
            if request.method != "POST":  # Vertex AI sends POST only; the redirect says what it stands for
                return HttpResponse(405)
            return await self._redirect(request, "/" + redirect)
        logger.debug("Vertex AI request not served: %s %s", request.method, path)
        return HttpResponse(400)

    async def _redirect(self, request: HttpRequest, endpoint: str) -> HttpResponse:
        logger.debug("Redirecting Vertex AI request: %s", endpoint)
        if endpoint == "/metrics":
            if self.metrics is None:
                return HttpResponse(400)
            return HttpResponse(200, self.metrics(), [(b"content-type", b"text/plain; charset=utf-8")])
        if endpoint == "/v2/models/stats":
            return await self._get(request, endpoint)
        model = _MODEL.fullmatch(endpoint)
        if model is not None:
            kind = model.group(3) or ""
            if kind == "infer":
                return await self._infer(request, endpoint)
            if kind in ("", "ready", "config", "stats"):
                return await self._get(request, endpoint)
        if _SERVER.fullmatch(endpoint):
            return await self._get(request, endpoint)
        shared_memory = _SHARED_MEMORY.fullmatch(endpoint)
        if shared_memory is not None:
            # Only status is read-only; registering needs the HTTP endpoint itself.
            if shared_memory.group(3) == "status":
                return await self._get(request, endpoint)
            return HttpResponse(403)
        repository = _REPOSITORY.fullmatch(endpoint)
        if repository is not None:
            if repository.group(2) == "index":
                return await self.http(as_http_request(request, endpoint))
            return HttpResponse(403)
        return HttpResponse(400)

    async def _get(self, request: HttpRequest, endpoint: str) -> HttpResponse:
        return await self.http(as_http_request(request, endpoint, method="GET"))

    async def _infer(self, request: HttpRequest, endpoint: str) -> HttpResponse:
        try:
            size = json_header_size(request.headers.get("content-type"), BINARY_MIME, len(request.body))
        except ServerError as exc:
            return HttpResponse(
                exc.http_status,
                orjson.dumps({"error": exc.message}),
                [(b"content-type", b"application/json")],
            )
        return await self.http(as_http_request(request, endpoint, header_size=size))
