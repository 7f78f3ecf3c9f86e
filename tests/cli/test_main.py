"""The ``trt`` command line: each command's module is imported only when that command runs."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from trt import __version__
from trt.cli.main import app

COMMAND_MODULES = ("trt.cli.serve", "trt.cli.perf", "trt.cli.analyze", "trt.cli.repo")


def _modules_after(code: str) -> set[str]:
    """The trt modules a fresh interpreter has imported after running ``code``."""
    shown = "import sys; print('\\n'.join(m for m in sys.modules if m.startswith('trt')))"
    result = subprocess.run(
        [sys.executable, "-c", f"{code}\n{shown}"], capture_output=True, text=True, timeout=120, check=True
    )
    return set(result.stdout.split())


def test_importing_the_command_line_imports_no_command() -> None:
    loaded = _modules_after("import trt.cli.main")
    assert not loaded & {*COMMAND_MODULES, "trt.analyzer.analysis", "trt.server.core.server"}


def test_a_command_imports_its_own_module_only() -> None:
    loaded = _modules_after(
        "from trt.cli.main import app\n"
        "try:\n"
        "    app(['serve', '--help'], prog_name='trt')\n"
        "except SystemExit:\n"
        "    pass"
    )
    assert "trt.cli.serve" in loaded
    assert not loaded & {"trt.cli.analyze", "trt.analyzer.analysis", "trt.cli.perf"}
    # Nor the server it would run (a third of a second): its flags' parsers and defaults only.
    assert not loaded & {"trt.server.runtime", "trt.server.core.server", "trt.server.grpc.server"}


def test_help_names_every_command_with_its_summary() -> None:
    result = CliRunner().invoke(app, ["--help"], prog_name="trt")
    assert result.exit_code == 0
    positions = [result.output.index(f"│ {name} ") for name in ("serve", "perf", "analyze", "repo")]
    assert positions == sorted(positions)  # the order of before: commands, then the repo group
    assert "Load-test a model as perf_analyzer does" in result.output


def test_the_top_level_help_imports_no_command() -> None:
    """Its summaries come from the command table: building the four commands imported ~1 s."""
    loaded = _modules_after(
        "from trt.cli.main import app\n"
        "try:\n"
        "    app(['--help'], prog_name='trt')\n"
        "except SystemExit:\n"
        "    pass"
    )
    assert not loaded & {*COMMAND_MODULES, "trt.server.core"}


def test_subcommands_of_repo_are_reached_through_the_lazy_group() -> None:
    result = CliRunner().invoke(app, ["repo", "--help"], prog_name="trt")
    assert result.exit_code == 0
    assert "validate" in result.output and "add" in result.output
    assert "Create, fill, inspect and check model repositories" in result.output
    # The listing's stand-ins are for the listing only: the commands still run.
    assert CliRunner().invoke(app, ["--help"], prog_name="trt").exit_code == 0
    assert CliRunner().invoke(app, ["repo", "list", "--help"], prog_name="trt").exit_code == 0


def test_an_unknown_command_is_refused_with_status_2() -> None:
    result = CliRunner().invoke(app, ["servve"], prog_name="trt")
    assert result.exit_code == 2


def test_version_prints_without_loading_a_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trt", "--version"], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip().startswith(f"trt {__version__} (")
