"""The shape of the package, pinned: no import cycles, the core imports no transport and no backend,
backends import no transport, and no module grows past 500 lines.

Imports are read from the source (``ast``), including those inside functions; imports under
``if TYPE_CHECKING:`` count for the layering rules (a type is a dependency too) but not for cycles,
since they never run.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGE = ROOT / "trt"
GENERATED = PACKAGE / "protos"
MAX_LINES = 500

# Which parts of trt each part may not import (prefix match on module names).
FORBIDDEN = {
    "trt.server.core": (
        "trt.server.backends",
        "trt.server.http",
        "trt.server.grpc",
        "trt.server.openai",
        "trt.server.sagemaker",
        "trt.server.vertex_ai",
        "trt.server.repo",
        "trt.server.metrics",
        "trt.server.runtime",
        "trt.server.frontend",
        "trt.cli",
        "trt.perf",
        "trt.analyzer",
    ),
    "trt.server.backends": (
        "trt.server.http",
        "trt.server.grpc",
        "trt.server.openai",
        "trt.server.sagemaker",
        "trt.server.vertex_ai",
        "trt.server.runtime",
        "trt.cli",
    ),
    "trt.server.http": ("trt.server.backends", "trt.server.grpc", "trt.server.frontend", "trt.cli"),
    "trt.server.grpc": ("trt.server.backends", "trt.server.http", "trt.server.frontend", "trt.cli"),
    # Worker processes run the HTTP and gRPC transports and forward to the core's apps: no backend.
    "trt.server.frontend": ("trt.server.backends", "trt.server.runtime", "trt.cli"),
    # It serves its routes through trt.server.http's HTTP/1.1 server, like the metrics endpoint.
    "trt.server.openai": ("trt.server.backends", "trt.server.grpc", "trt.cli"),
    "trt.perf": ("trt.server", "trt.cli", "trt.analyzer"),
}


@dataclass
class Module:
    name: str
    path: Path
    imports: set[str] = field(default_factory=set)  # every import, TYPE_CHECKING ones included
    runtime_imports: set[str] = field(default_factory=set)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _walk(node: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, type_only
        elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for inner in child.body:
                yield from _walk(ast.Module(body=[inner], type_ignores=[]), True)
            for inner in child.orelse:
                yield from _walk(ast.Module(body=[inner], type_ignores=[]), type_only)
        else:
            yield from _walk(child, type_only)


def _modules() -> dict[str, Module]:
    modules = {_module_name(path): Module(_module_name(path), path) for path in PACKAGE.rglob("*.py")}
    for module in modules.values():
        is_package = module.path.name == "__init__.py"
        for node, type_only in _walk(ast.parse(module.path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = module.name.split(".")
                    base = base[: len(base) - node.level + (1 if is_package else 0)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                # ``from package import submodule`` depends on the submodule, not on the package face.
                targets = [
                    f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin
                    for alias in node.names
                ]
            for target in targets:
                while target and target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != module.name:
                    module.imports.add(target)
                    if not type_only:
                        module.runtime_imports.add(target)
    return modules


MODULES = _modules()


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in sorted(MODULES[name].runtime_imports):
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(MODULES):
        if name not in index:
            visit(name)
    return found


def test_the_reader_sees_the_imports_it_must() -> None:
    # The checks below are only as good as the import reading: pin a few edges known to exist.
    assert "trt.server.core.models.version" in MODULES["trt.server.core.models.lifecycle"].runtime_imports
    assert "trt.server.core.backends.base" in MODULES["trt.server.backends.onnxruntime"].imports
    assert "trt.server.grpc.codec" in MODULES["trt.server.grpc.service"].runtime_imports


def test_no_module_imports_itself_back_through_others() -> None:
    assert _cycles() == []


@pytest.mark.parametrize("part", sorted(FORBIDDEN))
def test_each_part_imports_only_what_sits_below_it(part: str) -> None:
    crossings = sorted(
        f"{module.name} -> {target}"
        for module in MODULES.values()
        if module.name == part or module.name.startswith(part + ".")
        for target in module.imports
        if any(target == banned or target.startswith(banned + ".") for banned in FORBIDDEN[part])
    )
    assert crossings == []


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): length
        for path in PACKAGE.rglob("*.py")
        if GENERATED not in path.parents and (length := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


# Libraries behind extras: a module that needs one may fail to import without it, and only so.
OPTIONAL = {
    "torch",
    "tensorrt",
    "cuda",
    "pynvml",
    "s3fs",
    "openvino",
    "tensorflow",
    "transformers",
    "tokenizers",
}


@pytest.mark.parametrize(
    "name",
    sorted(n for n in MODULES if ".stub" not in n and not n.endswith("__main__")),
)
def test_every_module_imports(name: str) -> None:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        assert (exc.name or "").split(".")[0] in OPTIONAL, exc
