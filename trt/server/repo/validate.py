"""``trt repo validate``: every problem in a model repository, before a server meets it.

Each model goes through the loader's own steps (parse, versions, backend, auto-complete, the config
rules, the backend's check of the config against each version's file), so what passes here loads in
``trt serve``; where the loader stops at the first problem, this collects every one it can. On top
come checks no loader makes: folders that look like versions but are ignored, a ``model.py`` that
cannot be imported, warm-up data, ensembles checked against the models their steps run, and settings
that load but do nothing. ``--load`` then loads each sound model and runs one inference
(``server.repo.load_check``).
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from trt.protos import model_config_pb2
from trt.server.core import devices
from trt.server.core.backends.base import Backend, ModelFiles
from trt.server.core.backends.registry import (
    ENSEMBLE_PLATFORM,
    BackendEntry,
    get_backend,
    model_filenames,
    resolve_entry,
)
from trt.server.core.errors import BackendUnavailable, ModelConfigError, ModelLoadError, ServerError
from trt.server.core.models.config import parse_config_text
from trt.server.core.models.config_rules import config_problems
from trt.server.core.models.dependencies import step_key
from trt.server.core.models.loader import effective_config, model_config_path, read_labels
from trt.server.core.models.repository import ModelLocation, ModelRepository, version_folders
from trt.server.core.models.table import ModelKey
from trt.server.core.models.warmup import warmup_samples
from trt.server.core.options import CoreOptions
from trt.server.core.scheduling.sequence_controls import initial_state_values
from trt.server.repo.config_lines import ConfigLines
from trt.server.repo.ensemble_checks import check_ensemble
from trt.server.repo.findings import CheckedModel, Finding, ModelReport, Severity, ValidationReport, note
from trt.server.repo.load_check import load_and_infer

Config = model_config_pb2.ModelConfig
_LOOKS_LIKE_VERSION = re.compile(r"^(v|version)?[-_]?\d+([._-]\d+)*$", re.IGNORECASE)


def validate_repository(
    locations: Sequence[str | Path],
    model: str | None = None,
    load: bool = False,
    options: CoreOptions | None = None,
    on_model: Callable[[str], None] | None = None,
    model_config_name: str = "",
    model_namespacing: bool = False,
    allow_missing_backends: bool = False,
) -> ValidationReport:
    """Check the models of ``locations`` (or ``model``), loading each where ``load``; each model's
    ``configs/<model_config_name>.pbtxt`` where it has one, as ``trt serve --model-config-name``;
    each location a namespace of its own with ``model_namespacing``, as ``trt serve
    --model-namespacing`` (a name may then repeat across them). A model whose backend is not
    installed here is checked as far as it can be without it either way; ``allow_missing_backends``
    makes the missing backend a note rather than an error (a CI machine without a GPU's packages)."""
    repository = ModelRepository(locations, model_namespacing)
    report = ValidationReport([str(source) for source in repository.sources])
    try:
        repository.refresh()
        repository.check_roots()
    except ModelLoadError as exc:
        report.findings.append(
            Finding(Severity.ERROR, "", repository.describe(), exc.message, check="layout")
        )
        return report
    options = options or CoreOptions(
        model_repositories=tuple(repository.roots),
        model_config_name=model_config_name,
        model_namespacing=model_namespacing,
    )
    found = repository.scan_by_key()
    names = sorted({key.name for key in found})
    if model is not None and model not in names:
        close = difflib.get_close_matches(model, names, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        report.findings.append(
            Finding(
                Severity.ERROR, model, repository.describe(),
                f"no model folder named '{model}'{hint}", check="layout",
            )
        )  # fmt: skip
        return report
    wanted = sorted((key for key in found if model is None or key.name == model), key=ModelKey.by_name)
    checked: dict[ModelKey, CheckedModel] = {}
    for key in wanted:
        if on_model is not None:
            on_model(key.name)
        checked[key] = ModelCheck(found[key], repository, options, allow_missing_backends).run()

    for key in list(checked):
        entry = checked[key]
        if entry.config is not None and entry.config.platform == ENSEMBLE_PLATFORM:
            config_of = _step_configs(
                key.namespace, found, checked, repository, options, allow_missing_backends
            )
            for problem in [
                *check_ensemble(entry.config, config_of, names),
                *_ambiguous_steps(entry.config, key, found),
            ]:
                note(entry, repository, Severity.ERROR, problem.message, "ensemble", problem.field)
    report.models = [checked[key].report for key in wanted]
    if load:
        load_and_infer(repository, checked, wanted, options, allow_missing_backends)
    return report


def _ambiguous_steps(
    config: Config, key: ModelKey, found: dict[ModelKey, ModelLocation]
) -> Iterator[ModelConfigError]:
    """Steps whose model several namespaces hold, none of them the ensemble's: the server refuses
    to pick one."""
    for index, step in enumerate(config.ensemble_scheduling.step):
        holders = [other for other in found if other.name == step.model_name]
        if len(holders) > 1 and ModelKey(key.namespace, step.model_name) not in found:
            yield ModelConfigError(
                f"step {index} runs model '{step.model_name}', which {len(holders)} repositories hold, "
                "none of them this ensemble's: the server refuses the ambiguous name",
                f"ensemble_scheduling.step[{index}].model_name",
            )


def _step_configs(
    namespace: str,
    found: dict[ModelKey, ModelLocation],
    checked: dict[ModelKey, CheckedModel],
    repository: ModelRepository,
    options: CoreOptions,
    allow_missing_backends: bool,
) -> Callable[[str], Config | None]:
    """The configs of the models an ensemble in ``namespace`` runs, as the server resolves its steps
    (that namespace's model of the name, else the one model of it); checked on demand when --model
    left them out. None where a step's tensors are not known here: its backend, not installed, would
    have read them from the model file."""

    def config_of(name: str) -> Config | None:
        key = step_key(namespace, name, found)
        if key is None:
            return None  # several namespaces hold it and none is the ensemble's: ambiguous
        if key not in checked:
            checked[key] = ModelCheck(found[key], repository, options, allow_missing_backends).run()
        step = checked[key]
        if (
            step.missing_backend
            and step.config is not None
            and not (step.config.input and step.config.output)
        ):
            return None
        return step.config

    return config_of


class ModelCheck:
    """Validation of one model folder."""

    def __init__(
        self,
        location: ModelLocation,
        repository: ModelRepository,
        options: CoreOptions,
        allow_missing_backends: bool = False,
        open_model_files: bool = True,
    ) -> None:
        self.location = location
        self.allow_missing_backends = allow_missing_backends
        # Without it the backend's own check of each model file is left out (``trt repo list``: torch
        # alone takes 3 s to import, and a large model file longer to read); auto-complete still reads
        # the files of a backend that completes configs from them, as the server would.
        self.open_model_files = open_model_files
        self.repository = repository
        self.options = options
        self.config_path = model_config_path(location.path, options.model_config_name)
        self.result = CheckedModel(
            ModelReport(location.name, repository.display(location.path)), location.path, self.config_path
        )

    @property
    def report(self) -> ModelReport:
        return self.result.report

    def add(
        self,
        severity: Severity,
        message: str,
        check: str,
        field: str = "",
        line: int | None = None,
        file: Path | None = None,
        column: int | None = None,
    ) -> None:
        lines = self.result.lines
        if line is None and field and lines is not None and file is None:
            line = lines.line_of(field)
        if file is None:
            file = self.config_path if self.config_path.is_file() else self.location.path
        self.report.findings.append(
            Finding(severity, self.location.name, self.repository.display(file), message, line, check, column)
        )

    def add_error(self, exc: ServerError, check: str = "config", prefix: str = "", place: str = "") -> None:
        """``place``: where ``exc``'s message says it is (``file:line:column``), dropped from the
        message, since the finding names the place itself."""
        if isinstance(exc, ModelConfigError):
            field, line, column, kind = exc.field, exc.line, exc.column, check
        else:
            field, line, column, kind = "", None, None, "model-file"
        message = exc.message.removeprefix(f"{place}: ") if place else exc.message
        self.add(Severity.ERROR, prefix + message, kind, field, line, column=column)

    def run(self) -> CheckedModel:
        if self.location.duplicate_of is not None:
            first, second = self.location.path, self.location.duplicate_of
            self.add(
                Severity.ERROR,
                f"the model name is in more than one repository ({self.repository.display(first)} "
                f"and {self.repository.display(second)}); neither copy is served",
                "layout",
            )
            return self.result
        readable, written = self._read_config()
        if not readable or not self._check_versions():
            return self.result
        name, folder = self.location.name, self.location.path
        missing: BackendUnavailable | None = None
        try:  # the parsed file goes in as the loader's override, so it is read once
            try:
                config, versions, available = effective_config(
                    name, folder, self.options, written, probe_gpu_support=self.open_model_files
                )
            except BackendUnavailable as exc:  # checked without it: the config as written
                missing = exc
                config, versions, available = effective_config(
                    name, folder, self.options, written, backend_needed=False, probe_gpu_support=False
                )
            entry = resolve_entry(config, [available[v] for v in versions])
        except ServerError as exc:
            self.add_error(exc)
            return self.result
        self.result.config = config
        self.report.backend = config.backend
        self.report.versions = versions
        # Auto-complete, which needs the backend, would have read these from the model file.
        from_file = (
            {"input", "output"} if missing is not None and self.options.auto_complete_config else set()
        )
        unchecked = sorted(field for field in from_file if not getattr(config, field))
        for problem in config_problems(config):
            if problem.field not in unchecked:
                self.add_error(problem)
        if missing is None:  # a backend may still need a library of its own to open the model file
            missing = self._check_files(config, versions, available, get_backend(entry))
        if missing is not None:
            self._check_without_backend(config, versions, available, entry, missing, unchecked)
        self._check_settings(config, completed=not from_file)
        return self.result

    def _check_without_backend(
        self,
        config: Config,
        versions: list[int],
        available: dict[int, Path],
        entry: BackendEntry,
        missing: BackendUnavailable,
        unchecked: list[str],
    ) -> None:
        """What can be checked of a model whose backend is not installed here: each version's model
        file is there, and its labels, warm-up data and initial states (the file is not opened)."""
        self.result.missing_backend = entry.name
        skipped = "the model file was not opened"
        if unchecked:
            skipped += (
                f", and its {' and '.join(f'{field}s' for field in unchecked)} (read from it) not checked"
            )
        if self.allow_missing_backends:
            self.add(Severity.NOTE, f"{missing.message}; checked without it: {skipped}", "model-file")
        else:
            # For trt repo validate; trt repo list (which opens no model file) says only what is missing.
            hint = "; where the model is to run elsewhere, --allow-missing-backends makes this a note"
            self.add(Severity.ERROR, missing.message + (hint if self.open_model_files else ""), "model-file")
        for version in versions:
            files = ModelFiles(self.location.name, version, self.location.path, available[version])
            prefix = f"version {version}: " if len(versions) > 1 else ""
            try:
                _model_file_present(config, files, entry)
            except ServerError as exc:
                self.add_error(exc, prefix=prefix)
        self._check_data_files(config)

    def _read_config(self) -> tuple[bool, Config | None]:
        """(whether validation can go on, the parsed config.pbtxt or None when there is none)."""
        if not self.config_path.exists():
            return True, None  # Triton auto-completes a missing config; the backend says if it cannot
        try:
            text = self.config_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self.add(Severity.ERROR, f"cannot read config.pbtxt: {exc}", "config")
            return False, None
        self.result.lines = ConfigLines(text)
        source = self.repository.display(self.config_path)
        try:
            return True, parse_config_text(text, source)
        except ModelConfigError as exc:
            place = ":".join(str(part) for part in (source, exc.line, exc.column) if part is not None)
            self.add_error(exc, place=place)
            return False, None

    def _check_versions(self) -> bool:
        model_dir = self.location.path
        for entry in sorted(model_dir.iterdir()):
            if not entry.is_dir() or (
                entry.name.isascii() and entry.name.isdigit() and not entry.name.startswith("0")
            ):
                continue
            if _LOOKS_LIKE_VERSION.match(entry.name):
                suggestion = str(int(re.sub(r"\D", "", entry.name) or "0"))
                fix = (
                    f"rename it to '{suggestion}'"
                    if suggestion != "0"
                    else "versions start at 1: rename it to '1'"
                )
                self.add(
                    Severity.WARNING,
                    f"folder '{entry.name}' is ignored: version folders are plain numbers without leading "
                    f"zeros; {fix}",
                    "layout",
                    file=entry,
                )
        if version_folders(model_dir):
            return True
        stray = [name for name in model_filenames() if (model_dir / name).exists()]
        hint = (
            f"; {stray[0]} is directly in the model folder: move it into {self.location.name}/1/"
            if stray
            else f"; put the model file in {self.location.name}/1/"
        )
        self.add(Severity.ERROR, f"no version folder{hint}", "layout", file=model_dir)
        return False

    def _check_files(
        self, config: Config, versions: list[int], available: dict[int, Path], backend: Backend
    ) -> BackendUnavailable | None:
        """The backend's check of the config against every selected version's file; what it lacks
        here to open them (torch, for TorchScript), if it does."""
        for version in versions:
            files = ModelFiles(self.location.name, version, self.location.path, available[version])
            prefix = f"version {version}: " if len(versions) > 1 else ""
            try:
                if self.open_model_files:
                    backend.validate(config, files)
            except BackendUnavailable as exc:
                return exc
            except ServerError as exc:
                self.add_error(exc, prefix=prefix)
            if config.backend == "python":
                self._check_python_file(files.artifact(config, "model.py"))
        self._check_data_files(config)
        return None

    def _check_data_files(self, config: Config) -> None:
        """The files and tensors a config names beside the model: labels, warm-up, initial states."""
        try:
            read_labels(config, self.location.path)
        except ModelConfigError as exc:
            self.add_error(exc)
        try:
            warmup_samples(config, self.location.path)
        except ModelConfigError as exc:
            self.add_error(exc)
        try:
            initial_state_values(config, self.location.path)
        except ModelConfigError as exc:
            self.add_error(exc)

    def _check_python_file(self, path: Path) -> None:
        """What Triton's Python backend needs of model.py, checked without running it."""
        if not path.is_file():
            return  # the backend's check already said so
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except SyntaxError as exc:
            self.add(
                Severity.ERROR, f"model.py does not compile: {exc.msg}", "python", line=exc.lineno, file=path
            )
            return
        classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
        model_class = classes.get("TritonPythonModel")
        if model_class is None:
            others = f" (found {', '.join(classes)})" if classes else ""
            self.add(
                Severity.ERROR,
                f"model.py defines no class TritonPythonModel{others}; Triton's Python backend looks for "
                "that name",
                "python",
                file=path,
            )
            return
        methods = {
            node.name
            for node in model_class.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        if "execute" not in methods and not any(isinstance(b, ast.Name) for b in model_class.bases):
            self.add(
                Severity.ERROR,
                "class TritonPythonModel has no execute(self, requests) method",
                "python",
                line=model_class.lineno,
                file=path,
            )

    def _check_settings(self, config: Config, completed: bool = True) -> None:
        """Settings that load but do not do what they seem to (``completed``: auto-complete ran, so
        max_batch_size is what the model will have)."""
        scheduler = config.WhichOneof("scheduling_choice")
        if config.max_batch_size == 0 and scheduler == "dynamic_batching" and completed:
            self.add(
                Severity.WARNING,
                "dynamic_batching does nothing while max_batch_size is 0: the model takes no batch dimension",
                "config",
                "dynamic_batching",
            )
        if devices.gpu_count() == 0:
            for index, group in enumerate(config.instance_group):
                if group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU:
                    self.add(
                        Severity.WARNING,
                        f"instance_group {group.name or index} is KIND_GPU but this machine has no GPU: "
                        "the model loads only where one is present",
                        "config",
                        f"instance_group[{index}].kind",
                    )


def _model_file_present(config: Config, files: ModelFiles, entry: BackendEntry) -> None:
    """The model file the backend would open (any of ``cc_model_filenames``' where the config names
    some), in the version folder."""
    names = list(config.cc_model_filenames.values())
    if not names:
        files.require_artifact(config, entry.default_filename)
        return
    for name in names:
        path = files.inside(name, "cc_model_filenames")
        if not path.exists():
            raise ModelLoadError(f"model file not found: {path} (named in cc_model_filenames)")
