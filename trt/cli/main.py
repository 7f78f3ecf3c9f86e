"""``trt``: serve models over Triton's protocol, and more as the project grows."""

from __future__ import annotations

import typer

from trt import DISTRIBUTION, __version__
from trt.cli.analyze import analyze_command
from trt.cli.perf import perf_command
from trt.cli.repo import repo_app
from trt.cli.serve import serve_command

app = typer.Typer(
    name="trt",
    help="A Triton-compatible inference server: serve, load-test and tune model repositories.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command(
    "serve",
    help="Serve a Triton model repository (HTTP 8000, gRPC 8001, metrics 8002).",
    # tritonserver flags that mean nothing here are taken and named in a warning (cli.serve).
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)(serve_command)
app.command("perf", help="Load-test a model as perf_analyzer does (same flags and CSV).")(perf_command)
app.add_typer(repo_app, name="repo")
app.command("analyze", help="Find the config.pbtxt that serves a model best within a latency target.")(
    analyze_command
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
