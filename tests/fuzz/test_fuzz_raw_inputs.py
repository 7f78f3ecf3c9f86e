"""Property-based fuzzing of the raw binary request's input deduction (``ModelSignature.raw_input``).

Whatever the config (datatypes, dims with zero, one or more variable ones, sizes at numpy's limits)
and whatever the body, the deduction gives an input that the body fills exactly, in the shape the
config allows, or refuses it as a client's mistake (InvalidInput, a 400): never another exception.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trt.server.core.datatypes import FIXED_SIZE_DTYPES
from trt.server.core.errors import InvalidInput
from trt.server.core.models.signature import ModelSignature, TensorSpec

CONFIG_DIMS = st.lists(
    st.one_of(st.sampled_from([-1, -1, 2**31, 2**40, 2**62]), st.integers(0, 6)), max_size=4
)


@st.composite
def signatures(draw: st.DrawFn) -> ModelSignature:
    batching = draw(st.booleans())
    specs = {}
    for name in ("IN", "OTHER")[: draw(st.integers(1, 2))]:
        dims = tuple(draw(CONFIG_DIMS))
        datatype = draw(st.sampled_from([*FIXED_SIZE_DTYPES, "BYTES"]))
        shape = (-1, *dims) if batching else dims
        specs[name] = TensorSpec(name, datatype, dims, shape, None)
    return ModelSignature("m", 8 if batching else 0, specs, {}, frozenset(specs))


@given(signature=signatures(), data=st.binary(max_size=96))
def test_a_raw_input_fills_the_shape_it_is_given_or_is_refused(
    signature: ModelSignature, data: bytes
) -> None:
    try:
        tensor = signature.raw_input(data)
    except InvalidInput:
        return
    spec = signature.inputs[tensor.name]
    assert len(signature.inputs) == 1 and tensor.datatype == spec.datatype
    dims = tensor.shape[1:] if signature.max_batch_size else tensor.shape
    if signature.max_batch_size:
        assert tensor.shape[0] == 1
    assert len(dims) == len(spec.dims)
    assert all(got == want for got, want in zip(dims, spec.dims, strict=True) if want != -1)
    assert tensor.data is not None and tensor.data.shape == tensor.shape
    if tensor.datatype == "BYTES":
        assert tensor.data.reshape(-1).tolist() == [data]
    else:
        assert tensor.data.tobytes() == data
