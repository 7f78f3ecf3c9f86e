"""Header numbers read as Triton reads them (C++'s ``std::stoi``), not as Python's ``int()``."""

from __future__ import annotations

import pytest

from trt.server.core.errors import InvalidArgument
from trt.server.http.header_numbers import inference_header_length, leading_integer


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("210", 210),
        (" \t210", 210),  # leading blanks
        ("+210", 210),
        ("-5", -5),
        ("210abc", 210),  # what follows the digits is ignored
        ("2_10", 2),  # int() would read 210
        ("0" * 5000 + "7", 7),  # leading zeros, however many
        ("\xb2", None),  # a superscript passes str.isdigit(), not stoi
        ("\u0661", None),  # an Arabic-Indic one, which int() would read as 1
        ("", None),
        ("+", None),
        ("abc", None),
    ],
)
def test_leading_integer_reads_what_stoi_reads(text: str, value: int | None) -> None:
    assert leading_integer(text) == value


def test_past_int32_is_out_of_range_however_many_digits() -> None:
    for text in ("2147483648", "-2147483649", "9" * 5000):
        with pytest.raises(InvalidArgument, match=r"value is out of range \[ -2147483648, 2147483647 \]"):
            inference_header_length(text)
    assert inference_header_length("2147483647") == 2**31 - 1


def test_an_inference_header_length_without_digits_is_unparseable() -> None:
    with pytest.raises(InvalidArgument, match=r"^Unable to parse Inference-Header-Content-Length, got: x1$"):
        inference_header_length("x1")
    assert inference_header_length("0") == 0  # a raw binary request
