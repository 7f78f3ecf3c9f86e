"""Any request to the SageMaker and Vertex AI front ends: it is answered, never with an exception or
a 500 (a 507 is Triton's answer to a load failure that reads as out of memory), and nothing it started
is left running.

The client is hypothesis: the routes of both contracts (SageMaker's ping, invocations and
multi-model endpoint, Vertex AI's health and predict routes with and without Triton's redirect
header), with methods, content types that announce a JSON header's size (valid, negative, past the
body, of thousands of digits, not at the start), redirect targets, target-model headers and load URLs
drawn from real ones and changed, and bodies that are real inference requests, changed or not. The
server is each front end's app over trt's HTTP app and a real core serving the ONNX ``simple`` model;
SageMaker's models root holds one archive of it, so that loads can succeed.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.fuzz.connection_harness import core_on, nothing_left_running
from tests.fuzz.strategies import BINARY_HEADER, BINARY_INFER, JSON_INFER
from tests.support import write_simple
from trt.server.http.app import HttpApp
from trt.server.http.messages import HttpRequest, HttpResponse, close_stream
from trt.server.sagemaker.app import BINARY_MIME as SAGEMAKER_MIME
from trt.server.sagemaker.app import SageMakerApp
from trt.server.sagemaker.options import SageMakerOptions
from trt.server.vertex_ai.app import BINARY_MIME as VERTEX_MIME
from trt.server.vertex_ai.app import REDIRECT_HEADER, VertexAiApp

ARCHIVE = "0a1b2c3d"  # the one archive under the models root: <root>/<hash>/model

# -- what the client sends ------------------------------------------------------------------------


# (path, the method its contract uses), weighted toward inference and the multi-model endpoint.
SAGEMAKER_ROUTES = [
    *[("/invocations", "POST")] * 6, *[("/models", "POST")] * 3, *[("/models/m1/invoke", "POST")] * 3,
    ("/ping", "GET"), ("/models", "GET"), ("/models/", "GET"), ("/models/m1", "GET"),
    ("/models/m1", "DELETE"), ("/models/m2", "DELETE"), ("/other", "GET"),
]  # fmt: skip
VERTEX_ROUTES = [
    *[("/predict", "POST")] * 8, ("/health", "GET"), ("/predict/extra", "POST"),
    ("/v2/models/simple/infer", "POST"),
]  # fmt: skip
REDIRECTS = [
    "v2/models/simple/infer", "v2/models/simple", "v2/models/simple/ready", "v2/models/simple/config",
    "v2/models/simple/stats", "v2/models/simple/versions/1/infer", "v2/models/stats", "v2", "v2/health/live",
    "v2/health/ready", "v2/systemsharedmemory/status", "v2/systemsharedmemory/region/r/register",
    "v2/cudasharedmemory/status", "v2/repository/index", "v2/repository/models/simple/load", "metrics",
    "v2/models/absent/infer", "v2/models/../simple/infer", "v2/models/simple/generate", "", "/", "v3",
]  # fmt: skip


@st.composite
def content_type(draw: st.DrawFn, mime: str, body: bytes) -> str | None:
    """None, plain JSON, or the binary MIME type with a size: right, wrong, huge, or not a number."""
    kind = draw(st.sampled_from(["none", "json", *["exact"] * 4, "size", "digits", "zeros", "text", "late"]))
    exact = len(BINARY_HEADER) if body.startswith(BINARY_HEADER[:20]) else len(body)
    size = {
        "none": "",
        "json": "",
        "exact": str(exact),
        "size": str(draw(st.integers(-(2**40), 2**40))),
        "digits": "9" * draw(st.integers(4000, 6000)),  # past int()'s 4,300-digit limit
        "zeros": "0" * draw(st.integers(4000, 6000)) + str(exact),  # std::stoi reads it as the size
        "text": draw(st.text(max_size=12)),
        "late": str(exact),
    }[kind]
    if kind == "none":
        return None
    if kind == "json":
        return "application/json"
    if kind == "late":
        return "text/plain; " + mime + size
    return mime + size + draw(st.sampled_from(["", "", "", ";charset=utf-8", "x"]))


@st.composite
def body(draw: st.DrawFn) -> bytes:
    data = draw(st.sampled_from([JSON_INFER, BINARY_INFER, JSON_INFER, BINARY_INFER, b"", b"{}", b"null"]))
    change = draw(st.sampled_from(["none"] * 8 + ["truncate", "flip", "random"]))
    if change == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif change == "flip" and data:
        changed = bytearray(data)
        changed[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        data = bytes(changed)
    elif change == "random":
        data = draw(st.binary(max_size=200))
    return data


@st.composite
def load_body(draw: st.DrawFn, root: Path) -> bytes:
    """A multi-model endpoint's load: SageMaker's form, or paths that lead elsewhere."""
    url = draw(st.sampled_from([
        *[f"{root}/{ARCHIVE}/model"] * 6, f"{root}/{ARCHIVE}/model/", f"{root}/{ARCHIVE}/model/simple",
        f"{root}/{ARCHIVE}/model/../../..", f"{root}/absent/model", f"{root}/{ARCHIVE}", "/etc",
        "/proc/self", "relative/model", "", f"{root}/{ARCHIVE}/model\u0000", f"{root}/../{ARCHIVE}/model",
    ]))  # fmt: skip
    document: Any = {"model_name": draw(st.sampled_from(["m1", "m2", "OOM", ""])), "url": url}
    if draw(st.integers(0, 4)) == 0:
        document = draw(st.sampled_from([[], None, {"model_name": 1, "url": url}, {"url": ["x"]}]))
    return json.dumps(document).encode()


@st.composite
def hosted_request(draw: st.DrawFn, root: Path) -> tuple[str, HttpRequest]:
    """Which front end, and the request it gets."""
    front_end = draw(st.sampled_from(["sagemaker", "vertex"]))
    path, method = draw(st.sampled_from(SAGEMAKER_ROUTES if front_end == "sagemaker" else VERTEX_ROUTES))
    if draw(st.integers(0, 7)) == 0:
        method = draw(st.sampled_from(["POST", "GET", "DELETE", "PUT", "HEAD"]))
    headers: dict[str, str] = {}
    if front_end == "sagemaker" and path == "/models" and method == "POST":
        data = draw(load_body(root))
    else:
        data = draw(body())
    mime = SAGEMAKER_MIME if front_end == "sagemaker" else VERTEX_MIME
    announced = draw(content_type(mime, data))
    if announced is not None:
        headers["content-type"] = announced
    if front_end == "sagemaker" and draw(st.booleans()):
        headers["x-amzn-sagemaker-target-model"] = draw(
            st.sampled_from(["simple", "m1", "absent", "", "../x"])
        )
    if front_end == "vertex" and draw(st.booleans()):
        headers[REDIRECT_HEADER] = draw(st.one_of(st.sampled_from(REDIRECTS), st.text(max_size=30)))
    for name in draw(st.lists(st.sampled_from(["content-encoding", "accept-encoding"]), max_size=2)):
        headers[name] = draw(st.sampled_from(["gzip", "deflate", "identity", "br"]))
    headers["content-length"] = str(len(data))
    return front_end, HttpRequest(method, path, "", headers, data)


# -- the property ---------------------------------------------------------------------------------

LOOP = asyncio.new_event_loop()


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    repo = tmp_path_factory.mktemp("repo")
    write_simple(repo)
    root = tmp_path_factory.mktemp("sagemaker_models")
    (root / ARCHIVE).mkdir()
    shutil.copytree(repo / "simple", root / ARCHIVE / "model")
    with core_on(LOOP, repo, "simple") as core:

        async def made() -> dict[str, Any]:
            sagemaker = SageMakerApp(
                HttpApp(core), SageMakerOptions(default_model="simple", models_root=root)
            )
            vertex = VertexAiApp(
                HttpApp(core), "simple", re.compile("/predict"), re.compile("/health"), lambda: b"# metrics\n"
            )
            return {"sagemaker": sagemaker, "vertex": vertex}

        yield LOOP.run_until_complete(made())


async def _answer(app: Any, request: HttpRequest) -> HttpResponse:
    async with nothing_left_running():
        response: HttpResponse = await asyncio.wait_for(app(request), 20)
        if response.stream is not None:
            await close_stream(response.stream)
    return response


@given(st.data())
def test_any_request_to_sagemaker_or_vertex_ai_is_answered_without_a_500(
    apps: dict[str, Any], data: st.DataObject
) -> None:
    front_end, request = data.draw(hosted_request(apps["sagemaker"].options.models_root))
    response = LOOP.run_until_complete(_answer(apps[front_end], request))
    event(f"{front_end} {request.method} {request.path}: {response.status}")
    assert 200 <= response.status < 600 and response.status != 500, (
        front_end, request.method, request.path, response.status, response.body[:300],
    )  # fmt: skip
    if response.status >= 400 and response.body:
        assert isinstance(json.loads(response.body), dict)


def test_the_default_model_answers_after_any_requests(apps: dict[str, Any]) -> None:
    request = HttpRequest("POST", "/invocations", "", {"content-type": "application/json"}, JSON_INFER)
    assert LOOP.run_until_complete(_answer(apps["sagemaker"], request)).status == 200
    request = HttpRequest("POST", "/predict", "", {"content-type": "application/json"}, JSON_INFER)
    assert LOOP.run_until_complete(_answer(apps["vertex"], request)).status == 200
