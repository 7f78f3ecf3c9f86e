"""Comparing what came out of ``trt_pb_wire`` with what went in: the same values, with tuples as
lists, numpy scalars as Python numbers and bytes-like values as bytes."""

from __future__ import annotations

from typing import Any

import numpy as np


def same(received: Any, sent: Any) -> bool:
    if isinstance(sent, np.ndarray):
        if type(received) is not np.ndarray or received.dtype != sent.dtype or received.shape != sent.shape:
            return False
        if sent.dtype.kind == "O":
            return all(map(same, received.flat, sent.flat))
        return bool(received.tobytes() == sent.tobytes())  # NaNs too
    if isinstance(sent, np.generic):
        return type(received) is type(sent.item()) and received == sent.item()
    if isinstance(sent, (tuple, list)):
        return type(received) is list and len(received) == len(sent) and all(map(same, received, sent))
    if isinstance(sent, dict):
        return (
            type(received) is dict
            and list(received) == list(sent)
            and all(map(same, received.values(), sent.values()))
        )
    if isinstance(sent, (bytes, bytearray)):
        return type(received) is bytes and received == sent
    return type(received) is type(sent) and received == sent
