"""A request's inputs checked against a model's signature: refused in Triton's whole words."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from trt.protos import model_config_pb2
from trt.server.core.errors import InvalidInput
from trt.server.core.models.signature import ModelSignature
from trt.server.core.types import InputTensor


def _signature(max_batch_size: int) -> ModelSignature:
    config = text_format.Parse(
        f'name: "m" max_batch_size: {max_batch_size} input [{{ name: "X" data_type: TYPE_FP32 dims: [4] }}]',
        model_config_pb2.ModelConfig(),
    )
    return ModelSignature.build("m", config)


def _refusal(signature: ModelSignature, shape: tuple[int, ...]) -> str:
    tensor = InputTensor("X", "FP32", shape, np.zeros(shape, np.float32))
    with pytest.raises(InvalidInput) as refused:
        signature.check_inputs([tensor])
    return str(refused.value)


def test_a_wrong_shape_is_refused_in_tritons_words_to_the_last_space() -> None:
    # core's infer_request.cc: "... got [2,2]. " followed by the note, which is empty without batching
    assert _refusal(_signature(0), (2, 2)) == (
        "[request id: <id_unknown>] unexpected shape for input 'X' for model 'm'. Expected [4], got [2,2]. "
    )
    assert _refusal(_signature(8), (1, 3)) == (
        "[request id: <id_unknown>] unexpected shape for input 'X' for model 'm'. Expected [-1,4], "
        "got [1,3]. NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
        "dimension to be prepended to each input shape. If you want to specify the full shape including "
        "the batch dim in your input dims config, try setting max_batch_size to zero. See the model "
        "configuration docs for more info on max_batch_size."
    )
