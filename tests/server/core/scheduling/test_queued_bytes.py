"""The one bound on bytes that requests hold inside the server (--max-queued-bytes)."""

from __future__ import annotations

import numpy as np
import pytest

from trt.server.core.errors import OverLimit
from trt.server.core.scheduling.queued_bytes import QueuedBytes, request_bytes
from trt.server.core.types import InferenceRequest, InputTensor


def test_a_request_that_would_pass_the_bound_is_refused_and_counts_nothing() -> None:
    queued = QueuedBytes(100)
    assert queued.reserve(60)
    assert not queued.reserve(41)
    assert queued.held == 60
    queued.admit(40)
    assert queued.held == 100
    with pytest.raises(OverLimit, match="--max-queued-bytes") as refused:
        queued.admit(1)
    assert refused.value.http_status == 503 and refused.value.grpc_code_name == "UNAVAILABLE"
    assert queued.held == 100
    queued.release(100)
    assert queued.held == 0


def test_zero_means_no_bound() -> None:
    queued = QueuedBytes(0)
    assert queued.reserve(1 << 40) and queued.held == 1 << 40


def test_a_requests_bytes_count_bytes_elements_by_their_length() -> None:
    strings = np.array([b"a" * 1000, b"", "é"], dtype=np.object_)
    request = InferenceRequest(
        "m",
        inputs=[
            InputTensor("F", "FP32", (4, 4), np.zeros((4, 4), np.float32)),
            InputTensor("S", "BYTES", (3,), strings),
            InputTensor("R", "INT32", (1,), None, {"shared_memory_region": "r"}),  # not resolved yet
        ],
    )
    assert request_bytes(request) == 64 + strings.nbytes + 1000 + 0 + 1
