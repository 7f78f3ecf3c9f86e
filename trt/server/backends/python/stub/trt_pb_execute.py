"""One ``execute(requests)`` call in a Python model's process: its requests built from the server's
message, the model run, and its result sent back, as Triton's stub checks and words it (responses
one per request, None in a rescheduled request's place, the text for a failed call)."""

from __future__ import annotations

import asyncio
import inspect
import time
import traceback
from typing import Any

import _ipc
import triton_python_backend_utils as pb_utils


def describe(response: pb_utils.InferenceResponse, arena: _ipc.Arena | None) -> dict[str, Any]:
    if response.has_error():
        error = response.error()
        return {"error": (error.message(), error.code()), "outputs": [], "parameters": {}}
    tensors = {t._name: t._data for t in response._output_tensors}
    return {"error": None, "outputs": _ipc.pack_tensors(tensors, arena), "parameters": response._parameters}


def _error_message(exc: Exception) -> tuple[str, int]:
    """What an exception ``execute`` raised says, as Triton's stub words it (its type first), and its
    code (a ``TritonError`` raised, which trt allows, keeps its own)."""
    if isinstance(exc, pb_utils.TritonError):
        return exc.message(), exc.code()
    return f"{type(exc).__name__}: {exc}", pb_utils.TritonError.INTERNAL


def _fail(runtime: Any, execution: int, started_ns: int, message: str,
          code: int = pb_utils.TritonError.INTERNAL, trace: str | None = None) -> None:  # fmt: skip
    """End an execution whose ``execute`` failed: every request of it gets Triton's text (without
    the traceback Triton appends, which shows clients the server's paths; it goes to the log)."""
    text = f"Failed to process the request(s) for model '{runtime.instance_name}', message: {message}"
    failure: dict[str, Any] = {"error": (text, code), "started_ns": started_ns}
    if trace is not None:
        failure["traceback"] = trace
    runtime.send(("result", execution, failure))


def _input_tensors(packed: list[tuple[Any, ...]], arena: _ipc.Arena | None) -> list[pb_utils.Tensor]:
    wrap = pb_utils.Tensor._wrap
    return [wrap(name, array) for name, array in _ipc.unpack_tensors(packed, arena, copy=False).items()]


def execute(runtime: Any, model: Any, loop: asyncio.AbstractEventLoop, execution: int,
            slot: int | None, metas: list[tuple[Any, ...]]) -> None:  # fmt: skip
    """Run one ``execute(requests)`` and send its result. Its tensors are in the arenas of ``slot``
    (None: all inline)."""
    started_ns = time.perf_counter_ns()  # CLOCK_MONOTONIC: the server's clock too
    input_arena = output_arena = None
    if slot is not None:
        input_arena, output_arena = runtime.input_arenas[slot], runtime.output_arenas[slot]
        output_arena.reset()
    received = pb_utils.InferenceRequest._received
    requests = [
        received(
            _input_tensors(inputs, input_arena),
            request_id,
            list(outputs),
            parameters,
            correlation_id,
            flags,
            (execution, index),
        )
        for index, (request_id, inputs, outputs, parameters, correlation_id, flags) in enumerate(metas)
    ]
    try:
        result = model.execute(requests)
        if type(result) is not list and inspect.isawaitable(result):
            result = loop.run_until_complete(result)
    except Exception as exc:
        _fail(runtime, execution, started_ns, *_error_message(exc), traceback.format_exc())
        return
    rescheduled = _rescheduled(requests)
    if result is None:  # responses went through response senders
        _owe_finals(requests, rescheduled)
        del requests  # a request no one holds any more, and no sender ever held, is reported with this
        done: dict[str, Any] = {"responses": None, "started_ns": started_ns}
        if rescheduled:
            done["rescheduled"] = rescheduled
        runtime.send(("result", execution, done))
        return
    if runtime.decoupled:  # Triton's words: a decoupled model answers through its response senders
        message = (
            f"Python model '{runtime.instance_name}' is using the decoupled mode and the execute function "
            "must return None."
        )
        _fail(runtime, execution, started_ns, message)
        return
    if not isinstance(result, (list, tuple)):  # Triton's words (a tuple, which it refuses, is taken)
        _fail(
            runtime,
            execution,
            started_ns,
            f"Expected a list in the execute return, found type '{type(result)}'.",
        )
        return
    if len(result) != len(requests):  # Triton's words
        message = (
            "Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
            f"InferenceRequest(s) size is:{len(requests)}, and InferenceResponse(s) size is:{len(result)}"
        )
        _fail(runtime, execution, started_ns, message)
        return
    for index in rescheduled:
        if result[index] is not None:  # Triton's words, its spelling included
            message = (
                "Expected a None object in the execute function return list for reschduled request, "
                f"found type '{type(result[index])}'."
            )
            _fail(runtime, execution, started_ns, message)
            return
    described = [
        describe(r, output_arena)
        if isinstance(r, pb_utils.InferenceResponse)
        else None
        if index in rescheduled
        else {"error": (f"execute() returned {type(r).__name__}, not InferenceResponse", 1), "outputs": []}
        for index, r in enumerate(result)
    ]
    done = {"responses": described, "started_ns": started_ns}
    if output_arena is not None and output_arena.used > _ipc.LARGE_ARENA_BYTES:
        done["arena_bytes"] = output_arena.used
    if rescheduled:
        done["rescheduled"] = rescheduled
    try:
        runtime.send(("result", execution, done))
    except pb_utils.TritonModelException as exc:  # a value in a response that cannot cross
        _fail(runtime, execution, started_ns, f"execute() returned a response that {exc}")


def _rescheduled(requests: list[pb_utils.InferenceRequest]) -> list[int]:
    """Which requests ``execute`` released with ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``: each runs
    again in a later ``execute``, whose request's sender answers it, so the senders made for them
    in this one retire (without reporting a missing final flag)."""
    found = []
    for index, request in enumerate(requests):
        if request._release_flags != pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL and request._rescheduled():
            found.append(index)
            if request._sender is not None:
                request._sender._retire()
    return found


def _owe_finals(requests: list[pb_utils.InferenceRequest], rescheduled: list[int]) -> None:
    """Mark requests whose answers go through response senders: one dropped without its final flag
    (or never made) is reported when it is collected. A function of its own so that no loop variable
    of ``execute`` keeps the last request alive past the result."""
    for index, request in enumerate(requests):
        request._owes_final = index not in rescheduled
