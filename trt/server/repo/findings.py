"""What ``trt repo validate`` reports: one finding per problem, naming the file and line."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    ERROR = "error"  # the model will not load (in trt or in Triton)
    WARNING = "warning"  # it loads, but probably not as meant


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    model: str
    file: str  # as the user knows it: a local path, or s3://... for a remote repository
    message: str
    line: int | None = None
    check: str = ""  # which check found it: layout, config, model-file, python, ensemble, load, infer

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

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

    def as_dict(self) -> dict[str, Any]:
        return {
            "repositories": self.repositories,
            "ok": self.errors == 0,
            "errors": self.errors,
            "warnings": self.warnings,
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
