"""Every model the server knows, keyed as Triton keys them: by namespace and name.

Without ``--model-namespacing`` every namespace is "" and a name is a model. With it, a model's
namespace is the repository it came from, so two repositories may each hold a model of the same name.
Requests name a model only, never a namespace: a name that two namespaces hold is ambiguous and
refused, as Triton refuses it; such models are still reachable from the ensembles beside them, whose
steps look in their own namespace first.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from trt.protos import model_config_pb2
from trt.server.core.errors import InvalidArgument, ModelNotFound, ModelNotReady, ServerError
from trt.server.core.models.canary import CanaryRouter
from trt.server.core.models.version import ModelVersion
from trt.server.core.types import RepositoryIndexEntry

# A model's state, as the repository index shows it
READY, UNAVAILABLE, LOADING, UNLOADING = "READY", "UNAVAILABLE", "LOADING", "UNLOADING"
UNLOADED = "unloaded"  # the reason an unloaded model gives


class ModelKey(NamedTuple):
    namespace: str  # the repository, as the user named it, with --model-namespacing; "" without
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}::{self.name}" if self.namespace else self.name

    def by_name(self) -> tuple[str, str]:
        """The order models are listed in: by name, then namespace."""
        return self.name, self.namespace


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
    # Loaded only because an ensemble loaded in explicit mode runs it (Triton's "not explicitly
    # loaded"): unloading that ensemble with unload_dependents unloads it too.
    for_ensemble: bool = False
    # An ensemble's steps whose models kept it from loading: it is loaded again when one of them loads.
    awaits: frozenset[str] = frozenset()
    # Versions unloaded whose in-flight requests are still finishing: listed UNLOADING meanwhile.
    unloading: dict[int, ModelVersion] = field(default_factory=dict)


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

    def requests_in_flight(self) -> int:
        """Requests (and ensemble requests holding steps) not yet answered, over every version that
        serves or is unloading: what Triton's stop waits for before it unloads the models."""
        return sum(
            version.in_flight
            for entry in self._by_key.values()
            for versions in (entry.versions, entry.unloading)
            for version in versions.values()
        )

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

    # -- what requests mean (hot path) --------------------------------------------------------

    def resolve(self, name: str, version: str = "", namespace: str = "") -> ModelVersion:
        """The version a request names (the latest serving one, or the canary's pick, for none);
        ``namespace`` is an ensemble's, whose model of ``name`` is preferred.

        Errors as Triton's: an unknown model or version, or a model none of whose versions is serving,
        is ModelNotFound (404); a known version that is not READY is ModelNotReady (503); a name that
        several namespaces hold is InvalidArgument (400)."""
        entry = self.by_name.get(name) if not namespace else self.preferring(namespace, name)
        if entry is None:
            self.named(name)  # raises for an ambiguous name
            raise ModelNotFound(f"Request for unknown model: '{name}' is not found")
        number = -1 if not version or version == "-1" else parse_version(version)
        if number == -1:
            if entry.canary is not None:
                chosen = entry.versions.get(entry.canary.pick())
                if chosen is not None:
                    return chosen
            versions = entry.versions  # the latest of them, read in line: this runs for every request
            if not versions:
                raise ModelNotFound(f"Request for unknown model: '{name}' has no available versions")
            return versions[max(versions)]
        model = entry.versions.get(number)
        if model is None:
            if number in entry.unavailable:
                raise ModelNotReady(
                    f"Request for unknown model: '{name}' version {number} is not at ready state"
                )
            raise ModelNotFound(f"Request for unknown model: '{name}' version {number} is not found")
        return model

    def is_loaded(self, name: str) -> bool:
        try:
            self.resolve(name)
        except ServerError:
            return False
        return True

    def is_serving(self, name: str, version: str = "") -> bool:
        """READY as the readiness APIs say it: loaded, and every instance able to take requests. An
        unknown model or version is simply not ready (as Triton 2.51 answers), but a version string
        that is not a number is an error."""
        if version:
            parse_version(version)
        try:
            return self.resolve(name, version).ready
        except ServerError:
            return False

    def all_ready(self) -> bool:
        """Strict readiness: every model the server tried to load is serving (unloaded ones excepted)."""
        for entry in self._by_key.values():
            if not entry.attempted or entry.reason == UNLOADED:
                continue
            if not entry.versions or entry.unavailable:
                return False
            if not all(version.ready for version in entry.versions.values()):
                return False
        return True

    def loaded_models(self) -> list[ModelVersion]:
        return [model for entry in self._by_key.values() for model in entry.versions.values()]

    def index(self, on_disk: Iterable[ModelKey], ready_only: bool = False) -> list[RepositoryIndexEntry]:
        """Every model known or ``on_disk``, by name (a name that several namespaces hold has rows for
        each, as in Triton)."""
        keys = set(on_disk) | set(self._by_key)
        rows: list[RepositoryIndexEntry] = []
        for key in sorted(keys, key=ModelKey.by_name):
            name, entry = key.name, self._by_key.get(key)
            if entry is None or (not entry.versions and not entry.unavailable and not entry.state):
                if not ready_only:
                    rows.append(RepositoryIndexEntry(name, namespace=key.namespace))
                continue
            for version in sorted(set(entry.versions) | set(entry.unavailable)):
                if version in entry.versions:
                    rows.append(RepositoryIndexEntry(name, str(version), READY, namespace=key.namespace))
                elif ready_only:
                    continue
                elif version in entry.unloading:  # no reason while unloading, as in Triton
                    rows.append(RepositoryIndexEntry(name, str(version), UNLOADING, namespace=key.namespace))
                else:
                    rows.append(
                        RepositoryIndexEntry(
                            name, str(version), UNAVAILABLE, entry.unavailable[version], key.namespace
                        )
                    )
            if not entry.versions and not entry.unavailable and not ready_only:
                rows.append(RepositoryIndexEntry(name, "", entry.state, entry.reason, key.namespace))
        return rows


# std::stol's reading: ASCII blanks, a sign, ASCII digits (leading zeros apart: any number of them)
_LEADING_INTEGER = re.compile(r"\s*([+-]?)0*([0-9]+)", re.ASCII)
_INT64_MAX = 2**63 - 1


def parse_version(text: str) -> int:
    """A version string as Triton reads one (C++ ``std::stol``: leading blanks, a sign, digits, and
    anything after them ignored), with Triton's messages; "-1" means the latest, as in BLS calls."""
    match = _LEADING_INTEGER.match(text)
    # Past 19 digits it is out of int64's range; int() would refuse thousands of them.
    number = int(match.group(1) + match.group(2)) if match and len(match.group(2)) <= 19 else None
    if number is None or not -_INT64_MAX - 1 <= number <= _INT64_MAX:
        raise InvalidArgument(
            f"failed to get model version from specified version string '{text}' (details: stol), "
            "version should be an integral value > 0"
        )
    if number < -1:
        raise InvalidArgument(
            f"invalid model version specified '{text}' , version should be an integral value > 0"
        )
    return number


def ambiguous(name: str, count: int) -> InvalidArgument:
    return InvalidArgument(  # Triton's words
        f"There are {count} identifiers of model '{name}' in global map, model namespace must be "
        "provided to resolve ambiguity."
    )
