"""Decoding infer bodies: a JSON header seen before is looked up, and decodes as it did the first time."""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest

from trt.server.core.datatypes import BF16_DTYPE
from trt.server.core.errors import InvalidInput
from trt.server.http.codec import RequestDecoder, decode_request


def _body(inputs: dict[str, tuple[str, np.ndarray | list[bytes]]], **extra: object) -> tuple[bytes, int]:
    """A binary infer body: the JSON header, then each tensor's bytes."""
    described, chunks = [], []
    for name, (datatype, values) in inputs.items():
        if datatype == "BYTES":
            raw = b"".join(struct.pack("<I", len(v)) + v for v in values)  # type: ignore[union-attr]
            shape = [len(values)]
        else:
            raw = np.asarray(values).tobytes()
            shape = list(np.asarray(values).shape)
        described.append(
            {"name": name, "datatype": datatype, "shape": shape, "parameters": {"binary_data_size": len(raw)}}
        )
        chunks.append(raw)
    header = json.dumps({"inputs": described, **extra}).encode()
    return header + b"".join(chunks), len(header)


OUTPUTS = {"outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}, {"name": "OUTPUT1"}]}


def _fields(request: object) -> dict[str, object]:
    decoded = request
    return {
        "model": (decoded.model_name, decoded.model_version, decoded.id, decoded.parameters),  # type: ignore[attr-defined]
        "inputs": [
            (t.name, t.datatype, t.shape, t.data.dtype, t.data.tolist(), t.parameters)
            for t in decoded.inputs  # type: ignore[attr-defined]
        ],
        "outputs": [(o.name, o.class_count, o.parameters) for o in decoded.outputs or []],  # type: ignore[attr-defined]
    }


def test_a_header_seen_before_decodes_as_the_full_decoding_does_with_the_new_tensors() -> None:
    decoder = RequestDecoder()
    first, length = _body(
        {"A": ("FP32", np.ones((2, 3), np.float32)), "B": ("INT64", np.arange(3))}, **OUTPUTS
    )
    second, _ = _body(
        {"A": ("FP32", np.full((2, 3), 7, np.float32)), "B": ("INT64", np.arange(3) * 5)}, **OUTPUTS
    )
    decoder.decode("m", "2", first, length)
    assert decoder.remembered == 1

    looked_up, choice, default = decoder.decode("m", "2", second, length)

    expected, expected_choice, expected_default = decode_request("m", "2", second, length)
    assert _fields(looked_up) == _fields(expected)
    assert looked_up.inputs[0].data.tolist() == [[7.0] * 3] * 2
    assert (
        (choice, default)
        == (expected_choice, expected_default)
        == ({"OUTPUT0": True, "OUTPUT1": False}, False)
    )
    assert decoder.remembered == 1


@pytest.mark.parametrize("shape", [(), (1,), (2,), (3, 2)])
def test_bf16_decodes_the_same_from_a_header_seen_before(shape: tuple[int, ...]) -> None:
    """Either way the input is the same bfloat16 array (found by the long fuzzing run, when BF16 had no
    numpy type: the remembered header read its bytes as uint8, or failed to)."""
    values = np.arange(np.prod(shape, dtype=int), dtype=np.float32).reshape(shape) - 1.5
    raw = values.astype(BF16_DTYPE).tobytes()
    header = json.dumps(
        {"inputs": [{"name": "IN", "datatype": "BF16", "shape": list(shape),
                     "parameters": {"binary_data_size": len(raw)}}]}
    ).encode()  # fmt: skip
    decoder = RequestDecoder()
    for _ in range(3):
        request, _, _ = decoder.decode("m", "", header + raw, len(header))
        data = request.inputs[0].data
        assert data.dtype == BF16_DTYPE and data.shape == shape
        np.testing.assert_array_equal(data.astype(np.float32), values)
    assert decoder.remembered == 1


def test_requests_decoded_from_one_header_share_no_dictionaries() -> None:
    decoder = RequestDecoder()
    body, length = _body(
        {"A": ("INT32", np.arange(4, dtype=np.int32))}, parameters={"priority": 1}, **OUTPUTS
    )
    first, _, _ = decoder.decode("m", "", body, length)
    first.parameters["priority"] = 9
    first.inputs[0].parameters["binary_data_size"] = 0
    assert first.outputs is not None
    first.outputs[0].parameters["binary_data"] = False

    second, _, _ = decoder.decode("m", "", body, length)

    assert second.parameters == {"priority": 1}
    assert second.inputs[0].parameters == {"binary_data_size": 16}
    assert second.outputs is not None and second.outputs[0].parameters == {"binary_data": True}


@pytest.mark.parametrize("cut", [4, -4])
def test_a_known_header_with_the_wrong_amount_of_binary_data_is_refused_as_it_would_be_unknown(
    cut: int,
) -> None:
    decoder = RequestDecoder()
    body, length = _body({"A": ("FP32", np.ones(4, np.float32))})
    decoder.decode("m", "", body, length)
    wrong = body[:cut] if cut < 0 else body + b"\0" * cut

    with pytest.raises(InvalidInput) as remembered:
        decoder.decode("m", "", wrong, length)
    with pytest.raises(InvalidInput) as fresh:
        decode_request("m", "", wrong, length)
    assert str(remembered.value) == str(fresh.value)


def test_bytes_tensors_are_checked_on_every_request() -> None:
    decoder = RequestDecoder()
    body, length = _body({"S": ("BYTES", [b"ab", b"cd"])})
    request, _, _ = decoder.decode("m", "", body, length)
    assert request.inputs[0].data.tolist() == [b"ab", b"cd"]
    broken = body[:length] + struct.pack("<I", 9) + b"ab" + struct.pack("<I", 2) + b"cd"  # its size

    with pytest.raises(InvalidInput, match="BYTES element 0 claims 9 bytes but only 8 remain"):
        decoder.decode("m", "", broken, length)


@pytest.mark.parametrize(
    "extra",
    [{"id": "req-1"}, {"parameters": {"sequence_id": 5, "sequence_start": True}}],
    ids=["id", "sequence"],
)
def test_headers_that_carry_something_of_their_own_request_are_not_remembered(
    extra: dict[str, object],
) -> None:
    decoder = RequestDecoder()
    body, length = _body({"A": ("FP32", np.ones(4, np.float32))}, **extra)
    request, _, _ = decoder.decode("m", "", body, length)
    assert (request.id, request.parameters) == (extra.get("id", ""), extra.get("parameters", {}))
    assert decoder.remembered == 0


def test_json_tensor_data_is_not_remembered() -> None:
    decoder = RequestDecoder()
    body = json.dumps({"inputs": [{"name": "A", "datatype": "INT32", "shape": [2], "data": [1, 2]}]}).encode()
    request, _, _ = decoder.decode("m", "", body, len(body))
    assert request.inputs[0].data.tolist() == [1, 2]
    assert decoder.remembered == 0


def test_what_is_remembered_stays_within_its_byte_bound_oldest_first() -> None:
    """256 entries with no byte bound: 20 headers with 20 MB parameters held 1.2 GB."""
    decoder = RequestDecoder(max_bytes=64 * 1024)
    bodies = [
        _body({"A": ("FP32", np.ones(4, np.float32))}, parameters={"tag": f"{i:04d}" * 100})
        for i in range(60)
    ]
    for body, length in bodies:
        decoder.decode("m", "", body, length)
        assert decoder.held_bytes <= 64 * 1024
    assert 0 < decoder.remembered < 60
    newest, length = bodies[-1]
    decoder.decode("m", "", newest, length)  # the newest is still known: nothing more is kept for it
    held = decoder.held_bytes
    oldest, length = bodies[0]
    decoder.decode("m", "", oldest, length)  # the oldest was let go: decoded afresh, kept again
    assert decoder.held_bytes <= 64 * 1024 and decoder.remembered > 0 and held > 0


def test_a_header_over_a_sixteenth_of_the_bound_is_decoded_but_never_kept() -> None:
    decoder = RequestDecoder(max_bytes=64 * 1024)
    body, length = _body({"A": ("FP32", np.ones(4, np.float32))}, parameters={"note": "x" * 8192})
    request, _, _ = decoder.decode("m", "", body, length)
    assert request.parameters == {"note": "x" * 8192}
    assert (decoder.remembered, decoder.held_bytes) == (0, 0)
    assert (
        RequestDecoder(max_bytes=0).decode("m", "", *_body({"A": ("FP32", np.ones(2, np.float32))}))[0].inputs
    )


@pytest.mark.parametrize(
    ("data", "refusal"),
    [
        ({"data": [7]}, "But set 'data' 'binary_data_size'"),  # two places for its data, in Triton's words
        ({}, "Unable to parse 'binary_data_size'"),
    ],
    ids=["beside JSON data", "alone"],
)
def test_a_null_binary_data_size_is_refused_by_both_decodings(data: dict[str, object], refusal: str) -> None:
    """Found by the long fuzz run: 'binary_data_size': null with JSON data decoded as JSON, and then
    the header's remembered plan added None to an offset (a 500 on every such request)."""
    tensor = {"name": "IN", "datatype": "INT32", "shape": [1], **data}
    header = json.dumps({"inputs": [{**tensor, "parameters": {"binary_data_size": None}}]}).encode()
    decoder = RequestDecoder()
    for _ in range(2):
        for decode in (decode_request, decoder.decode):
            with pytest.raises(InvalidInput, match=re.escape(refusal)):
                decode("m", "", header, len(header))
    assert decoder.held_bytes == 0


def _carriers(but: str) -> str:
    return (
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
        f"'shared_memory_region' in 'parameters'. But {but}"
    )


@pytest.mark.parametrize(
    ("fields", "datatype", "refusal"),
    [
        ({"data": [1, 2]}, "INT33", "invalid datatype for input IN"),  # one carrier: the datatype comes next
        ({}, "INT32", _carriers("no field is set")),
        ({}, "INT33", _carriers("no field is set")),
        ({"data": [1, 2], "binary_data_size": 8}, "INT32", _carriers("set 'data' 'binary_data_size'")),
        ({"data": [1, 2], "shared_memory_region": "r"}, "INT32",
         _carriers("set 'data' 'shared_memory_region'")),
        ({"binary_data_size": 8, "shared_memory_region": "r"}, "INT33",
         _carriers("set 'binary_data_size' 'shared_memory_region'")),
        ({"data": [1, 2], "binary_data_size": -1, "shared_memory_region": "r"}, "INT32",
         _carriers("set 'data' 'binary_data_size' 'shared_memory_region'")),
    ],
)  # fmt: skip
def test_an_input_says_where_its_data_is_in_one_way_checked_before_its_datatype_as_triton_does(
    fields: dict[str, object], datatype: str, refusal: str
) -> None:
    """The texts are Triton 2.51's for the same bodies."""
    parameters = {key: value for key, value in fields.items() if key != "data"}
    tensor: dict[str, object] = {"name": "IN", "datatype": datatype, "shape": [2], "parameters": parameters}
    if "data" in fields:
        tensor["data"] = fields["data"]
    header = json.dumps({"inputs": [tensor]}).encode()
    with pytest.raises(InvalidInput) as refused:
        decode_request("m", "", header + bytes(8), len(header))
    assert str(refused.value) == refusal


def test_bf16_in_json_is_refused_in_tritons_words() -> None:
    """As Triton (which refuses FP16 in JSON too; trt takes it)."""
    body = json.dumps({"inputs": [{"name": "IN", "datatype": "BF16", "shape": [2], "data": [1, 2]}]}).encode()
    with pytest.raises(InvalidInput) as refused:
        decode_request("m", "", body, None)
    assert str(refused.value) == (
        "receiving BF16 data via JSON is not supported. Please use the binary data format for input IN"
    )
    half = json.dumps({"inputs": [{"name": "IN", "datatype": "FP16", "shape": [2], "data": [1, 2]}]}).encode()
    assert decode_request("m", "", half, None)[0].inputs[0].data.tolist() == [1.0, 2.0]


def _nested(depth: int, value: object) -> object:
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("datatype", "value"), [("BYTES", "hello"), ("INT64", 123)], ids=["BYTES", "INT64"])
def test_json_data_nested_as_deep_as_triton_refuses_is_refused_in_its_words(
    datatype: str, value: object
) -> None:
    """Triton's L0_http cases: 50 levels decode (one element), 100 or more are refused (BYTES data was
    taken at any depth)."""

    def body(depth: int) -> bytes:
        tensor = {"name": "X", "datatype": datatype, "shape": [1, 1], "data": _nested(depth, value)}
        return json.dumps({"inputs": [tensor]}).encode()

    request, _, _ = decode_request("m", "", body(50), None)
    assert request.inputs[0].data is not None and request.inputs[0].data.size == 1
    for depth in (100, 120):
        with pytest.raises(
            InvalidInput, match=re.escape("JSON nesting depth exceeds maximum allowed limit (100)")
        ):
            decode_request("m", "", body(depth), None)
