"""One completion, whole or streamed: the model's responses turned into OpenAI's bodies and events.

A streamed answer waits for the model's first response before the status line goes out, so that a
request the model refuses (a bad sampling setting) is an ordinary error with its status; what fails
later arrives as an error event, then ``[DONE]``. A client that goes away mid-stream cancels the
request: closing the event source closes ``generate``, which closes the core's stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from trt.server.core.errors import ServerError
from trt.server.core.server import InferenceServer
from trt.server.http.messages import HttpResponse, close_stream
from trt.server.openai.errors import OpenAIError, from_server_error
from trt.server.openai.generation import Generated, VllmContract, generate
from trt.server.openai.responses import DONE, Completion, Usage, error_event
from trt.server.openai.tokenizer import ModelTokenizer

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


@dataclass(frozen=True)
class Job:
    """What to ask the model and how to answer the client."""

    completion: Completion
    prompt: str  # the model's text_input
    echo: str  # put before the generated text (the prompt, for completions with echo)
    stream: bool
    include_usage: bool
    tokenizer: ModelTokenizer


@dataclass
class _Tally:
    """What the responses of one request add up to."""

    texts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def add(self, generated: Generated) -> None:
        self.texts.append(generated.text)
        self.finish_reason = generated.finish_reason or self.finish_reason
        if self.prompt_tokens is None:
            self.prompt_tokens = generated.prompt_tokens
        if generated.completion_tokens is not None:
            self.completion_tokens = (self.completion_tokens or 0) + generated.completion_tokens

    async def usage(self, job: Job) -> Usage | None:
        """The model's own counts; else the tokenizer's; else none (never a guess)."""

        async def own_or_counted(own: int | None, text: str, with_special_tokens: bool) -> int | None:
            return own if own is not None else await job.tokenizer.count(text, with_special_tokens)

        # What the model did not report comes from the counting process, both counts side by side.
        prompt, completion = await asyncio.gather(
            own_or_counted(self.prompt_tokens, job.prompt, True),
            own_or_counted(self.completion_tokens, "".join(self.texts), False),
        )
        if prompt is None or completion is None:
            return None
        return Usage(prompt, completion)


async def answer(
    core: InferenceServer, contract: VllmContract, job: Job, sampling: dict[str, object]
) -> HttpResponse:
    request = contract.request(job.completion.id, job.prompt, sampling, job.stream)
    answers = generate(core, request)
    if not job.stream:
        tally = _Tally()
        async for generated in answers:
            tally.add(generated)
        body = job.completion.body(
            job.echo + "".join(tally.texts), tally.finish_reason or "stop", await tally.usage(job)
        )
        return HttpResponse(200, body, JSON_HEADERS)
    try:
        first = await anext(answers)
    except StopAsyncIteration:
        first = None
    return HttpResponse(200, headers=SSE_HEADERS, stream=_events(job, first, answers))


async def _events(
    job: Job, first: Generated | None, answers: AsyncIterator[Generated]
) -> AsyncIterator[bytes]:
    completion = job.completion
    tally = _Tally()
    try:
        if completion.chat:
            yield completion.chunk("", None, role=True)
        echo = job.echo
        pending = first
        while pending is not None:
            tally.add(pending)
            text, echo = echo + pending.text, ""
            if text or pending.finish_reason:
                yield completion.chunk(text, pending.finish_reason)
            pending = await anext(answers, None)
        if tally.finish_reason is None:  # the model did not say why it ended: it ended
            yield completion.chunk("", "stop")
        if job.include_usage:
            usage = await tally.usage(job)
            if usage is not None:
                yield completion.usage_chunk(usage)
    except ServerError as exc:
        yield error_event(from_server_error(exc).body())
    except OpenAIError as exc:
        yield error_event(exc.body())
    finally:
        await close_stream(answers)
    yield DONE
