"""A bytes object made empty and filled once, before anything else sees it.

A large request body is best read from the socket straight into the buffer that becomes the
request's body (``body_reader``): read in the transport's 256 KiB pieces and joined, a 16 MB body
cost 35 ms here against 10 read into one buffer, most of it page faults of fresh pieces. For the
body to stay ``bytes`` (what every route decodes), that buffer must be the bytes object itself.
CPython makes exactly that for C code: ``PyBytes_FromStringAndSize(NULL, n)`` returns a bytes
object whose contents are left for the caller to write. It is reached here through ctypes, with a
writable view of the contents.

The rule a caller keeps: write through the view only while nothing else holds the bytes object, and
drop the view before handing the object on (the view keeps the object alive, not the reverse). Checked
once, at import: a known pattern read where the characters should be, then written there and read
back; where the layout is not CPython's, ``unfilled_bytes`` gives None and the caller reads the body
in pieces.
"""

from __future__ import annotations

import ctypes

_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
# Where a bytes object's characters begin: its fixed part, less the one byte of ``ob_sval[1]``.
_CONTENTS_OFFSET = bytes.__basicsize__ - 1
MIN_SIZE = 2  # CPython hands out shared objects for sizes 0 and 1: never to be written


def _made(size: int) -> tuple[bytes, memoryview]:
    made: bytes = _new_bytes(None, size)
    contents = (ctypes.c_char * size).from_address(id(made) + _CONTENTS_OFFSET)
    contents.owner = made  # type: ignore[attr-defined]  # a view of the contents keeps the object alive
    return made, memoryview(contents).cast("B")


def _layout_holds() -> bool:
    """Whether a bytes object's characters are where ``_CONTENTS_OFFSET`` says: read first from an
    ordinary bytes object (nothing written where it might not belong), then written and read back."""
    try:
        pattern = bytes(range(251)) * 4
        if ctypes.string_at(id(pattern) + _CONTENTS_OFFSET, len(pattern)) != pattern:
            return False
        made, view = _made(len(pattern))
        view[:] = pattern
        view.release()
        return made == pattern and len(made) == len(pattern)
    except (AttributeError, TypeError, ValueError):
        return False


_WORKS = _layout_holds()


def unfilled_bytes(size: int) -> tuple[bytes, memoryview] | None:
    """A new bytes object of ``size`` bytes, its contents unwritten (pages taken only as they are
    written), and a writable view of them; None where this interpreter does not allow it, or the
    memory cannot be had."""
    if size < MIN_SIZE:
        raise ValueError(f"a bytes object of {size} bytes may be shared: it cannot be filled")
    if not _WORKS:
        return None
    try:
        return _made(size)
    except MemoryError:  # no address space for it now (many large bodies declared at once)
        return None
