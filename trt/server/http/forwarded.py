"""Front ends that answer through the HTTP app under routes of their own (SageMaker, Vertex AI).

Triton's SageMaker and Vertex AI servers are its HTTP server with other routes and one difference in
the infer envelope: the JSON header's size comes in the ``Content-Type`` (``<mime>;json-header-size=N``)
instead of ``Inference-Header-Content-Length``, and bodies are never compressed. These helpers turn such
a request into the HTTP app's own, so the two front ends share its decoding, errors and restrictions.
"""

from __future__ import annotations

from trt.server.core.errors import InvalidArgument
from trt.server.http.header_numbers import INT32_MAX, INT32_MIN, leading_integer
from trt.server.http.messages import HttpRequest

_COMPRESSION_HEADERS = ("content-encoding", "accept-encoding")


def json_header_size(content_type: str | None, mime_prefix: str, body_length: int) -> int | None:
    """The JSON header's size that ``content_type`` announces, or None when it is a plain JSON body.

    The checks and messages are Triton's (``GetInferenceHeaderLength`` of its SageMaker and Vertex AI
    servers): the binary MIME type must start the header, the size is read as ``std::stoi`` reads it
    (leading digits, trailing text ignored) and must lie within the body.
    """
    if content_type is None:
        return None
    position = content_type.find(mime_prefix)
    if position < 0:
        return None
    if position != 0:
        raise InvalidArgument(
            f"expect MIME type for binary data starts with '{mime_prefix}', got: {content_type}"
        )
    text = content_type[len(mime_prefix) :]
    value = leading_integer(text)
    if value is None:
        raise InvalidArgument(f"Unable to parse inference header size, got: {text}")
    if not INT32_MIN <= value <= INT32_MAX:
        raise InvalidArgument(f"Unable to parse inference header size, value is out of range, got: {text}")
    if value < 0 or value > body_length:
        raise InvalidArgument(f"inference header size should be in range (0, {body_length}), got: {text}")
    return value


def as_http_request(
    request: HttpRequest, path: str, method: str | None = None, header_size: int | None = None
) -> HttpRequest:
    """``request`` as the HTTP app's route ``path``: identity encoding both ways (as Triton's SageMaker
    and Vertex AI servers), and the JSON header's size, if any, in Inference-Header-Content-Length."""
    headers = {
        name: value
        for name, value in request.headers.items()
        if name not in _COMPRESSION_HEADERS and name != "inference-header-content-length"
    }
    if header_size is not None:
        headers["inference-header-content-length"] = str(header_size)
    return HttpRequest(
        method or request.method,
        path,
        request.query,
        headers,
        request.body,
        body_too_large=request.body_too_large,
        started_ns=request.started_ns,
        received_ns=request.received_ns,
    )
