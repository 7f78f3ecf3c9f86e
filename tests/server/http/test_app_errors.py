"""How ``HttpApp`` answers what handling a request raised, on each way a request reaches it: a head
parsed afresh, a head seen before (its remembered route), and a request sent apart by a front-end
worker. A ``ServerError`` is answered with its status and text; anything else is a bug of ours,
answered 500 and logged, and the server goes on serving."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient

from tests.support import running_core, write_simple
from trt.server.core.server import InferenceServer
from trt.server.http.app import HttpApp
from trt.server.http.heads import HeadPlan
from trt.server.http.messages import HttpRequest, HttpResponse

INFER_PATH = "/v2/models/simple/infer"


def _body() -> tuple[bytes, int]:
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(first)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs)
    return bytes(body), int(json_size or 0)


def _request(path: str, body: bytes, header_length: int, plan: HeadPlan | None = None) -> HttpRequest:
    headers = {"inference-header-content-length": str(header_length)}
    return HttpRequest("POST", path, "", headers, body, plan=plan)


def _plan(path: str, header_length: int) -> HeadPlan:
    headers = {"inference-header-content-length": str(header_length)}
    return HeadPlan("POST", path, "", headers, 0, True, False)


def _with_app(tmp_path: Path, scenario: Callable[[HttpApp, InferenceServer], Awaitable[None]]) -> None:
    write_simple(tmp_path)

    async def run() -> None:
        async with running_core(tmp_path, "simple") as core:
            await scenario(HttpApp(core), core)

    asyncio.run(run())


def _error_of(response: HttpResponse) -> tuple[int, str]:
    return response.status, orjson.loads(response.body)["error"]


async def _a_bug(*_: Any, **__: Any) -> Any:
    raise RuntimeError("a bug of ours")


def _a_sync_bug(*_: Any, **__: Any) -> Any:
    raise RuntimeError("a bug of ours")


@pytest.mark.parametrize("remembered", [False, True], ids=["head parsed afresh", "head seen before"])
def test_a_bug_while_inferring_is_a_500_that_is_logged_and_the_next_request_is_served(
    tmp_path: Path, remembered: bool, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(app: HttpApp, core: InferenceServer) -> None:
        body, size = _body()
        plan = _plan(INFER_PATH, size) if remembered else None
        assert (await app(_request(INFER_PATH, body, size, plan))).status == 200
        if remembered:
            assert plan is not None and plan.route is not None  # the next request takes the remembered route
        infer = core.infer
        core.infer = _a_bug  # type: ignore[method-assign]
        with caplog.at_level(logging.ERROR, logger="trt.http"):
            response = await app(_request(INFER_PATH, body, size, plan))
        assert _error_of(response) == (500, "internal error: a bug of ours")
        assert f"unhandled error on POST {INFER_PATH}" in caplog.text
        core.infer = infer  # type: ignore[method-assign]
        assert (await app(_request(INFER_PATH, body, size, plan))).status == 200

    _with_app(tmp_path, scenario)


@pytest.mark.parametrize("remembered", [False, True], ids=["head parsed afresh", "head seen before"])
def test_a_server_error_keeps_its_status_and_text_on_either_path(tmp_path: Path, remembered: bool) -> None:
    async def scenario(app: HttpApp, _: InferenceServer) -> None:
        body, size = _body()
        path = "/v2/models/simple/versions/7/infer"
        plan = _plan(path, size) if remembered else None
        for _attempt in range(2):  # the second goes by the remembered route, if remembered
            response = await app(_request(path, body, size, plan))
            status, text = _error_of(response)
            assert status == 404 and "simple" in text and "7" in text

    _with_app(tmp_path, scenario)


def test_a_bug_in_a_request_sent_apart_is_a_500_and_a_server_error_keeps_its_status(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(app: HttpApp, core: InferenceServer) -> None:
        body, size = _body()
        route = app.infer_route("simple", "", size, "")
        answer = await app.answer_split(route, body[:size], body[size:], 0, 0)
        assert answer.status == 200
        unknown = app.infer_route("no_such_model", "", size, "")
        status, _ = _error_of(await app.answer_split(unknown, body[:size], body[size:], 0, 0))
        assert status == 404
        core.infer = _a_bug  # type: ignore[method-assign]
        with caplog.at_level(logging.ERROR, logger="trt.http"):
            answer = await app.answer_split(route, body[:size], body[size:], 0, 0)
        assert _error_of(answer) == (500, "internal error: a bug of ours")
        assert "unhandled error on inference of simple" in caplog.text

    _with_app(tmp_path, scenario)


def test_a_bug_on_another_route_is_a_500_and_a_route_error_keeps_its_status(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(app: HttpApp, core: InferenceServer) -> None:
        stats = HttpRequest("GET", "/v2/models/simple/stats", "", {}, b"")
        assert (await app(stats)).status == 200
        assert _error_of(await app(HttpRequest("GET", "/v2/nowhere", "", {}, b""))) == (404, "Not Found")
        core.statistics = _a_sync_bug  # type: ignore[method-assign]
        with caplog.at_level(logging.ERROR, logger="trt.http"):
            response = await app(stats)
        assert _error_of(response) == (500, "internal error: a bug of ours")
        assert "unhandled error on GET /v2/models/simple/stats" in caplog.text

    _with_app(tmp_path, scenario)


DEEP = "[" * 1000 + "]" * 1000  # JSON allows it; repr() of it raised RecursionError (a 500)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v2/trace/setting", f'{{"trace_level": {DEEP}}}'),
        ("/v2/trace/setting", f'{{"trace_rate": {DEEP}}}'),
        ("/v2/trace/setting", f'{{"trace_mode": {DEEP}}}'),
        ("/v2/models/simple/generate", f'{{"INPUT0": [{DEEP}], "INPUT1": [1]}}'),
    ],
    ids=["trace_level", "trace_rate", "trace_mode", "generate"],
)
def test_a_value_nested_a_thousand_deep_is_refused_quoting_it_briefly(
    tmp_path: Path, path: str, body: str
) -> None:
    write_simple(tmp_path)

    async def ask() -> HttpResponse:
        async with running_core(tmp_path, "simple") as core:
            return await HttpApp(core)(HttpRequest("POST", path, "", {}, body.encode()))

    response = asyncio.run(ask())
    assert response.status == 400, response.body
    message = orjson.loads(response.body)["error"]
    assert "[[[...]]]" in message and len(message) < 300, message
