"""Every model the server knows, keyed as Triton keys them: by namespace and name.

Without ``--model-namespacing`` every namespace is "" and a name is a model. With it, a model's
namespace is the repository it came from, so two repositories may each hold a model of the same name.
Requests name a model only, never a namespace: a name that two namespaces hold is ambiguous and
refused, as Triton refuses it; such models are still reachable from the ensembles beside them, whose
steps look in their own namespace first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from trt.protos import model_config_pb2
from trt.server.core.errors import InvalidArgument
from trt.server.core.models.canary import CanaryRouter
from trt.server.core.models.version import ModelVersion


class ModelKey(NamedTuple):
    namespace: str  # the repository, as the user named it, with --model-namespacing; "" without
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}::{self.name}" if self.namespace else self.name


@dataclass
class ModelEntry:
    """Everything the server knows about one model."""

    key: ModelKey
    config: model_config_pb2.ModelConfig | None = None
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    # Per-version state and reason for versions that are not serving (failed, unloaded).
    unavailable: dict[int, str] = field(default_factory=dict)
    state: str = ""  # model-level state when no version could even be listed
    reason: str = ""
    fingerprint: tuple[tuple[str, int, int], ...] = ()
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    attempted: bool = False  # a load was tried (strict readiness counts these models)
    canary: CanaryRouter | None = None  # splits requests that name no version (canary_weights)

    @property
    def name(self) -> str:
        return self.key.name


class ModelTable:
    """The entries, by key, and by name for requests.

    Entries are only ever added: an unloaded model keeps its entry, which says it was unloaded. What
    makes a name ambiguous is the models that hold it, as Triton counts them: each one loaded or
    tried since it was last unloaded (``release``)."""

    def __init__(self) -> None:
        self._by_key: dict[ModelKey, ModelEntry] = {}
        self._holding: dict[str, set[ModelKey]] = {}  # by name: the keys that hold it
        # By name, the entry a request means: the one holding the name, or, where none holds it, the
        # name's only entry (an unloaded model, which answers that it has no versions). None: no one
        # entry. The request path reads this dict directly: one lookup per request.
        self.by_name: dict[str, ModelEntry | None] = {}

    def __iter__(self) -> Iterator[ModelEntry]:
        return iter(list(self._by_key.values()))

    def keys(self) -> set[ModelKey]:
        return set(self._by_key)

    def get(self, key: ModelKey) -> ModelEntry | None:
        return self._by_key.get(key)

    def add(self, key: ModelKey) -> ModelEntry:
        """The entry for ``key`` (made if it is new), now holding its name."""
        entry = self._by_key.get(key)
        if entry is None:
            entry = self._by_key[key] = ModelEntry(key)
        self._holding.setdefault(key.name, set()).add(key)
        self._index(key.name)
        return entry

    def release(self, key: ModelKey) -> None:
        """``key``'s model was unloaded: it no longer holds its name."""
        self._holding.get(key.name, set()).discard(key)
        self._index(key.name)

    def _index(self, name: str) -> None:
        holding = self._holding.get(name, set())
        if len(holding) == 1:
            self.by_name[name] = self._by_key[next(iter(holding))]
        elif not holding and len(entries := self.all_named(name)) == 1:
            self.by_name[name] = entries[0]
        else:
            self.by_name[name] = None

    def named(self, name: str) -> ModelEntry | None:
        """The one entry called ``name``; None for an unknown name; ambiguity is an error."""
        entry = self.by_name.get(name)
        if entry is None and len(holding := self._holding.get(name, ())) > 1:
            raise ambiguous(name, len(holding))
        return entry

    def all_named(self, name: str) -> list[ModelEntry]:
        return [entry for key, entry in self._by_key.items() if key.name == name]

    def preferring(self, namespace: str, name: str) -> ModelEntry | None:
        """``name`` in ``namespace`` if it holds one, else the one entry of that name (an ensemble's
        step, as Triton resolves it)."""
        return self._by_key.get(ModelKey(namespace, name)) or self.named(name)


def ambiguous(name: str, count: int) -> InvalidArgument:
    return InvalidArgument(  # Triton's words
        f"There are {count} identifiers of model '{name}' in global map, model namespace must be "
        "provided to resolve ambiguity."
    )
