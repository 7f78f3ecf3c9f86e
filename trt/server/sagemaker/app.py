"""SageMaker's container contract on its own port (8080), as Triton's SageMaker server answers it.

Routes: ``GET /ping`` (readiness, or liveness with ``SAGEMAKER_TRITON_PING_MODE=live``), ``POST
/invocations`` (the default model's infer, generate or generate_stream, by
``SAGEMAKER_TRITON_INFERENCE_TYPE``) and the multi-model endpoint routes under ``/models``. Anything
else is a 400 with an empty body, as in Triton. Inference goes through the HTTP app, so decoding,
errors and ``--http-restricted-api`` are the same as on port 8000; only the envelope differs: the binary
form announces its JSON header in the content type (``application/vnd.sagemaker-triton.binary+json;
json-header-size=N``) and bodies are never compressed.
"""

from __future__ import annotations

import logging
import re

import orjson

from trt.server.core.errors import ServerError
from trt.server.http.app import HttpApp
from trt.server.http.forwarded import as_http_request, json_header_size
from trt.server.http.messages import HttpRequest, HttpResponse
from trt.server.sagemaker.multi_model import MultiModelEndpoint
from trt.server.sagemaker.options import SageMakerOptions

logger = logging.getLogger("trt.sagemaker")

BINARY_MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
_MODELS_ROUTE = re.compile(r"/models(?:/)?([^/]+)?(/invoke)?")
_JSON = [(b"content-type", b"application/json")]


class SageMakerApp:
    """The handler behind ``--allow-sagemaker``; one per server."""

    def __init__(self, http: HttpApp, options: SageMakerOptions) -> None:
        self.http = http
        self.options = options
        self.models = MultiModelEndpoint(http.core, options.models_root)

    @staticmethod
    def cancellable(path: str) -> bool:
        return path == "/invocations" or path.endswith("/invoke")

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path
        if path == "/ping":
            kind = "live" if self.options.ping_mode == "live" else "ready"
            return await self.http(as_http_request(request, f"/v2/health/{kind}"))
        if path == "/invocations":
            return await self._invocations(request)
        match = _MODELS_ROUTE.fullmatch(path)
        if match is not None:
            name, action = match.group(1) or "", match.group(2) or ""
            if request.method == "GET":
                return self._restricted(request, "model-repository") or (
                    self.models.describe(name) if name else self.models.list()
                )
            if request.method == "POST" and action == "/invoke":
                return await self._invoke(request, name)
            if request.method == "POST" and not action:
                return self._restricted(request, "model-repository") or await self.models.load(
                    request.body, request.headers.get("x-amzn-sagemaker-target-model")
                )
            if request.method == "DELETE":
                return self._restricted(request, "model-repository") or await self.models.unload(
                    name, request.headers.get("x-amzn-sagemaker-target-model")
                )
        logger.debug("SageMaker request not served: %s %s", request.method, path)
        return HttpResponse(400)

    async def _invocations(self, request: HttpRequest) -> HttpResponse:
        kind, model = self.options.inference_type, self.options.default_model
        if kind == "infer":
            return await self._infer(request, model)
        if kind in ("generate", "generate_stream"):
            return await self.http(as_http_request(request, f"/v2/models/{model}/{kind}"))
        message = (
            f"Server has invalid inference type '{kind}'. Must be one of: infer, generate, generate_stream."
        )
        return _error(500, message)

    async def _infer(self, request: HttpRequest, model: str) -> HttpResponse:
        try:
            size = json_header_size(request.headers.get("content-type"), BINARY_MIME, len(request.body))
        except ServerError as exc:
            return _error(exc.http_status, exc.message)
        response = await self.http(as_http_request(request, f"/v2/models/{model}/infer", header_size=size))
        return _sagemaker_content_type(response)

    async def _invoke(self, request: HttpRequest, name: str) -> HttpResponse:
        """A multi-model endpoint's invoke: the model named by ``X-Amzn-SageMaker-Target-Model`` (or the
        name in the path), with every failure a 400, or a 507 when it reads as out of memory (Triton)."""
        if not self.models.has(name):
            return HttpResponse(404)
        refused = self._restricted(request, "inference")
        if refused is not None:
            return refused
        target = request.headers.get("x-amzn-sagemaker-target-model") or name
        logger.info("Invoking SageMaker TargetModel: %s", target)
        response = await self._infer(request, target)
        if response.status >= 400:
            response.status = self.models.failure_status(bytes(response.body))
        return response

    def _restricted(self, request: HttpRequest, category: str) -> HttpResponse | None:
        """The 403 that ``--http-restricted-api`` gives this category when the header is missing."""
        unmet = self.http.restrictions.unmet(category, request.headers.get)
        if unmet is None:
            return None
        return _error(403, f"This API is restricted, expecting header '{unmet.header}'")


def _sagemaker_content_type(response: HttpResponse) -> HttpResponse:
    """A binary answer names its JSON header's size in the content type instead of its own header."""
    length = None
    headers: list[tuple[bytes, bytes]] = []
    for name, value in response.headers:
        if name == b"inference-header-content-length":
            length = value
        elif name != b"content-type":
            headers.append((name, value))
    if length is not None:
        headers.append((b"content-type", BINARY_MIME.encode() + length))
    else:
        headers.append((b"content-type", b"application/json"))
    response.headers = headers
    return response


def _error(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, orjson.dumps({"error": message}), list(_JSON))
