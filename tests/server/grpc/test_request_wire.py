"""A small ModelInferRequest seen before (its tensors' bytes aside) is decoded from a cached template:
it must give what ``decode_infer_request`` gives, errors included, and keep only what cannot change
between requests of the same bytes."""

from __future__ import annotations

import re

import numpy as np
import pytest

from trt.protos import grpc_service_pb2 as pb
from trt.server.core.datatypes import serialize_bytes_tensor
from trt.server.core.errors import InvalidArgument, InvalidInput
from trt.server.core.types import InferenceRequest
from trt.server.grpc import codec, request_wire


def _request(*, values: int = 0, model: str = "add_sub") -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model, model_version="1")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="FP32")
        tensor.shape.extend([1, 16])
        request.raw_input_contents.append(np.full(16, values, np.float32).tobytes())
    for name in ("OUTPUT0", "OUTPUT1"):
        request.outputs.add(name=name)
    request.parameters["triton_enable_empty_final_response"].bool_param = False
    return request


def _same(decoded: InferenceRequest, expected: InferenceRequest) -> None:
    assert (decoded.model_name, decoded.model_version, decoded.id, decoded.parameters) == (
        expected.model_name,
        expected.model_version,
        expected.id,
        expected.parameters,
    )
    assert decoded.outputs == expected.outputs
    assert len(decoded.inputs) == len(expected.inputs)
    for ours, theirs in zip(decoded.inputs, expected.inputs, strict=True):
        assert (ours.name, ours.datatype, ours.shape, ours.parameters) == (
            theirs.name,
            theirs.datatype,
            theirs.shape,
            theirs.parameters,
        )
        assert ours.data is not None and theirs.data is not None
        assert ours.data.dtype == theirs.data.dtype
        np.testing.assert_array_equal(ours.data, theirs.data)


def _variants() -> dict[str, pb.ModelInferRequest]:
    plain = _request()
    classification = _request(model="classifying")
    classification.outputs[0].parameters["classification"].int64_param = 3
    every_output = _request(model="every_output")
    del every_output.outputs[:]
    strings = pb.ModelInferRequest(model_name="strings")
    tensor = strings.inputs.add(name="TEXT", datatype="BYTES")
    tensor.shape.extend([2])
    strings.raw_input_contents.append(serialize_bytes_tensor(np.array([b"ab", b""], dtype=np.object_)))
    ints = pb.ModelInferRequest(model_name="ints")
    tensor = ints.inputs.add(name="X", datatype="INT64")
    tensor.shape.extend([2, 3])
    tensor.parameters["custom"].string_param = "yes"
    ints.raw_input_contents.append(np.arange(6, dtype=np.int64).tobytes())
    return {
        "add_sub": plain,
        "a classification output": classification,
        "every output": every_output,
        "BYTES": strings,
        "input parameters": ints,
    }


@pytest.mark.parametrize("request_message", _variants().values(), ids=_variants().keys())
def test_a_request_seen_before_decodes_as_protobuf_does(request_message: pb.ModelInferRequest) -> None:
    data = request_message.SerializeToString()
    first = codec.decode_infer_message(data)
    raw = list(request_message.raw_input_contents)
    prefix = request_wire.prefix_of(data, raw)
    assert prefix is not None and request_wire.cached(prefix) is not None
    again = codec.decode_infer_message(data)
    _same(again, codec.decode_infer_request(request_message))
    _same(again, first)


def test_the_template_takes_each_requests_own_tensor_bytes() -> None:
    codec.decode_infer_message(_request(values=1).SerializeToString())
    decoded = codec.decode_infer_message(_request(values=7).SerializeToString())
    assert decoded.inputs[0].data is not None
    np.testing.assert_array_equal(decoded.inputs[0].data, np.full((1, 16), 7, np.float32))


def test_changing_a_decoded_request_does_not_change_the_next() -> None:
    data = _request(model="mutated").SerializeToString()
    codec.decode_infer_message(data)
    first = codec.decode_infer_message(data)
    first.parameters["added"] = 1
    first.inputs[0].parameters["added"] = 1
    assert first.outputs is not None
    first.outputs[0].parameters["added"] = 1
    second = codec.decode_infer_message(data)
    assert "added" not in second.parameters and "added" not in second.inputs[0].parameters
    assert second.outputs is not None and "added" not in second.outputs[0].parameters


