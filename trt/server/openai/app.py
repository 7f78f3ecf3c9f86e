"""The OpenAI-compatible front end's request handler, behind ``trt.server.http.protocol``.

Routes, as Triton's front end serves them: ``GET /v1/models``, ``GET /v1/models/{model}``,
``POST /v1/models/{model}/load`` and ``/unload`` (explicit model control mode),
``POST /v1/completions``, ``POST /v1/chat/completions``, ``POST /v1/embeddings``, ``GET /health/ready``
and ``GET /metrics``
(the metrics endpoint's text, when metrics are on). Every error is OpenAI's shape. Restricted
categories (``--openai-restricted-api``: inference, model-repository, metrics, health) answer 401
without their header, as Triton's front end does.
"""

from __future__ import annotations

import logging
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from trt.server.core.errors import ServerError
from trt.server.core.options import ModelControlMode
from trt.server.core.server import InferenceServer
from trt.server.http.messages import HttpRequest, HttpResponse
from trt.server.openai import completions, embeddings, responses
from trt.server.openai.errors import OpenAIError, from_server_error, model_not_found
from trt.server.openai.generation import VllmContract
from trt.server.openai.options import OpenAIOptions
from trt.server.openai.schemas import parse_chat, parse_completion, parse_embedding
from trt.server.openai.token_counter import TokenCounter
from trt.server.openai.tokenizer import ModelTokenizer, tokenizer_folder

if TYPE_CHECKING:
    from trt.server.core.models.version import ModelVersion

logger = logging.getLogger("trt.openai")

INFERENCE_PATHS = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings")
_MODELS_PREFIX = "/v1/models/"


@dataclass
class _Served:
    """What the front end keeps about one loaded model version (dropped with it)."""

    created: int  # when this front end first saw it: OpenAI's "created" of the model
    tokenizer: ModelTokenizer


