"""All-binary inference responses take their JSON header from a cache keyed by what it says: the
bytes must be what the general encoder writes, for every response, first time or not."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from trt.server.core.datatypes import tensor_to_bytes
from trt.server.core.types import InferenceResponse, OutputTensor
from trt.server.http import codec


def _output(name: str, data: np.ndarray, datatype: str) -> OutputTensor:
    return OutputTensor(name, datatype, tuple(data.shape), data)


def _expected(response: InferenceResponse) -> tuple[bytes, int]:
    """The general encoder's format, written out: model, version, then each output with its byte count."""
    raws = [bytes(tensor_to_bytes(o.data, o.datatype)) for o in response.outputs if o.data is not None]
    header = orjson.dumps(
        {
            "model_name": response.model_name,
            "model_version": response.model_version,
            "outputs": [
                {
                    "name": o.name,
                    "datatype": o.datatype,
                    "shape": list(o.shape),
                    "parameters": {"binary_data_size": len(raw)},
                }
                for o, raw in zip(response.outputs, raws, strict=True)
            ],
        }
    )
    return header + b"".join(raws), len(header)


RESPONSES = {
    "add_sub": InferenceResponse(
        "add_sub",
        "1",
        "",
        [
            _output("OUTPUT0", np.arange(16, dtype=np.float32), "FP32"),
            _output("OUTPUT1", -np.ones(16, np.float32), "FP32"),
        ],
    ),
    "BYTES": InferenceResponse(
        "s", "2", "", [_output("O", np.array([b"a", b"bc"], dtype=np.object_), "BYTES")]
    ),
    "an empty tensor": InferenceResponse("e", "1", "", [_output("O", np.zeros((0, 3), np.int64), "INT64")]),
}


@pytest.mark.parametrize("response", RESPONSES.values(), ids=RESPONSES.keys())
def test_a_binary_response_is_the_general_encoders_bytes_every_time(response: InferenceResponse) -> None:
    for _ in range(2):  # the second comes from the cache
        assert codec.encode_response(response, {}, True) == _expected(response)


def test_the_same_model_with_other_shapes_gets_its_own_header() -> None:
    small = InferenceResponse("grows", "1", "", [_output("O", np.ones(2, np.int32), "INT32")])
    large = InferenceResponse("grows", "1", "", [_output("O", np.ones(5, np.int32), "INT32")])
    codec.encode_response(small, {}, True)
    assert codec.encode_response(large, {}, True) == _expected(large)
    assert codec.encode_response(small, {}, True) == _expected(small)


def test_what_the_cache_does_not_cover_is_encoded_in_full() -> None:
    """An id, parameters or a JSON output: the general encoder, with what the response says."""
    data = np.arange(3, dtype=np.int32)
    with_id = InferenceResponse("m", "1", "req-1", [_output("O", data, "INT32")])
    body, length = codec.encode_response(with_id, {}, True)
    assert length is not None and orjson.loads(body[:length])["id"] == "req-1"
    as_json = InferenceResponse("m", "1", "", [_output("O", data, "INT32")])
    body, length = codec.encode_response(as_json, {"O": False}, True)
    assert length is None and orjson.loads(body)["outputs"][0]["data"] == [0, 1, 2]
    with_parameters = InferenceResponse("m", "1", "", [_output("O", data, "INT32")], {"sequence_id": 3})
    body, length = codec.encode_response(with_parameters, {}, True)
    assert length is not None and orjson.loads(body[:length])["parameters"] == {"sequence_id": 3}
