"""The classification extension: top-k entries as strings, and Triton's refusals of outputs it cannot
rank (strings) or should not (over a million elements, a cost a client could ask with one parameter)."""

from __future__ import annotations

import numpy as np
import pytest

from trt.server.core.errors import InvalidArgument
from trt.server.core.extensions.classification import MAX_CLASSIFIED_ELEMENTS, classify
from trt.server.core.types import OutputTensor


def test_each_row_gives_its_top_entries_highest_first_with_labels() -> None:
    data = np.array([[0.1, 0.7, 0.2], [0.9, 0.05, 0.05]], np.float32)
    result = classify(OutputTensor("P", "FP32", (2, 3), data), 2, True, ("cat", "dog"))
    assert result.datatype == "BYTES" and result.shape == (2, 2)
    assert result.data is not None
    assert result.data.tolist() == [
        [b"0.700000:1:dog", b"0.200000:2"],
        [b"0.900000:0:cat", b"0.050000:1:dog"],
    ]


def test_an_output_of_strings_is_refused_in_tritons_words() -> None:
    data = np.array([b"a", b"b"], dtype=np.object_)
    with pytest.raises(InvalidArgument) as refused:
        classify(OutputTensor("S", "BYTES", (2,), data), 1, False, ())
    assert str(refused.value) == "class result not available for output due to unsupported type 'BYTES'"


def test_an_output_of_over_a_million_elements_is_refused_in_tritons_words() -> None:
    data = np.zeros(MAX_CLASSIFIED_ELEMENTS + 1, np.float32)
    with pytest.raises(InvalidArgument, match=r"^classification output tensor too large$"):
        classify(OutputTensor("P", "FP32", data.shape, data), 1, False, ())
    edge = np.zeros(MAX_CLASSIFIED_ELEMENTS, np.float32)
    assert classify(OutputTensor("P", "FP32", edge.shape, edge), 1, False, ()).shape == (1,)
