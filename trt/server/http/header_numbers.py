"""Numbers in request headers, read as Triton's HTTP server reads them: with C++'s ``std::stoi``.

``stoi`` takes leading blanks, a sign and the ASCII digits that follow, and ignores whatever comes
after them; Python's ``int()`` reads other things (``"1_0"`` is 10, and superscripts and other
scripts' digits pass ``str.isdigit()``), so a header that Triton reads as one number must not be read
here as another.
"""

from __future__ import annotations

from trt.server.core.errors import InvalidArgument

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def leading_integer(text: str) -> int | None:
    """What ``std::stoi`` reads: optional blanks and sign, then digits; None if there are none. Past
    int32 the value is only said to be out of range (some number outside it), however many digits."""
    stripped = text.lstrip(" \t\n\r\f\v")
    end = 1 if stripped[:1] in ("+", "-") else 0
    while end < len(stripped) and stripped[end].isdigit() and stripped[end].isascii():
        end += 1
    digits = stripped[:end].lstrip("+-")
    if not digits:
        return None
    sign = -1 if stripped[:1] == "-" else 1
    significant = digits.lstrip("0")
    if len(significant) > 10:  # past int32 (and int() refuses thousands of digits): out of range
        return sign * 2**40
    return sign * int(significant or "0")


def inference_header_length(text: str) -> int:
    """``Inference-Header-Content-Length``: the JSON header's size (0: a raw binary request), with
    Triton's messages for what ``stoi`` refuses. Its range within the body is checked by the decoder."""
    value = leading_integer(text)
    if value is None:
        raise InvalidArgument(f"Unable to parse Inference-Header-Content-Length, got: {text}")
    if not INT32_MIN <= value <= INT32_MAX:
        raise InvalidArgument(
            "Unable to parse Inference-Header-Content-Length, value is out of range "
            f"[ {INT32_MIN}, {INT32_MAX} ], got: {text}"
        )
    return value
