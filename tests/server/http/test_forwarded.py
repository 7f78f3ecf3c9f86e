"""The envelope SageMaker and Vertex AI use for binary tensors: the JSON header's size in the content
type, read as Triton reads it (C++ ``std::stoi``: leading digits count, trailing text is ignored)."""

from __future__ import annotations

import pytest

from trt.server.core.errors import InvalidArgument
from trt.server.http.forwarded import as_http_request, json_header_size
from trt.server.http.messages import HttpRequest

MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="


@pytest.mark.parametrize(
    "content_type, expected",
    [
        (None, None),
        ("application/json", None),
        (f"{MIME}12", 12),
        (f"{MIME} 12", 12),
        (f"{MIME}12abc", 12),  # what std::stoi reads
        (f"{MIME}+7", 7),
        (f"{MIME}0", 0),
        (f"{MIME}100", 100),
        # leading zeros, more digits than int() reads: still the number
        pytest.param(f"{MIME}{'0' * 5000}12", 12, id="5000 zeros, 12"),
        pytest.param(f"{MIME}-{'0' * 5000}0", 0, id="-, 5000 zeros, 0"),
    ],
)
def test_header_size_read_as_triton_reads_it(content_type: str | None, expected: int | None) -> None:
    assert json_header_size(content_type, MIME, 100) == expected


@pytest.mark.parametrize(
    "content_type, message",
    [
        (f"text/{MIME}12", "expect MIME type for binary data starts with"),
        (f"{MIME}abc12", "Unable to parse inference header size, got: abc12"),
        (f"{MIME}", "Unable to parse inference header size"),
        (f"{MIME}99999999999", "value is out of range"),
        # not int()'s ValueError (a 500 until 2026-11-28)
        pytest.param(f"{MIME}{'9' * 5000}", "value is out of range", id="5000 nines"),
        pytest.param(f"{MIME}-{'9' * 5000}", "value is out of range", id="-, 5000 nines"),
        pytest.param(f"{MIME}-{'0' * 5000}5", "should be in range (0, 100)", id="-, 5000 zeros, 5"),
        (f"{MIME}-1", "should be in range (0, 100), got: -1"),
        (f"{MIME}101", "should be in range (0, 100), got: 101"),
    ],
)
def test_bad_header_sizes_are_invalid_arguments(content_type: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        json_header_size(content_type, MIME, 100)


def test_forwarded_request_drops_compression_and_carries_the_header_size() -> None:
    original = HttpRequest(
        "POST", "/invocations", "", {"content-encoding": "gzip", "accept-encoding": "gzip",
        "inference-header-content-length": "3", "x-amzn-sagemaker-target-model": "m"}, b"{}",
    )  # fmt: skip
    forwarded = as_http_request(original, "/v2/models/m/infer", header_size=2)
    assert forwarded.path == "/v2/models/m/infer" and forwarded.method == "POST"
    assert forwarded.headers == {"x-amzn-sagemaker-target-model": "m", "inference-header-content-length": "2"}
    assert as_http_request(original, "/v2/health/ready", method="GET").headers == {
        "x-amzn-sagemaker-target-model": "m"
    }
