"""Triton's classification extension: an output replaced by its top-k entries as BYTES strings."""

from __future__ import annotations

import numpy as np

from trt.server.core.errors import InvalidArgument
from trt.server.core.types import OutputTensor

# Triton's bound (core classification.cc): ranking a larger output costs the server more than a
# client should be able to ask of it with one parameter.
MAX_CLASSIFIED_ELEMENTS = 1_000_000


def classify(output: OutputTensor, class_count: int, batching: bool, labels: tuple[str, ...]) -> OutputTensor:
    """Top ``class_count`` entries of each batch item as ``b"value:index[:label]"``, highest first;
    refused, in Triton's words, for an output of strings or of more than a million elements."""
    data = output.data
    assert data is not None, "classification runs before outputs go to shared memory"
    if data.dtype.kind in "OSU":
        raise InvalidArgument(
            f"class result not available for output due to unsupported type '{output.datatype}'"
        )
    if data.size > MAX_CLASSIFIED_ELEMENTS:
        raise InvalidArgument("classification output tensor too large")
    rows = data.reshape(data.shape[0], -1) if batching else data.reshape(1, -1)
    k = min(class_count, rows.shape[1])
    order = np.argsort(-rows.astype(np.float64), axis=1, kind="stable")[:, :k]
    out = np.empty((rows.shape[0], k), dtype=np.object_)
    for row_index, row in enumerate(order):
        for rank, index in enumerate(row):
            value = rows[row_index, index]
            text = f"{_format_value(value)}:{int(index)}"
            if int(index) < len(labels):
                text += f":{labels[int(index)]}"
            out[row_index, rank] = text.encode()
    shape = (rows.shape[0], k) if batching else (k,)
    return OutputTensor(output.name, "BYTES", shape, out.reshape(shape))


def _format_value(value: np.generic) -> str:
    if np.issubdtype(type(value), np.floating):
        return f"{float(value):f}"
    return str(value.item() if hasattr(value, "item") else value)
