"""The generate extension's two routes, answered from the core's stream of a request's responses.

``/generate`` answers the one response a model gives; ``/generate_stream`` sends each as a
server-sent event. As in Triton (``http_server.cc``, seen side by side with 2.51): the status is
settled by the first response, and an error the model answers with is a 400 whose body is the error,
on ``/generate_stream`` as an event (``data: {"error": ...}``), so that a client reading events sees
it; an error found before the model runs (an unknown model or input) is an ordinary JSON error with
its own status. A model that gives ``/generate`` other than one response is refused in Triton's words.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from trt.server.core.errors import InvalidArgument, ServerError
from trt.server.core.server import InferenceServer
from trt.server.core.types import InferenceRequest, InferenceResponse, StreamItem
from trt.server.http import generate
from trt.server.http.messages import HttpResponse, close_stream

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8")]


async def answer_generate(core: InferenceServer, request: InferenceRequest, streamed: bool) -> HttpResponse:
    """The answer to ``request``, decoded from a ``/generate`` or ``/generate_stream`` body."""
    answers = _answers(core.infer_stream(request))
    if not streamed:
        try:
            responses = [response async for response in answers]
        except ServerError as exc:
            if not exc.answered:
                raise
            return HttpResponse(400, generate.encode_generate_error(exc.message), JSON_HEADERS)
        if len(responses) != 1:
            given = f"model '{request.model_name}' gave {len(responses)}"
            raise InvalidArgument(  # Triton's words, then what came
                "generate expects model to produce exactly 1 response, use generate stream for model "
                f"that generates various number of responses ({given})"
            )
        return HttpResponse(200, generate.encode_generate_response(responses[0]), JSON_HEADERS)
    try:
        first = await anext(answers)
    except StopAsyncIteration:
        first = None
    except ServerError as exc:
        if not exc.answered:
            raise
        return HttpResponse(400, _error_event(exc.message), SSE_HEADERS)
    try:
        first_event = None if first is None else generate.encode_generate_response(first)
    except ServerError:
        await close_stream(answers)
        raise
    return HttpResponse(200, headers=SSE_HEADERS, stream=_events(first_event, answers))


async def _answers(stream: AsyncIterator[StreamItem]) -> AsyncIterator[InferenceResponse]:
    """The responses of a stream; its first error is raised (the end-only items are skipped)."""
    try:
        async for item in stream:
            if item.error is not None:  # a decoupled model's answer
                error = item.error if isinstance(item.error, ServerError) else ServerError(str(item.error))
                error.answered = True
                raise error
            if item.response is not None:
                yield item.response
    finally:
        await close_stream(stream)  # a generator: closing it tells the model, if it still runs


def _error_event(message: str) -> bytes:
    return b"data: " + generate.encode_generate_error(message) + b"\n\n"


async def _events(first: bytes | None, answers: AsyncIterator[InferenceResponse]) -> AsyncIterator[bytes]:
    """Server-sent events, one ``data:`` line per response (the first already encoded); an error
    after the first is an event too."""
    if first is None:
        return
    try:
        yield b"data: " + first + b"\n\n"
        async for response in answers:
            yield b"data: " + generate.encode_generate_response(response) + b"\n\n"
    except ServerError as exc:
        yield _error_event(exc.message)
    finally:
        await close_stream(answers)
