"""Restricted APIs, as tritonserver's ``--http-restricted-api`` and ``--grpc-restricted-protocol``.

Each flag names API categories and a header: ``model-repository,shared-memory:admin-key=secret``.
A request to a restricted category must carry that header with that value; without it, HTTP answers
403 and gRPC UNAVAILABLE, with Triton's words. Each transport maps its routes to the categories.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

CATEGORIES = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)


@dataclass(frozen=True, slots=True)
class Restriction:
    header: str  # lower case: HTTP header names and gRPC metadata keys are compared that way
    value: str


class Restrictions:
    """The restricted categories of one transport and the header each one needs."""

    def __init__(self, by_category: dict[str, Restriction] | None = None) -> None:
        self.by_category = dict(by_category or {})

    def __bool__(self) -> bool:
        return bool(self.by_category)

    @classmethod
    def parse(cls, values: list[str], flag: str, categories: tuple[str, ...] = CATEGORIES) -> Restrictions:
        """``<category>[,<category>...]:<header>=<value>`` per value; ValueError says what is wrong.
        ``categories`` are the transport's own (the OpenAI front end has fewer, and ``metrics``)."""
        by_category: dict[str, Restriction] = {}
        for text in values:
            listed, separator, pair = text.partition(":")
            header, equals, value = pair.partition("=")
            if not separator or not equals or not listed or not header.strip():
                raise ValueError(f"{flag} takes <category>[,<category>...]:<header>=<value>, got '{text}'")
            restriction = Restriction(header.strip().lower(), value)
            for category in (c.strip() for c in listed.split(",")):
                if category not in categories:
                    raise ValueError(
                        f"{flag}: unknown category '{category}' (categories: {', '.join(categories)})"
                    )
                if category in by_category:
                    raise ValueError(f"{flag}: category '{category}' is restricted more than once")
                by_category[category] = restriction
        return cls(by_category)

    def unmet(self, category: str | None, header_value: Callable[[str], str | None]) -> Restriction | None:
        """The restriction a request to ``category`` fails (its header missing or wrong), else None."""
        if category is None:
            return None
        restriction = self.by_category.get(category)
        if restriction is None or header_value(restriction.header) == restriction.value:
            return None
        return restriction
