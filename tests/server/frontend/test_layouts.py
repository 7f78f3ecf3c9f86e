"""Binary inference requests sent from a worker to the core apart, as a layout number and their tensors:
answered exactly as the whole request would be, with what the core keeps per worker bounded, and a
worker that breaks the numbering dropped."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype

from tests.support import running_core, write_simple
from trt.server.frontend import messages as m
from trt.server.frontend.channel import Channel
from trt.server.frontend.config import ANSWER_FRAME_LIMIT
from trt.server.frontend.forward import CoreLink, HttpForwarder
from trt.server.frontend.layouts import (
    LAYOUTS,
    MAX_HEADER,
    LayoutError,
    LayoutNumbers,
    LayoutTable,
    SplitRequest,
    answer_headers,
    answer_message,
    split,
)
from trt.server.frontend.serving import WorkerSession
from trt.server.http.app import HttpApp
from trt.server.http.limits import DEFAULT_MAX_BODY_SIZE as MAX_BODY
from trt.server.http.messages import HttpRequest, HttpResponse
from trt.server.restrictions import Restrictions


def _body(first: np.ndarray, second: np.ndarray, request_id: str = "") -> tuple[bytes, int]:
    inputs = [httpclient.InferInput(name, list(first.shape), "INT32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(first)
    inputs[1].set_data_from_numpy(second)
    outputs = [httpclient.InferRequestedOutput(name, binary_data=True) for name in ("OUTPUT0", "OUTPUT1")]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs, request_id)
    return bytes(body), int(json_size or 0)


def _json_body(first: np.ndarray, second: np.ndarray, binary_outputs: bool = False) -> bytes:
    """tritonclient's JSON body: the tensors as JSON data."""
    datatype = np_to_triton_dtype(first.dtype)
    inputs = [httpclient.InferInput(name, list(first.shape), datatype) for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(first, binary_data=False)
    inputs[1].set_data_from_numpy(second, binary_data=False)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary_outputs) for n in ("OUTPUT0", "OUTPUT1")]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs)
    assert json_size is None
    return bytes(body)


def _request(
    body: bytes, header_length: int | None, path: str = "/v2/models/simple/infer", **headers: str
) -> HttpRequest:
    fields = {key.replace("_", "-"): value for key, value in headers.items()}
    if header_length is not None:
        fields["inference-header-content-length"] = str(header_length)
    return HttpRequest("POST", path, "", fields, body)