class OpenAIApp:
    """The handler; one per server."""

    def __init__(
        self, core: InferenceServer, options: OpenAIOptions, metrics: Callable[[], bytes] | None = None
    ) -> None:
        self.core = core
        self.options = options
        self.metrics = metrics  # the Prometheus text, or None when metrics are off
        self._served: weakref.WeakKeyDictionary[ModelVersion, _Served] = weakref.WeakKeyDictionary()
        self.token_counter = TokenCounter()  # every model's counts, in a process started when first needed

    async def aclose(self) -> None:
        await self.token_counter.close()

    @staticmethod
    def cancellable(path: str) -> bool:
        """A completion stops when its client goes away (the model sees ``is_cancelled()``)."""
        return path in INFERENCE_PATHS

    def too_large(self, limit: int) -> HttpResponse:
        """The answer to a body over --http-max-input-size, in OpenAI's shape (as Triton's front end)."""
        message = (
            f"Request body exceeds the maximum allowed input size of {limit} bytes (--http-max-input-size)."
        )
        return _error(OpenAIError(413, message, None, "content_too_large"))

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        restrictions = self.options.restrictions
        if restrictions:
            unmet = restrictions.unmet(_category(request.path), request.headers.get)
            if unmet is not None:
                message = f"This API is restricted, expecting header '{unmet.header}' with valid value"
                return _error(OpenAIError(401, message, None, "invalid_auth"))
        try:
            return await self._route(request)
        except OpenAIError as exc:
            return _error(exc)
        except ServerError as exc:
            return _error(from_server_error(exc))
        except Exception as exc:  # a bug of ours must not take the server down
            logger.exception("unhandled error on %s %s", request.method, request.path)
            return _error(OpenAIError(500, f"internal error: {exc}"))

    async def _route(self, request: HttpRequest) -> HttpResponse:
        path, method = request.path, request.method
        if path == "/v1/completions":
            _allow(method, "POST")
            return await self._completion(request.body)
        if path == "/v1/chat/completions":
            _allow(method, "POST")
            return await self._chat(request.body)
        if path == "/v1/embeddings":
            _allow(method, "POST")
            return await self._embedding(request.body)
        if path == "/v1/models":
            _allow(method, "GET")
            return HttpResponse(200, responses.model_list(self._model_entries()), completions.JSON_HEADERS)
        if path.startswith(_MODELS_PREFIX) and len(path) > len(_MODELS_PREFIX):
            name, _, action = path.removeprefix(_MODELS_PREFIX).rpartition("/")
            if name and action in ("load", "unload"):
                _allow(method, "POST")
                return await (self._load(name) if action == "load" else self._unload(name))
            _allow(method, "GET")
            return self._model_entry(path.removeprefix(_MODELS_PREFIX))
        if path == "/health/ready":
            _allow(method, "GET")
            if not self.core.is_ready():
                raise OpenAIError(400, "the server is not ready for inference requests", None, "not_ready")
            return HttpResponse(200)
        if path == "/metrics" and self.metrics is not None:
            _allow(method, "GET")
            return HttpResponse(200, self.metrics(), [(b"content-type", b"text/plain; charset=utf-8")])
        raise OpenAIError(404, f"no route {path}", None, "not_found")

    # -- completions ---------------------------------------------------------------------------

    async def _completion(self, body: bytes) -> HttpResponse:
        request = parse_completion(body, self.options.default_max_tokens)
        contract, served = self._model(request.model)
        completion = responses.Completion(f"cmpl-{uuid.uuid4().hex}", int(time.time()), request.model, False)
        job = completions.Job(
            completion,
            request.prompt,
            request.prompt if request.echo else "",
            request.stream,
            request.include_usage,
            served.tokenizer,
        )
        return await completions.answer(self.core, contract, job, request.sampling)

    async def _chat(self, body: bytes) -> HttpResponse:
        request = parse_chat(body, self.options.default_max_tokens)
        contract, served = self._model(request.model)
        prompt = served.tokenizer.render_chat(request.messages)
        completion = responses.Completion(
            f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), request.model, True
        )
        job = completions.Job(completion, prompt, "", request.stream, request.include_usage, served.tokenizer)
        return await completions.answer(self.core, contract, job, request.sampling)

    async def _embedding(self, body: bytes) -> HttpResponse:
        request = parse_embedding(body)
        model = self._ready_model(request.model)
        contract = embeddings.EmbeddingContract.of(request.model, model.config)
        return await embeddings.answer(self.core, contract, request, self._served_for(model).tokenizer)

    def _model(self, name: str) -> tuple[VllmContract, _Served]:
        """The model a completion names, ready, and what this front end keeps about it."""
        model = self._ready_model(name)
        return VllmContract.of(name, model.config), self._served_for(model)

    def _ready_model(self, name: str) -> ModelVersion:
        try:
            return self.core.model(name)
        except ServerError as exc:
            raise from_server_error(exc, name) from None

    def _served_for(self, model: ModelVersion) -> _Served:
        served = self._served.get(model)
        if served is None:
            configured, template = self.options.tokenizer, self.options.chat_template
            counter = self.token_counter
            if configured is not None:
                given = configured.parent if configured.is_file() else configured
                tokenizer = ModelTokenizer(model.name, given, template, confined=False, counter=counter)
            else:
                own = tokenizer_folder([model.files.version_dir, model.files.model_dir])
                tokenizer = ModelTokenizer(model.name, own, template, counter=counter)
            served = self._served[model] = _Served(int(time.time()), tokenizer)
        return served

    # -- models --------------------------------------------------------------------------------

    def _model_entries(self) -> list[dict[str, object]]:
        """Every ready model, once (several versions are one OpenAI model), as Triton lists them."""
        owner = self.core.metadata().name
        entries, seen = [], set()
        for row in self.core.repository_index(ready_only=True):
            if row.name in seen:
                continue
            seen.add(row.name)
            try:
                model = self.core.model(row.name)
            except ServerError:  # unloaded since the index was read
                continue
            entries.append(responses.model_entry(row.name, self._served_for(model).created, owner))
        return entries

    # Triton's front end loads and unloads models by name in explicit mode, and words its refusals as below.

    async def _load(self, name: str) -> HttpResponse:
        self._require_explicit_mode()
        if self.core.models.table.is_loaded(name):
            raise OpenAIError(400, f"Model '{name}' is already loaded")
        try:
            await self.core.load_model(name)
        except ServerError as exc:
            raise _management_error(f"Failed to load model '{name}'", exc) from None
        return self._model_entry(name)

    async def _unload(self, name: str) -> HttpResponse:
        self._require_explicit_mode()
        if not self.core.models.table.is_loaded(name):
            raise OpenAIError(400, f"Unknown model: {name}")
        try:
            await self.core.unload_model(name)
        except ServerError as exc:
            raise _management_error(f"Failed to unload model '{name}'", exc) from None
        return HttpResponse(200, orjson.dumps({"status": "success", "model": name}), completions.JSON_HEADERS)

    def _require_explicit_mode(self) -> None:
        if self.core.options.model_control_mode != ModelControlMode.EXPLICIT:
            raise OpenAIError(400, "Model load/unload requires --model-control-mode=explicit")

    def _model_entry(self, name: str) -> HttpResponse:
        for entry in self._model_entries():
            if entry["id"] == name:
                return HttpResponse(200, orjson.dumps(entry), completions.JSON_HEADERS)
        raise model_not_found(name)


def _category(path: str) -> str | None:
    """The --openai-restricted-api category of a route, as Triton's front end groups them."""
    if path in INFERENCE_PATHS:
        return "inference"
    if path == "/v1/models" or path.startswith(_MODELS_PREFIX):
        return "model-repository"
    if path == "/metrics":
        return "metrics"
    if path == "/health/ready":
        return "health"
    return None


def _management_error(what: str, exc: ServerError) -> OpenAIError:
    """A load or unload the core refused: a client's mistake (400) or the server's (500), as Triton's."""
    return OpenAIError(400 if exc.http_status < 500 else 500, f"{what}: {exc.message}")


def _allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise OpenAIError(
            405, f"method {method} is not allowed here; use {allowed}", None, "method_not_allowed"
        )


def _error(error: OpenAIError) -> HttpResponse:
    return HttpResponse(error.status, error.body(), completions.JSON_HEADERS)
