"""Binary inference requests sent to the core as a layout number and their tensors' bytes.

A client sends the same JSON header with every inference request of a kind (perf_analyzer, tritonclient
in a loop): only the tensors after it change. Forwarded whole, each such request costs the core a frame
with the request line, every header and the body, an ``HttpRequest`` and a route found again. Sent
apart, the worker numbers each (model, version, Accept-Encoding, JSON header) it forwards, sends that
once as an ``InferLayout``, and then each request as an ``InferCall``: the number and the bytes after
the header. The core answers it through ``HttpApp.answer_split``, which decodes with the header's
remembered plan: the same decoding, checks, errors, statistics and tracing as the whole body sent to
the same route. Its answer comes back as an ``InferAnswer`` when it is a 200 whose headers the worker
can rebuild from the JSON's length and the content encoding (every inference answer but errors), else
as the ``HttpAnswer`` any request gets.

Both ends keep the last ``LAYOUTS`` numbers: the worker forgets its oldest when it numbers one more,
and the core, reading the same ``InferLayout``s in the same order, forgets the same one. Numbers only
grow, a header is at most ``MAX_HEADER`` bytes, and a number the core does not hold is a broken worker:
what the core keeps for a worker stays bounded whatever the worker sends.

Sent apart: POSTs to ``/v2/models/<name>[/versions/<n>]/infer`` with an ``Inference-Header-Content-Length``
and no ``Content-Encoding``, and JSON ones whose tensors the worker re-encodes in binary
(``json_tensors``), when ``--http-restricted-api`` leaves inference open (the core checks restrictions
on headers, which an ``InferCall`` does not carry). Everything else goes whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from trt.server.frontend import messages as m
from trt.server.frontend.json_tensors import binary_parts
from trt.server.http.messages import HttpRequest, HttpResponse

LAYOUTS = 64
MAX_HEADER = 4096
_MAX_NAME = 1024  # model names and versions, and Accept-Encoding values, in a layout

_INFER_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?/infer")


class LayoutError(ValueError):
    """A layout message that breaks the rules above: the worker that sent it is broken."""


@dataclass(frozen=True, slots=True)
class SplitRequest:
    """An HTTP request that may go apart: its layout's key and the bytes after its JSON header."""

    key: tuple[str, str, str, bytes]  # model, version, Accept-Encoding, JSON header
    binary: bytes


def split(request: HttpRequest, max_body_size: int) -> SplitRequest | None:
    """``request`` cut at its JSON header, or None when it must go whole. A JSON body whose tensors
    are JSON data is cut as the binary body it re-encodes to (``json_tensors``), if that is at most
    ``max_body_size`` bytes."""
    if request.method != "POST":
        return None
    match = _INFER_PATH.fullmatch(request.path)
    if match is None:
        return None
    headers = request.headers
    if "content-encoding" in headers:
        return None
    model, version = match.group(1), match.group(2) or ""
    accept_encoding = headers.get("accept-encoding", "")
    if len(model) > _MAX_NAME or len(accept_encoding) > _MAX_NAME:
        return None
    length = headers.get("inference-header-content-length")
    body = request.body
    if length is None:
        parts = binary_parts(model, version, body, MAX_HEADER, max_body_size)
        return None if parts is None else SplitRequest((model, version, accept_encoding, parts[0]), parts[1])
    # ASCII digits, few enough for int(): anything else goes whole, for the core to refuse
    if not (length.isascii() and length.isdigit() and len(length) <= 10):
        return None
    size = int(length)
    if not 0 < size <= min(len(body), MAX_HEADER):
        return None
    return SplitRequest((model, version, accept_encoding, body[:size]), body[size:])