def test_a_wrong_tensor_size_is_the_same_error_from_the_template() -> None:
    codec.decode_infer_message(_request(model="sizes").SerializeToString())
    short = _request(model="sizes")
    short.raw_input_contents[1] = b"\x00" * 12
    message = "input byte size mismatch for input 'INPUT1' for model 'sizes'. Expected 64, got 12"
    with pytest.raises(InvalidInput, match=re.escape(message)):
        codec.decode_infer_message(short.SerializeToString())


def test_more_raw_inputs_than_the_template_has_inputs_is_refused() -> None:
    """Same bytes before the raw inputs, one raw input more: the count check of the full decode."""
    codec.decode_infer_message(_request(model="count").SerializeToString())
    extra = _request(model="count")
    extra.raw_input_contents.append(b"\x00" * 64)
    with pytest.raises(InvalidArgument, match="raw_input_contents"):
        codec.decode_infer_message(extra.SerializeToString())


def test_raw_inputs_before_other_fields_are_decoded_without_the_cache() -> None:
    message = _request(model="reordered")
    raw = list(message.raw_input_contents)
    del message.raw_input_contents[:]
    raw_fields = pb.ModelInferRequest(raw_input_contents=raw).SerializeToString()
    data = raw_fields + message.SerializeToString()  # protobuf merges fields in any order
    assert request_wire.prefix_of(data, raw) is None
    _same(codec.decode_infer_message(data), codec.decode_infer_request(pb.ModelInferRequest.FromString(data)))


@pytest.mark.parametrize("what", ["an id", "a sequence id"])
def test_requests_that_change_every_time_are_not_kept(what: str) -> None:
    message = _request(model=f"not kept: {what}")
    if what == "an id":
        message.id = "request-1"
    else:
        message.parameters["sequence_id"].int64_param = 42
    data = message.SerializeToString()
    codec.decode_infer_message(data)
    prefix = request_wire.prefix_of(data, list(message.raw_input_contents))
    assert prefix is not None and request_wire.cached(prefix) is None


def test_a_long_prefix_is_not_kept() -> None:
    message = _request(model="m" * 5000)
    assert request_wire.prefix_of(message.SerializeToString(), list(message.raw_input_contents)) is None


def test_a_request_seen_before_is_read_without_protobuf_and_as_protobuf_reads_it() -> None:
    data = _request(model="looked up", values=3).SerializeToString()
    codec.decode_infer_message(data)
    looked_up = request_wire.lookup(_request(model="looked up", values=5).SerializeToString())
    assert looked_up is not None
    _same(looked_up, codec.decode_infer_request(_request(model="looked up", values=5)))


@pytest.mark.parametrize("field", ["an id", "a parameter"])
def test_fields_after_the_raw_inputs_are_read_by_protobuf(field: str) -> None:
    """The kept prefix, the raw inputs, then another field (protobuf reads fields in any order and
    the last value of a field wins): the cached template does not hold it, so protobuf decodes."""
    message = _request(model="fields after")
    codec.decode_infer_message(message.SerializeToString())
    later = pb.ModelInferRequest(id="late") if field == "an id" else pb.ModelInferRequest()
    if field == "a parameter":
        later.parameters["priority"].uint64_param = 3
    data = message.SerializeToString() + later.SerializeToString()
    assert request_wire.lookup(data) is None
    decoded = codec.decode_infer_message(data)
    _same(decoded, codec.decode_infer_request(pb.ModelInferRequest.FromString(data)))
    assert decoded.id == "late" if field == "an id" else decoded.parameters["priority"] == 3


@pytest.mark.parametrize("cut", [1, 2, 30], ids=["an input missing", "in its length", "in its bytes"])
def test_a_message_cut_short_in_its_raw_inputs_is_malformed(cut: int) -> None:
    message = _request(model="cut short")
    codec.decode_infer_message(message.SerializeToString())
    data = message.SerializeToString()
    data = data[: len(data) - 64 - 2 + cut - 1] if cut < 30 else data[:-30]
    assert request_wire.lookup(data) is None
    with pytest.raises(InvalidArgument):
        codec.decode_infer_message(data)
