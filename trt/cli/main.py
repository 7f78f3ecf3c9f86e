"""``trt``: serve models over Triton's protocol, and more as the project grows.

Each command's module is imported when that command runs, not before: ``trt serve`` does not pay
for the analyzer's imports (about 0.3 s of every start), nor ``trt --version`` for any of them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from trt import DISTRIBUTION, __version__


@dataclass(frozen=True, slots=True)
class _Command:
    module: str
    attribute: str  # a command function, or a typer.Typer of subcommands
    help: str = ""
    context_settings: dict[str, Any] = field(default_factory=dict)


_COMMANDS = {
    "serve": _Command(
        "trt.cli.serve",
        "serve_command",
        "Serve a Triton model repository (HTTP 8000, gRPC 8001, metrics 8002).",
        # tritonserver flags that mean nothing here are taken and named in a warning (cli.serve).
        {"allow_extra_args": True, "ignore_unknown_options": True},
    ),
    "perf": _Command(
        "trt.cli.perf", "perf_command", "Load-test a model as perf_analyzer does (same flags and CSV)."
    ),
    "analyze": _Command(
        "trt.cli.analyze",
        "analyze_command",
        "Find the config.pbtxt that serves a model best within a latency target.",
    ),
    "repo": _Command(
        "trt.cli.repo",
        "repo_app",
        "Create, fill, inspect and check model repositories (folders or s3:// paths).",
    ),
}


def _load(name: str, spec: _Command) -> Any:  # click's Command: typer >= 0.29 has its own copy of click
    target = getattr(importlib.import_module(spec.module), spec.attribute)
    if isinstance(target, typer.Typer):
        group = typer.main.get_group(target)
        group.name, group.help = name, spec.help
        return group
    single = typer.Typer(add_completion=False)
    single.command(name, help=spec.help, context_settings=spec.context_settings)(target)
    return typer.main.get_command(single)


class _LazyCommands(TyperGroup):
    """The top-level group: knows its commands by name and builds one when it is asked for. Its own
    help lists them from ``_COMMANDS`` alone: building all four imported about 1 s of modules."""

    _summaries_only = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        spec = _COMMANDS.get(cmd_name)
        if command is None and spec is not None:
            if self._summaries_only:
                return TyperCommand(cmd_name, help=spec.help)  # a name and a line, for the listing
            command = self.commands[cmd_name] = _load(cmd_name, spec)
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._summaries_only = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._summaries_only = False


app = typer.Typer(
    name="trt",
    cls=_LazyCommands,
    help="A Triton-compatible inference server: serve, load-test and tune model repositories.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"trt {__version__} ({DISTRIBUTION})")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_print_version, is_eager=True
    ),
) -> None:
    """trt: serve, measure and tune Triton model repositories."""


if __name__ == "__main__":
    app()