class LayoutNumbers:
    """The worker's end: the number of each layout it sent, the newest ``LAYOUTS``."""

    def __init__(self) -> None:
        self._numbers: dict[tuple[str, str, str, bytes], int] = {}
        self._last = 0

    def messages(self, split: SplitRequest, call: int, started_ns: int, received_ns: int) -> list[m.Message]:
        """What to send for ``split``, in order: its layout first when it is new. Sent as they come,
        with nothing between numbering and sending, so that the core reads layouts in this order."""
        number = self._numbers.get(split.key)
        out: list[m.Message] = []
        if number is None:
            if len(self._numbers) >= LAYOUTS:
                del self._numbers[next(iter(self._numbers))]
            self._last += 1
            number = self._numbers[split.key] = self._last
            model, version, accept_encoding, header = split.key
            out.append(m.InferLayout(number, model, version, accept_encoding, header))
        out.append(m.InferCall(call, number, split.binary, started_ns, received_ns))
        return out


@dataclass(frozen=True, slots=True)
class Layout:
    """The core's record of one layout."""

    header: bytes
    route: object  # ``HttpApp.infer_route``'s


class LayoutTable:
    """The core's end, for one worker: each layout by number, the newest ``LAYOUTS``."""

    def __init__(self, route: Callable[[str, str, int, str], object]) -> None:
        self._route = route
        self._layouts: dict[int, Layout] = {}
        self._last = 0

    def __len__(self) -> int:
        return len(self._layouts)

    def define(self, message: m.InferLayout) -> None:
        if message.layout <= self._last:
            raise LayoutError(f"layout {message.layout} after {self._last}: numbers must grow")
        if not 0 < len(message.header) <= MAX_HEADER:
            raise LayoutError(f"a layout's JSON header of {len(message.header)} bytes (at most {MAX_HEADER})")
        if not message.model_name or max(len(message.model_name), len(message.accept_encoding)) > _MAX_NAME:
            raise LayoutError("a layout without a model name, or with a name or encoding over the limit")
        if message.model_version and not message.model_version.isdigit():
            raise LayoutError(f"a layout's model version {message.model_version!r} is not a number")
        if len(self._layouts) >= LAYOUTS:
            del self._layouts[next(iter(self._layouts))]
        self._last = message.layout
        route = self._route(
            message.model_name, message.model_version, len(message.header), message.accept_encoding
        )
        self._layouts[message.layout] = Layout(message.header, route)

    def get(self, number: int) -> Layout:
        layout = self._layouts.get(number)
        if layout is None:
            raise LayoutError(f"layout {number} is not one of the {len(self._layouts)} held")
        return layout


# -- answers ------------------------------------------------------------------------------------

_JSON = (b"content-type", b"application/json")
_BINARY = (b"content-type", b"application/octet-stream")
_LENGTH = b"inference-header-content-length"
_ENCODING = b"content-encoding"


def answer_headers(json_length: int, content_encoding: str) -> list[tuple[bytes, bytes]]:
    """The headers of an inference answer, in the order ``HttpApp`` writes them."""
    headers = [_JSON] if json_length < 0 else [_BINARY, (_LENGTH, str(json_length).encode())]
    if content_encoding:
        headers.append((_ENCODING, content_encoding.encode("latin-1")))
    return headers


def answer_message(call: int, response: HttpResponse) -> m.Message:
    """What the core sends back for an ``InferCall``: an ``InferAnswer`` where its headers rebuild."""
    headers = response.headers
    if response.status == 200 and headers and headers[0] in (_JSON, _BINARY):
        json_length = -1
        rest = headers[1:]
        if headers[0] == _BINARY and rest and rest[0][0] == _LENGTH and rest[0][1].isdigit():
            json_length = int(rest[0][1])
            rest = rest[1:]
        encoding = rest[0][1].decode("latin-1") if len(rest) == 1 and rest[0][0] == _ENCODING else ""
        answer = m.InferAnswer(call, json_length, encoding, response.body)
        if answer_headers(json_length, encoding) == headers:
            return answer
    return m.HttpAnswer(call, response.status, headers, response.body, False)
