"""``import triton_python_backend_utils as pb_utils``: the API a Triton ``model.py`` is written against.

Same names and behaviour as Triton's Python backend, so a user's model runs unchanged. The names
are made in the ``trt_pb_*`` modules beside this one, each for one part of the API; this module
gathers them under the one name models import. The process that hosts the model
(``trt_python_stub``) installs a runtime (``trt_pb_runtime``) that carries BLS calls, response
senders, metrics and log lines back to the server.
"""

from __future__ import annotations

# json, struct and np as Triton's module has them: a model may reach them through pb_utils.
import json
import struct

import numpy as np
from trt_pb_config import (
    ModelConfig,
    get_input_config_by_name,
    get_output_config_by_name,
    using_decoupled_model_transaction_policy,
)
from trt_pb_errors import TritonError, TritonModelException
from trt_pb_logger import Logger
from trt_pb_metrics import Metric, MetricFamily
from trt_pb_model_control import is_model_ready, load_model, unload_model
from trt_pb_requests import (
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_GPU,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponse,
    InferenceResponseSender,
    InferenceTrace,
    PreferredMemory,
    ResponseIterator,
    get_input_tensor_by_name,
    get_output_tensor_by_name,
)
from trt_pb_tensors import (
    TRITON_STRING_TO_NUMPY,
    Tensor,
    deserialize_bytes_tensor,
    numpy_to_triton_string,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)

__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "Logger",
    "Metric",
    "MetricFamily",
    "ModelConfig",
    "PreferredMemory",
    "ResponseIterator",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "json",
    "load_model",
    "np",
    "numpy_to_triton_string",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "struct",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]
