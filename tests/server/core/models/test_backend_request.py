"""What a backend is handed of a request's parameters: never the reserved ones (sequence, scheduling,
transport flags), the scheduling ones as fields."""

from __future__ import annotations

import numpy as np

from trt.server.core.backends.base import SEQUENCE_START
from trt.server.core.models.version import _backend_request
from trt.server.core.types import InferenceRequest

FEEDS = {"INPUT0": np.zeros(4, np.float32)}


def test_the_grpc_control_flag_alone_reaches_the_backend_as_no_parameters() -> None:
    """perf_analyzer sends triton_enable_empty_final_response on every gRPC request."""
    request = InferenceRequest("m", parameters={"triton_enable_empty_final_response": True})
    backend = _backend_request(request, FEEDS, ["OUTPUT0"])
    assert backend.parameters == {}
    assert (backend.correlation_id, backend.flags, backend.priority, backend.timeout_us) == (0, 0, 0, 0)
    assert backend.requested_outputs == ("OUTPUT0",)


def test_reserved_parameters_become_fields_and_the_rest_is_passed_on() -> None:
    request = InferenceRequest(
        "m",
        parameters={
            "triton_enable_empty_final_response": True,
            "sequence_id": 7,
            "sequence_start": True,
            "priority": 2,
            "timeout": 500,
            "custom": "kept",
        },
    )
    backend = _backend_request(request, FEEDS, ["OUTPUT0"])
    assert backend.parameters == {"custom": "kept"}
    assert (backend.correlation_id, backend.flags, backend.priority, backend.timeout_us) == (
        7,
        SEQUENCE_START,
        2,
        500,
    )