def _pair(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    first, second = rng.integers(-1000, 1000, (2, 1, 16), dtype=np.int32)
    return first, second


# -- what goes apart ------------------------------------------------------------------------------


def test_binary_inference_posts_are_cut_at_their_json_header() -> None:
    body, size = _body(*_pair(0))
    cut = split(_request(body, size, "/v2/models/simple/versions/1/infer", accept_encoding="gzip"), MAX_BODY)
    assert cut == SplitRequest(("simple", "1", "gzip", body[:size]), body[size:])


@pytest.mark.parametrize(
    "request_",
    [
        HttpRequest("GET", "/v2/models/simple/infer", "", {"inference-header-content-length": "5"}, b"x" * 9),
        _request(b"{}", None),  # JSON that does not decode (no inputs): the core says why
        _request(b"x" * 9, 5, "/v2/models/simple/generate"),
        _request(b"x" * 9, 5, "/v2/models/a/b/infer"),
        _request(b"x" * 9, 5, content_encoding="gzip"),  # the core decompresses, then cuts
        _request(b"x" * 9, 10),  # a header longer than the body
        _request(b"x" * 9, 0),
        _request(b"x" * 9, None, inference_header_content_length=" 5"),
        _request(b"x" * (MAX_HEADER + 10), MAX_HEADER + 1),
    ],
)
def test_everything_else_goes_whole(request_: HttpRequest) -> None:
    assert split(request_, MAX_BODY) is None


def test_json_inference_posts_are_cut_as_the_binary_body_they_re_encode_to() -> None:
    first, second = _pair(0)
    body = _json_body(first, second)
    cut = split(_request(body, None), MAX_BODY)
    assert cut is not None and cut.key[:3] == ("simple", "", "")
    assert np.frombuffer(cut.binary, np.int32).tolist() == [*first.ravel(), *second.ravel()]
    assert split(_request(body, None), len(cut.binary) - 1) is None  # over the body limit: whole


# -- both ends keep the same layouts --------------------------------------------------------------


def _cut(header: bytes, model: str = "simple") -> SplitRequest:
    return SplitRequest((model, "", "", header), b"tensors")


def test_both_ends_forget_the_same_layouts_so_every_number_sent_is_held() -> None:
    numbers, table = LayoutNumbers(), LayoutTable(lambda *key: key)
    headers = [f'{{"inputs":{index}}}'.encode() for index in range(3 * LAYOUTS)]
    # New headers, and old ones again: some still held, some forgotten and numbered anew.
    order = [*headers, *headers[: LAYOUTS // 2], *headers[-LAYOUTS:], headers[0], headers[-1]]
    for call, header in enumerate(order):
        for message in numbers.messages(_cut(header), call, 0, 0):
            if isinstance(message, m.InferLayout):
                table.define(message)
            else:
                assert isinstance(message, m.InferCall)
                assert table.get(message.layout).header == header
        assert len(table) <= LAYOUTS


def test_a_known_header_sends_only_its_number() -> None:
    numbers = LayoutNumbers()
    first = numbers.messages(_cut(b"{}"), 1, 0, 0)
    again = numbers.messages(_cut(b"{}"), 2, 0, 0)
    assert [type(message) for message in first] == [m.InferLayout, m.InferCall]
    assert again == [m.InferCall(2, 1, b"tensors", 0, 0)]


@pytest.mark.parametrize(
    ("layouts", "error"),
    [
        ([m.InferLayout(2, "simple", "", "", b"{}"), m.InferLayout(2, "simple", "", "", b"{}")], "must grow"),
        ([m.InferLayout(1, "simple", "", "", b"x" * (MAX_HEADER + 1))], "at most"),
        ([m.InferLayout(1, "simple", "", "", b"")], "0 bytes"),
        ([m.InferLayout(1, "", "", "", b"{}")], "without a model name"),
        ([m.InferLayout(1, "simple", "1a", "", b"{}")], "not a number"),
    ],
)
def test_layouts_that_break_the_rules_are_refused(layouts: list[m.InferLayout], error: str) -> None:
    table = LayoutTable(lambda *key: key)
    with pytest.raises(LayoutError, match=error):
        for layout in layouts:
            table.define(layout)


def test_a_number_the_core_does_not_hold_is_refused() -> None:
    table = LayoutTable(lambda *key: key)
    table.define(m.InferLayout(1, "simple", "", "", b"{}"))
    with pytest.raises(LayoutError, match="layout 2 is not one of the 1 held"):
        table.get(2)


# -- answers ------------------------------------------------------------------------------------

BINARY = [(b"content-type", b"application/octet-stream"), (b"inference-header-content-length", b"182")]
JSON = [(b"content-type", b"application/json")]


@pytest.mark.parametrize(
    "headers",
    [BINARY, JSON, [*BINARY, (b"content-encoding", b"gzip")], [*JSON, (b"content-encoding", b"deflate")]],
)
def test_inference_answers_come_back_short_and_rebuild_to_the_same_headers(
    headers: list[tuple[bytes, bytes]],
) -> None:
    answer = answer_message(7, HttpResponse(200, b"body", headers))
    assert isinstance(answer, m.InferAnswer) and answer.body == b"body"
    assert answer_headers(answer.json_length, answer.content_encoding) == headers


@pytest.mark.parametrize(
    "response",
    [
        HttpResponse(400, b'{"error":"x"}', JSON),
        HttpResponse(200, b"", [*BINARY, (b"x-extra", b"1")]),
        HttpResponse(200, b"", [BINARY[1], BINARY[0]]),
        HttpResponse(200, b"", [BINARY[0], (b"inference-header-content-length", b"-1")]),
        HttpResponse(200, b"", []),
    ],
)
def test_any_other_answer_comes_back_whole(response: HttpResponse) -> None:
    assert answer_message(7, response) == m.HttpAnswer(
        7, response.status, response.headers, response.body, False
    )


# -- a worker and the core, linked by a real channel, around a real core --------------------------


def _with_core(
    tmp_path: Path, scenario: Callable[[HttpApp, WorkerSession, HttpForwarder], Awaitable[None]],
    restrictions: Restrictions | None = None,
) -> None:  # fmt: skip
    write_simple(tmp_path)

    async def run() -> None:
        async with running_core(tmp_path, "simple") as core:
            app = HttpApp(core, restrictions=restrictions)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            session = WorkerSession(0, app, {})
            session.channel = await Channel.open(ours, session.on_message, session.on_closed, 1 << 24)
            link = CoreLink()
            link.channel = await Channel.open(theirs, link.deliver, link.closed, ANSWER_FRAME_LIMIT)
            try:
                await scenario(app, session, HttpForwarder(link, LayoutNumbers()))
            finally:
                link.channel.close()

    asyncio.run(run())


def _same(via_worker: HttpResponse, direct: HttpResponse) -> None:
    assert (via_worker.status, via_worker.headers) == (direct.status, direct.headers)
    if (b"content-encoding", b"gzip") in direct.headers:  # gzip stamps the time: compare what it holds
        assert gzip.decompress(via_worker.body) == gzip.decompress(direct.body)
    else:
        assert via_worker.body == direct.body


def test_requests_of_one_header_cross_as_one_layout_and_get_the_whole_requests_answers(
    tmp_path: Path,
) -> None:
    async def scenario(app: HttpApp, session: WorkerSession, forwarder: HttpForwarder) -> None:
        for seed in range(6):
            first, second = _pair(seed)
            body, size = _body(first, second)
            via_worker = await forwarder(_request(body, size))
            assert via_worker.status == 200
            _same(via_worker, await app(_request(body, size)))
            length = int(dict(via_worker.headers)[b"inference-header-content-length"])
            answer = httpclient.InferenceServerClient.parse_response_body(
                via_worker.body, header_length=length
            )
            np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), first + second)
        assert session.layouts is not None and len(session.layouts) == 1

    _with_core(tmp_path, scenario)


def test_errors_and_compressed_answers_are_the_whole_requests(tmp_path: Path) -> None:
    body, size = _body(*_pair(1))
    cases: list[Callable[[], HttpRequest]] = [
        lambda: _request(body[:-4], size),  # tensors cut short: the decoder's own 400
        lambda: _request(body, size, "/v2/models/nope/infer"),  # unknown model: 404
        lambda: _request(body, size, "/v2/models/simple/versions/7/infer"),  # no such version
        lambda: _request(body, size, accept_encoding="gzip"),
        lambda: _request(body.replace(b"INPUT0", b"INPUTX"), size),  # an input the model lacks
    ]

    async def scenario(app: HttpApp, session: WorkerSession, forwarder: HttpForwarder) -> None:
        statuses = []
        for case in cases:  # a request apiece: the forwarder lets go of a body it sent
            via_worker = await forwarder(case())
            _same(via_worker, await app(case()))
            statuses.append(via_worker.status)
        assert statuses == [400, 404, 404, 200, 400]
        assert session.layouts is not None and len(session.layouts) == len(cases)

    _with_core(tmp_path, scenario)


def test_json_requests_cross_in_binary_and_get_the_whole_requests_answers(tmp_path: Path) -> None:
    async def scenario(app: HttpApp, session: WorkerSession, forwarder: HttpForwarder) -> None:
        for seed in range(4):
            first, second = _pair(seed)
            via_worker = await forwarder(_request(_json_body(first, second), None))
            _same(via_worker, await app(_request(_json_body(first, second), None)))
            answer = orjson.loads(via_worker.body)  # asked as JSON, answered as JSON
            assert answer["outputs"][0]["data"] == (first + second).ravel().tolist()
        assert session.layouts is not None and len(session.layouts) == 1  # one header for the four
        first, second = _pair(9)
        via_worker = await forwarder(_request(_json_body(first, second, binary_outputs=True), None))
        _same(via_worker, await app(_request(_json_body(first, second, binary_outputs=True), None)))
        assert dict(via_worker.headers)[b"content-type"] == b"application/octet-stream"

    _with_core(tmp_path, scenario)


def test_json_requests_the_core_refuses_are_refused_in_the_whole_requests_words(tmp_path: Path) -> None:
    first, second = _pair(2)
    cases: list[Callable[[], bytes]] = [
        lambda: _json_body(first.astype(np.float32), second.astype(np.float32)),  # re-encoded; wrong type
        lambda: _json_body(first[:, :8], second[:, :8]),  # re-encoded; a shape the model does not take
        lambda: _json_body(first, second).replace(b"INPUT0", b"INPUTX"),  # re-encoded; no such input
        lambda: _json_body(first, second).replace(b'"shape":[1,16]', b'"shape":[1,15]', 1),  # whole
        lambda: _json_body(first, second).replace(b'"INT32"', b'"BF16"', 1),  # whole
    ]

    async def scenario(app: HttpApp, session: WorkerSession, forwarder: HttpForwarder) -> None:
        for case in cases:
            via_worker = await forwarder(_request(case(), None))
            _same(via_worker, await app(_request(case(), None)))
            assert via_worker.status == 400, via_worker.body
        assert session.layouts is not None and len(session.layouts) == 3

    _with_core(tmp_path, scenario)


def test_a_worker_naming_a_layout_the_core_does_not_hold_is_dropped(tmp_path: Path) -> None:
    async def scenario(app: HttpApp, session: WorkerSession, forwarder: HttpForwarder) -> None:
        forwarder.link.send_now(m.InferCall(1, 99, b"", 0, 0))
        for _ in range(100):
            if session.channel is not None and session.channel.closed:
                break
            await asyncio.sleep(0.01)
        assert session.channel is not None and session.channel.closed

    _with_core(tmp_path, scenario)


def test_where_inference_is_restricted_the_core_takes_no_layouts(tmp_path: Path) -> None:
    restricted = Restrictions.parse(["inference:key=value"], "--http-restricted-api")

    async def scenario(app: HttpApp, session: WorkerSession, forwarder: HttpForwarder) -> None:
        assert session.layouts is None
        forwarder.link.send_now(m.InferLayout(1, "simple", "", "", b"{}"))
        for _ in range(100):
            if session.channel is not None and session.channel.closed:
                break
            await asyncio.sleep(0.01)
        assert session.channel is not None and session.channel.closed

    _with_core(tmp_path, scenario, restricted)
