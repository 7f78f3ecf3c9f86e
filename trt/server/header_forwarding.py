"""Request headers handed to models as request parameters: Triton's ``--http-header-forward-pattern``
and ``--grpc-header-forward-pattern``.

Every header whose name the pattern finds (anywhere in the name, as RE2's ``PartialMatch``) becomes a
string parameter of the inference request, added after the request's own parameters, so that a model
reading a name both carry gets the header's value. Names are matched without regard to case, as
Triton prefixes ``(?i)``; a pattern that starts with ``(?-i)``, Triton's documented way to match
case, is matched as written. The pattern is Python's ``re`` dialect (RE2's common syntax reads the
same). Names are matched, checked against the reserved ones and handed on as the client spelt them, as
in Triton: over HTTP/1.1 ``X-Tenant-Id`` stays so (the HTTP server keeps the spelling when forwarding is
on, ``HttpRequest.header_spellings``); HTTP/2 and gRPC metadata names are always lower case.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from trt.server.core.errors import InvalidArgument
from trt.server.core.types import InferenceRequest

# Triton's kReservedParameterKeys, and its ``triton_`` prefix: names a forwarded header may not take
RESERVED_NAMES = frozenset(
    ("sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "headers", "binary_data_output")
)
_CASE_SENSITIVE = "(?-i)"


@dataclass(frozen=True)
class HeaderForwarding:
    pattern: re.Pattern[str]

    @classmethod
    def parse(cls, text: str, flag: str = "the header forward pattern") -> HeaderForwarding:
        """The forwarding ``text`` asks for; ValueError naming ``flag`` if it is not a pattern."""
        case_sensitive = text.startswith(_CASE_SENSITIVE)
        source, flags = (text[len(_CASE_SENSITIVE) :], 0) if case_sensitive else (text, re.IGNORECASE)
        try:
            return cls(re.compile(source, flags))
        except re.error as exc:
            raise ValueError(f"{flag}: {text!r} is not a regular expression ({exc})") from None

    def apply(self, request: InferenceRequest, headers: Iterable[tuple[str, str]]) -> None:
        """Add the headers the pattern finds to ``request``'s parameters."""
        request.parameters = self.parameters(headers, request.parameters)

    def parameters(self, headers: Iterable[tuple[str, str]], parameters: dict[str, Any]) -> dict[str, Any]:
        """``parameters`` with the headers the pattern finds added (a new dict when there are any:
        the request's own may be shared); InvalidArgument for a name reserved for Triton."""
        forwarded: dict[str, Any] | None = None
        search = self.pattern.search
        for name, value in headers:
            if search(name) is None:
                continue
            if name in RESERVED_NAMES or name.startswith("triton_"):
                raise InvalidArgument(
                    f"Header '{name}' is reserved for Triton usage and cannot be forwarded."
                )
            if forwarded is None:
                forwarded = dict(parameters)
            forwarded.pop(name, None)  # placed last, as Triton appends it
            forwarded[name] = value
        return parameters if forwarded is None else forwarded
