"""Driving a model through the I/O contract of Triton's vLLM backend, as Triton's front end does.

The request: ``text_input`` (the prompt), ``stream``, ``sampling_parameters`` (JSON: vLLM's
sampling fields, ``max_tokens`` always set), ``exclude_input_in_output`` (true: the front end puts
the prompt in front itself when asked to echo) and the ``return_num_input_tokens`` /
``return_num_output_tokens`` / ``return_finish_reason`` flags, each only when the model declares
that input. A model without ``sampling_parameters`` gets the settings as request parameters, which
is where vLLM's backend looks then. Each response gives ``text_output`` (new text when streamed,
all of it otherwise) and, when asked, the token counts and the finish reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from trt.protos import model_config_pb2
from trt.server.core.errors import ServerError
from trt.server.core.server import InferenceServer
from trt.server.core.types import InferenceRequest, InferenceResponse, InputTensor
from trt.server.http.messages import close_stream
from trt.server.openai.errors import OpenAIError, invalid

PROMPT_INPUT = "text_input"
TEXT_OUTPUT = "text_output"
_FLAGS = ("return_num_input_tokens", "return_num_output_tokens", "return_finish_reason")


@dataclass(frozen=True, slots=True)
class Generated:
    """One response of the model, read: the text it adds and what it says about itself."""

    text: str
    finish_reason: str | None  # "stop" / "length" when the model says; None otherwise
    prompt_tokens: int | None
    completion_tokens: int | None  # tokens in this response (streamed) or in all (not streamed)


@dataclass(frozen=True, slots=True)
class VllmContract:
    """What a model declares of the vLLM backend's inputs: which of them the front end may send."""

    model: str
    inputs: frozenset[str]
    batched: bool  # max_batch_size > 0: every tensor gets a leading batch dimension of one

    @classmethod
    def of(cls, model: str, config: model_config_pb2.ModelConfig) -> VllmContract:
        inputs = frozenset(tensor.name for tensor in config.input)
        outputs = {tensor.name for tensor in config.output}
        if PROMPT_INPUT not in inputs or TEXT_OUTPUT not in outputs:
            raise invalid(
                f"model '{model}' does not take text: OpenAI requests need a model with the vLLM backend's "
                f"'{PROMPT_INPUT}' input and '{TEXT_OUTPUT}' output",
                "model",
                "model_not_supported",
            )
        return cls(model, inputs, config.max_batch_size > 0)

    def request(
        self, request_id: str, prompt: str, sampling: dict[str, Any], stream: bool
    ) -> InferenceRequest:
        tensors = [self._tensor(PROMPT_INPUT, np.array([prompt.encode()], dtype=np.object_))]
        for name, value in (
            ("stream", stream),
            ("exclude_input_in_output", True),
            *((f, True) for f in _FLAGS),
        ):
            if name in self.inputs:
                tensors.append(self._tensor(name, np.array([value], dtype=np.bool_)))
        parameters: dict[str, Any] = {}
        if "sampling_parameters" in self.inputs:
            encoded = orjson.dumps(sampling)
            tensors.append(self._tensor("sampling_parameters", np.array([encoded], dtype=np.object_)))
        else:
            parameters = _as_parameters(self.model, sampling)
        return InferenceRequest(self.model, "", request_id, tensors, None, parameters)

    def _tensor(self, name: str, data: np.ndarray) -> InputTensor:
        return contract_tensor(name, data, self.batched)


def contract_tensor(name: str, data: np.ndarray, batched: bool) -> InputTensor:
    """One of the contract's BYTES or BOOL inputs, with a batch of one where the model batches."""
    if batched:
        data = data.reshape(1, *data.shape)
    datatype = "BYTES" if data.dtype == np.object_ else "BOOL"
    return InputTensor(name, datatype, tuple(data.shape), data)


def _as_parameters(model: str, sampling: dict[str, Any]) -> dict[str, Any]:
    parameters = {}
    for key, value in sampling.items():
        if isinstance(value, list):
            if len(value) != 1:
                raise invalid(
                    f"model '{model}' has no sampling_parameters input, so '{key}' can be one string only",
                    key,
                )
            value = value[0]
        parameters[key] = value
    return parameters


async def generate(core: InferenceServer, request: InferenceRequest) -> AsyncIterator[Generated]:
    """The model's responses as they come; its first error is raised (the core's own error, which
    keeps the status the model gave it). Closing this iterator cancels the request."""
    stream = core.infer_stream(request)
    try:
        async for item in stream:
            if item.error is not None:
                if isinstance(item.error, ServerError):
                    raise item.error
                raise OpenAIError(500, f"the model failed: {item.error}")
            if item.response is not None:
                yield read_response(item.response)
    finally:
        await close_stream(stream)


def read_response(response: InferenceResponse) -> Generated:
    outputs = {output.name: output.data for output in response.outputs if output.data is not None}
    text = outputs.get(TEXT_OUTPUT)
    reason = _first(outputs.get("finish_reason"))
    return Generated(
        text=_text(_first(text)) if text is not None else "",
        finish_reason=_text(reason) if reason is not None and _text(reason) not in ("None", "") else None,
        prompt_tokens=_count(outputs.get("num_input_tokens")),
        completion_tokens=_count(outputs.get("num_output_tokens")),
    )


def _first(data: np.ndarray | None) -> Any:
    """The first element: the one choice asked for (n=1)."""
    if data is None or data.size == 0:
        return None
    return data.reshape(-1)[0]


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)


def _count(data: np.ndarray | None) -> int | None:
    value = _first(data)
    if value is None or not isinstance(value, np.integer | int):
        return None
    return int(value)
