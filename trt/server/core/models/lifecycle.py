"""Which models are loaded, in which state, and the transitions between states.

Loads run in worker threads (backends block while reading files); the swap from old versions to new
ones happens on the event loop in one step, so a request sees either the old model or the new one.
Old versions retire after their in-flight requests finish, so a reload drops nothing; an unload returns
once the model takes no more requests and lets them finish in the background (``retirement``), as
Triton's does. A reload that fails leaves the loaded versions serving, as Triton does.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path

from trt.protos import model_config_pb2
from trt.server.core.backends.base import ServerServices
from trt.server.core.errors import (
    BackendUnavailable,
    InvalidArgument,
    ModelLoadError,
    ServerError,
    Unavailable,
)
from trt.server.core.models.canary import canary_router
from trt.server.core.models.dependencies import (
    ensemble_refusal,
    is_ensemble,
    step_keys,
    step_names,
)
from trt.server.core.models.load_failures import load_failure, no_version_loaded, poll_failure
from trt.server.core.models.loader import LoadResult, close_instances, load_model, read_model_config
from trt.server.core.models.repository import Fingerprint, ModelLocation, ModelRepository, fingerprint
from trt.server.core.models.retirement import Retirements
from trt.server.core.models.table import (
    LOADING,
    READY,
    UNAVAILABLE,
    UNLOADED,
    ModelEntry,
    ModelKey,
    ModelTable,
)
from trt.server.core.models.version import ModelVersion
from trt.server.core.models.warmup import warm_request_level
from trt.server.core.options import CoreOptions, ModelControlMode
from trt.server.core.paths import relative_to_holder
from trt.server.core.scheduling.rate_limiter import RateLimiter
from trt.server.core.scheduling.response_cache import ResponseCache
from trt.server.core.types import RepositoryIndexEntry

logger = logging.getLogger("trt.lifecycle")


class ModelManager:
    def __init__(self, options: CoreOptions) -> None:
        self.options = options
        self.repository = ModelRepository(options.model_repositories, options.model_namespacing)
        self.table = ModelTable()  # the models, and which of them a request means
        self._load_slots = asyncio.Semaphore(max(1, options.model_load_thread_count))
        self._poller: asyncio.Task[None] | None = None
        self.retirements = Retirements()  # versions withdrawn, finishing their requests
        # Set by InferenceServer: what backends call back into (BLS from Python models).
        self.services: ServerServices | None = None
        self.response_cache = (
            ResponseCache(options.response_cache_bytes) if options.response_cache_bytes else None
        )
        self.rate_limiter = RateLimiter(options.rate_limit_resources) if options.rate_limit else None

    def index(self, ready_only: bool = False) -> list[RepositoryIndexEntry]:
        return self.table.index(self.repository.scan_by_key(), ready_only)

    # -- transitions --------------------------------------------------------------------------

    async def start(self) -> dict[str, str]:
        """Load what the control mode says to load at start-up; return failures by model name."""
        await self.refresh_repository()
        self.repository.check_roots()
        mode = self.options.model_control_mode
        scanned = True  # the models are what the repository holds, not names the user gave
        wanted = list(self.repository.scan_by_key())
        if mode == ModelControlMode.EXPLICIT:
            names = list(self.options.load_models)
            scanned = "*" in names
            if scanned and len(names) > 1:
                raise InvalidArgument("--load-model=* must be the only --load-model argument")
            if not scanned:
                wanted = [key for name in names for key in self._keys_named(name)]
        pulled = [] if scanned else self._steps_to_pull(wanted)  # scanned: every model is wanted already
        failures = await self._load_in_dependency_order(wanted + pulled, skip_missing_backends=scanned)
        self._mark_for_ensemble(pulled)
        if mode == ModelControlMode.POLL:
            self._poller = asyncio.create_task(self._poll_forever(), name="trt-repository-poll")
        return failures

    async def _load_in_dependency_order(
        self, keys: list[ModelKey], skip_missing_backends: bool = False
    ) -> dict[str, str]:
        """Load models concurrently in waves, each ensemble after the models its steps run (as Triton
        does), so an ensemble's warm-up finds them serving. Returns failures by model (its name, with
        its namespace before it where there is one).

        With ``skip_missing_backends`` (start-up, for the models found in the repository rather than
        named by --load-model), a model whose backend needs an extra that is not installed is skipped
        rather than failed: listed UNAVAILABLE with the pip command, left out of
        strict readiness and of --exit-on-error, so a base install serves the rest of a repository."""
        failures: dict[str, str] = {}

        async def load_one(key: ModelKey) -> None:
            try:
                await self.load_key(key)
            except BackendUnavailable as exc:
                if not skip_missing_backends:
                    logger.error("%s", exc.message)
                    failures[str(key)] = exc.message
                    return
                entry = self.table.add(key)
                entry.attempted = False
                logger.warning("skipped model '%s': %s", key, entry.reason)
            except ServerError as exc:
                failures[str(key)] = exc.message

        pending = {key: self._step_models(key) for key in keys}
        while pending:
            names = {key.name for key in pending}
            ready = [key for key, needs in pending.items() if not needs & names]
            if not ready:  # steps that run each other: load them together and let them say why
                ready = list(pending)
            await asyncio.gather(*(load_one(key) for key in ready))
            for key in ready:
                del pending[key]
        return failures

    def _step_models(self, key: ModelKey, override: model_config_pb2.ModelConfig | None = None) -> set[str]:
        """The names of the models an ensemble's steps run (empty for other models and unreadable
        configs)."""
        if override is not None:
            return step_names(override)
        location = self.repository.locate(key)
        if location is None:
            return set()
        try:
            config = read_model_config(key.name, location.path, config_name=self.options.model_config_name)
        except ServerError:
            return set()
        return step_names(config)

    def _steps_to_pull(
        self, keys: list[ModelKey], override: model_config_pb2.ModelConfig | None = None
    ) -> list[ModelKey]:
        """The models that the ensembles among ``keys`` run, at any depth, that do not serve yet: an
        explicit load of an ensemble loads them too, as Triton's does."""
        on_disk = self.repository.scan_by_key()
        pulled: list[ModelKey] = []
        frontier = [(key, self._step_models(key, override)) for key in keys]
        while frontier:
            key, names = frontier.pop()
            for step in step_keys(key, names, on_disk):
                entry = self.table.get(step)
                if step in keys or step in pulled or (entry is not None and entry.versions):
                    continue
                pulled.append(step)
                frontier.append((step, self._step_models(step)))
        return pulled

    def _mark_for_ensemble(self, pulled: list[ModelKey]) -> None:
        for key in pulled:
            self.table.add(key).for_ensemble = True

    def _keys_named(self, name: str) -> list[ModelKey]:
        """The models a name given by a user means: one in each namespace that holds it (none found,
        the name alone, whose load then says it is not found)."""
        return self.repository.keys_named(name) or [ModelKey("", name)]

    async def load(
        self,
        name: str,
        override: model_config_pb2.ModelConfig | None = None,
        model_dir: Path | None = None,
    ) -> None:
        """Load or reload a model (in each namespace that holds it); raise ModelLoadError (with the
        reason) if nothing could be loaded.

        ``model_dir`` is a folder outside the repositories: the model it holds replaces the one of
        that name, or is a model without a namespace."""
        if model_dir is not None:
            existing = self.table.all_named(name)
            key = existing[0].key if len(existing) == 1 else ModelKey("", name)
            await self.load_key(key, override, model_dir)
            return
        keys = self._keys_named(name)
        pulled = self._steps_to_pull(keys, override)
        await self._load_in_dependency_order(pulled)  # a step that fails is the ensemble's reason
        self._mark_for_ensemble(pulled)
        failed: ServerError | None = None
        for key in keys:
            try:
                await self.load_key(key, override)
            except ServerError as exc:
                failed = failed or exc
            if (entry := self.table.get(key)) is not None:  # none for a name no repository holds
                entry.for_ensemble = False  # loaded by name: not only for an ensemble
        if failed is not None:
            raise failed

    async def load_key(
        self,
        key: ModelKey,
        override: model_config_pb2.ModelConfig | None = None,
        model_dir: Path | None = None,
    ) -> None:
        """Load or reload the one model ``key`` names (``load``'s steps, for each of its keys). Every
        reason shown or kept names the model's files from its folder's parent (``<model>/config.pbtxt``):
        clients are not shown where the server keeps its repositories or a pushed model (the log is)."""
        name = key.name
        if model_dir is None:
            model_dir = self._model_dir(key)
        scrub = functools.partial(relative_to_holder, holder=model_dir.parent)
        entry = self.table.add(key)
        async with entry.lock:
            entry.attempted = True
            was_serving = bool(entry.versions)
            if not was_serving:
                entry.state, entry.reason = LOADING, ""
                entry.unloading.clear()  # the copies unloaded before still retire, unlisted
            # Remembered even when the load fails, so polling retries only after the files change.
            entry.fingerprint = await asyncio.to_thread(fingerprint, model_dir)
            try:
                async with self._load_slots:
                    result = await asyncio.to_thread(
                        load_model, name, model_dir, self.options, override, self.services, key.namespace
                    )
            except BackendUnavailable as exc:  # the caller says whether it skips the model or fails
                reason = scrub(exc.message)
                self._record_failure(entry, was_serving, reason, log=False)
                raise BackendUnavailable(f"failed to load '{name}': {reason}") from None
            except ServerError as exc:
                reason = scrub(exc.message)
                self._record_failure(entry, was_serving, reason)
                raise load_failure(name, exc, reason) from None
            except Exception as exc:
                logger.exception("loading '%s' failed unexpectedly", key)
                reason = scrub(f"{type(exc).__name__}: {exc}")
                self._record_failure(entry, was_serving, reason)
                raise ModelLoadError(f"failed to load '{name}': {reason}") from None
            unmet = ensemble_refusal(key, result.config, self.table)
            if unmet is not None:  # Triton does not serve such an ensemble, even the one loaded before
                for loaded in result.versions.values():
                    close_instances(loaded.instances)
                entry.awaits = unmet.awaits
                await self._withdraw(entry, scrub(unmet.reason))
                logger.error("failed to load '%s': %s", key, entry.reason)
                raise ModelLoadError(f"failed to load '{name}': {entry.reason}")
            await self._warm_request_level(result)
            if not result.versions:
                result.failed = {version: scrub(reason) for version, reason in result.failed.items()}
                reasons = "; ".join(f"version {v}: {r}" for v, r in sorted(result.failed.items()))
                if not was_serving:
                    entry.unavailable = dict(result.failed)
                    entry.state, entry.reason = UNAVAILABLE, reasons
                raise no_version_loaded(name, result.failed)
            result.failed = {version: scrub(reason) for version, reason in result.failed.items()}
            try:
                canary = canary_router(result.config, set(result.versions))
                # Constructing a version can still refuse it (a sequence's initial_state file, say).
                new_versions = self._versions_of(result)
            except ServerError as exc:
                for loaded in result.versions.values():
                    close_instances(loaded.instances)
                reason = scrub(exc.message)
                self._record_failure(entry, was_serving, reason)
                raise ModelLoadError(f"failed to load '{name}': {reason}") from None
            await self._swap_in(entry, result, new_versions)
            entry.canary = canary
            entry.awaits = frozenset()
            if canary is not None:
                logger.info("'%s': canary routing %s", key, canary.describe())
        logger.info("loaded '%s' versions %s", key, sorted(result.versions))
        await self._withdraw_broken_ensembles()  # a step's model may now disagree with its ensemble
        await self._load_awaiting(name)

    async def _load_awaiting(self, name: str) -> None:
        """Load the ensembles that a model called ``name`` kept from loading (Triton checks them again
        when a model they run appears)."""
        for entry in self.table:
            if name in entry.awaits and not entry.versions and self.repository.locate(entry.key):
                try:
                    await self.load_key(entry.key)
                except ServerError:
                    pass  # logged, and kept as the ensemble's reason

    @staticmethod
    async def _warm_request_level(result: LoadResult) -> None:
        """Warm Python and ensemble instances on the loop (tensor backends were warmed while loading);
        a version whose warm-up fails is dropped, as one whose load failed."""
        for version, loaded in list(result.versions.items()):
            try:
                await warm_request_level(result.config, loaded.instances, loaded.files.model_dir, version)
            except ServerError as exc:
                for instance in {id(i): i for i in loaded.instances}.values():
                    if hasattr(instance, "aclose"):
                        await instance.aclose()  # finalize() runs, as on any unload
                    else:
                        instance.close()
                del result.versions[version]
                result.failed[version] = exc.message
                logger.error("failed to load '%s' version %d: %s", result.config.name, version, exc.message)

    def _model_dir(self, key: ModelKey) -> Path:
        name = key.name
        location = self.repository.locate(key)
        if location is None:
            logger.error(
                "failed to load '%s': no model folder of that name in %s", key, self.repository.describe()
            )
            raise ModelLoadError(
                poll_failure(name, f"no model folder named '{name}' in the model repository")
            )
        if location.duplicate_of is not None:
            logger.error("failed to load '%s': both %s and %s", key, location.path, location.duplicate_of)
            reason = "the name appears in more than one model repository"
            entry = self.table.add(key)
            entry.attempted = True
            self._record_failure(entry, bool(entry.versions), reason)
            raise ModelLoadError(f"failed to load '{name}': {reason}")
        return location.path

    def _record_failure(self, entry: ModelEntry, was_serving: bool, reason: str, log: bool = True) -> None:
        if log:
            logger.error("failed to load '%s': %s", entry.key, reason)
        if not was_serving:
            entry.state, entry.reason = UNAVAILABLE, reason

    def _versions_of(self, result: LoadResult) -> dict[int, ModelVersion]:
        return {
            version: ModelVersion(
                result.config, loaded.files, loaded.instances, result.labels, self.response_cache,
                self.rate_limiter, loaded.needs, self.options.latency_metrics, loaded.passive,
                self.options.max_unread_response_bytes,
            )
            for version, loaded in result.versions.items()
        }  # fmt: skip

    async def _swap_in(
        self, entry: ModelEntry, result: LoadResult, new_versions: dict[int, ModelVersion]
    ) -> None:
        if self.rate_limiter is not None:
            for loaded in result.versions.values():
                for needs, _ in loaded.needs:
                    self.rate_limiter.register(needs)
        old_versions = entry.versions
        entry.versions = new_versions
        entry.unavailable = dict(result.failed)
        entry.unloading.clear()  # what retires from before is no longer what the index shows
        entry.config = result.config
        entry.state, entry.reason = READY, ""
        for number, model in old_versions.items():
            self.retirements.start(entry, number, model, listed=False)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Unload the model (in every namespace that holds it); with ``unload_dependents``, an
        ensemble's step models that were loaded only for it and that no other ensemble runs."""
        entries = self.table.all_named(name)
        if not entries and not self.repository.keys_named(name):
            # Nothing to unload: done, as Triton answers it (its unload of a name it does not know succeeds).
            logger.info("unload of '%s': no such model, nothing to unload", name)
            return
        for entry in entries:
            config = entry.config
            await self._unload_entry(entry)
            if unload_dependents and is_ensemble(config):
                await self._unload_steps_of(entry.key, config)

    async def _unload_steps_of(self, key: ModelKey, config: model_config_pb2.ModelConfig) -> None:
        """unload_dependents: the models the ensemble ``key`` ran that were loaded only for an
        ensemble and that no serving ensemble runs now, and theirs in turn."""
        for name in step_names(config):
            step = self._step_entry(key, name)
            if step is None or not step.for_ensemble or not step.versions or self._runs(step):
                continue
            step_config = step.config
            await self._unload_entry(step)
            if is_ensemble(step_config):
                await self._unload_steps_of(step.key, step_config)

    def _step_entry(self, ensemble: ModelKey, name: str) -> ModelEntry | None:
        try:
            return self.table.preferring(ensemble.namespace, name)
        except InvalidArgument:
            return None  # ambiguous

    def _runs(self, step: ModelEntry) -> bool:
        """Whether a serving ensemble runs ``step``."""
        return any(
            self._step_entry(entry.key, name) is step
            for entry in self.table
            if entry.versions and is_ensemble(entry.config)
            for name in step_names(entry.config)
        )

    async def _unload_entry(self, entry: ModelEntry) -> None:
        if not entry.versions and (entry.state != UNAVAILABLE or entry.reason == UNLOADED):
            return  # never loaded, or unloaded already (its rows, UNLOADING ones too, stay as they are)
        async with entry.lock:
            await self._withdraw(entry, UNLOADED)
        self.table.release(entry.key)
        logger.info("unloading '%s': it takes no more requests", entry.key)
        await self._withdraw_broken_ensembles()

    async def _withdraw(self, entry: ModelEntry, reason: str) -> None:
        """Stop serving ``entry`` (its lock held), keeping ``reason`` as its state's; its versions
        finish what they hold in the background, listed UNLOADING until they are gone."""
        old_versions = entry.versions
        entry.versions = {}
        entry.unavailable = {version: reason for version in old_versions}
        entry.state, entry.reason = UNAVAILABLE, reason
        entry.canary = None
        for number, model in old_versions.items():
            self.retirements.start(entry, number, model, listed=True)

    async def _withdraw_broken_ensembles(self) -> None:
        """Unload the serving ensembles whose steps' models no longer serve (or no longer fit), as
        Triton does; each is loaded again when the model it lacks is."""
        broken = True
        while broken:
            broken = False
            for entry in self.table:
                if not entry.versions or not is_ensemble(entry.config):
                    continue
                unmet = ensemble_refusal(entry.key, entry.config, self.table)
                if unmet is not None:
                    async with entry.lock:
                        entry.awaits = unmet.awaits
                        # Taken down by a change to another model, as Triton does: strict readiness
                        # leaves it out, as it does unloaded models, until it loads again.
                        entry.attempted = False
                        await self._withdraw(entry, unmet.reason)
                    logger.error("unloaded '%s': %s", entry.key, unmet.reason)
                    broken = True

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        serving = [model for entry in self.table for model in entry.versions.values()]
        await asyncio.gather(*(model.retire() for model in serving))  # side by side, as in retire()
        for entry in self.table:
            entry.versions = {}
        await self.retirements.finish()

    # -- polling ------------------------------------------------------------------------------

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.options.repository_poll_secs)
            try:
                await self.poll_once()
            except Exception:
                logger.exception("polling the model repository failed")

    async def refresh_repository(self) -> None:
        """Mirror remote repositories again (a no-op for local folders)."""
        await asyncio.to_thread(self.repository.refresh)

    def _scan_with_fingerprints(self) -> tuple[dict[ModelKey, ModelLocation], dict[ModelKey, Fingerprint]]:
        on_disk = self.repository.scan_by_key()
        return on_disk, {key: fingerprint(location.path) for key, location in on_disk.items()}

    async def poll_once(self) -> None:
        """Load new or changed models, unload removed ones."""
        await self.refresh_repository()
        # A stat of every file of every model: 0.13 s for 200 models of 50 files on a local disk, and a
        # network file system's stats are slower; on the loop it held every request that long.
        on_disk, now = await asyncio.to_thread(self._scan_with_fingerprints)
        changed = [
            key for key in on_disk if (entry := self.table.get(key)) is None or entry.fingerprint != now[key]
        ]
        await self._load_in_dependency_order(changed)  # each failure is logged by load()
        for entry in self.table:
            if entry.key in on_disk:
                continue
            entry.fingerprint = ()  # if the folder comes back, even as it was, it is loaded again
            if entry.versions:
                await self._unload_entry(entry)
            else:
                self.table.release(entry.key)  # gone before it ever served: it holds its name no more

    def require_explicit_mode(self) -> None:
        if self.options.model_control_mode != ModelControlMode.EXPLICIT:
            raise Unavailable("explicit model load / unload is not allowed if polling is enabled")
