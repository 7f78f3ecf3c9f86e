"""What ``trt repo validate`` reports: one finding per problem, naming the file and line."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from trt.protos import model_config_pb2
from trt.server.core.models.repository import ModelRepository
from trt.server.repo.config_lines import ConfigLines


class Severity(StrEnum):
    ERROR = "error"  # the model will not load (in trt or in Triton)
    WARNING = "warning"  # it loads, but probably not as meant
    NOTE = "note"  # not a problem: what could not be checked on this machine (--allow-missing-backends)


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    model: str
    file: str  # as the user knows it: a local path, or s3://... for a remote repository
    message: str
    line: int | None = None
    check: str = ""  # which check found it: layout, config, model-file, python, ensemble, load, infer
    column: int | None = None  # with ``line``: where the parser stopped in a config.pbtxt that does not parse

    @property
    def location(self) -> str:
        if not self.line:
            return self.file
        return f"{self.file}:{self.line}:{self.column}" if self.column else f"{self.file}:{self.line}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "severity": str(self.severity)}


@dataclass
class ModelReport:
    """Everything found about one model."""

    name: str
    path: str
    findings: list[Finding] = field(default_factory=list)
    backend: str = ""
    versions: list[int] = field(default_factory=list)
    loaded: bool | None = None  # --load: None when not tried

    @property
    def ok(self) -> bool:
        return not any(f.severity == Severity.ERROR for f in self.findings)


@dataclass
class ValidationReport:
    repositories: list[str]
    models: list[ModelReport] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # about the repositories themselves

    def all_findings(self) -> list[Finding]:
        return [*self.findings, *(f for model in self.models for f in model.findings)]

    @property
    def errors(self) -> int:
        return sum(f.severity == Severity.ERROR for f in self.all_findings())

    @property
    def warnings(self) -> int:
        return sum(f.severity == Severity.WARNING for f in self.all_findings())

    @property
    def notes(self) -> int:
        return sum(f.severity == Severity.NOTE for f in self.all_findings())

    def as_dict(self) -> dict[str, Any]:
        return {
            "repositories": self.repositories,
            "ok": self.errors == 0,
            "errors": self.errors,
            "warnings": self.warnings,
            "notes": self.notes,
            "models": [
                {
                    "name": model.name,
                    "path": model.path,
                    "ok": model.ok,
                    "backend": model.backend,
                    "versions": model.versions,
                    "loaded": model.loaded,
                }
                for model in self.models
            ],
            "findings": [finding.as_dict() for finding in self.all_findings()],
        }


@dataclass
class CheckedModel:
    """A model after validation: its report and, when it got that far, its effective config."""

    report: ModelReport
    model_dir: Path  # the local folder (a remote repository's mirror)
    config_path: Path  # its config file: config.pbtxt, or configs/<--model-config-name>.pbtxt
    config: model_config_pb2.ModelConfig | None = None
    lines: ConfigLines | None = None
    # The backend it needs, when that is not installed here and --allow-missing-backends let the
    # checks go on without it: --load leaves the model (and ensembles that run it) unloaded.
    missing_backend: str = ""


def note(
    model: CheckedModel,
    repository: ModelRepository,
    severity: Severity,
    message: str,
    check: str,
    field: str = "",
) -> None:
    """Record a finding about a model's config found after its own pass (ensembles, --load)."""
    line = model.lines.line_of(field) if field and model.lines is not None else None
    config_path = model.config_path
    file = repository.display(config_path if config_path.is_file() else model.model_dir)
    model.report.findings.append(Finding(severity, model.report.name, file, message, line, check))
