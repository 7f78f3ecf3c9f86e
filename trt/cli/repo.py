"""``trt repo``: create, fill, inspect and check Triton model repositories (local or on object storage).

    trt repo init model_repository
    trt repo add resnet.onnx --max-batch-size 8 --dynamic-batching --instances 2
    trt repo list
    trt repo show resnet
    trt repo validate --load
    trt repo remove resnet --version 1 --yes

Exit status: 0 done (validate: no errors), 1 validate found errors (or warnings with
``--warnings-as-errors``), 2 a bad option or a request that cannot be done.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trt.cli.console import make_console
from trt.cli.flags import parse_model_config_name
from trt.server.core.errors import ServerError
from trt.server.core.models.config import config_to_dict, config_to_text
from trt.server.core.models.object_store import is_remote
from trt.server.repo.add import AddOptions, add_model
from trt.server.repo.findings import Severity, ValidationReport
from trt.server.repo.inventory import list_models, show_model
from trt.server.repo.manage import count_models, init_repository, remove_model
from trt.server.repo.tensor_spec import TensorSpec
from trt.server.repo.validate import validate_repository

EXIT_FINDINGS = 1
EXIT_USAGE = 2
DEFAULT_REPOSITORY = "model_repository"

repo_app = typer.Typer(  # its help is cli.main's, which lists it without importing this module
    no_args_is_help=True,
)
_REPOSITORY_OPTION = typer.Option(DEFAULT_REPOSITORY, "--repository", "-r", help="Repository folder.")


def _fail(error: ServerError | str) -> typer.Exit:
    message = error.message if isinstance(error, ServerError) else error
    make_console(stderr=True).print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(EXIT_USAGE)


def _location(text: str) -> str | Path:
    return text if is_remote(text) else Path(text)


def _print_json(value: object) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


@repo_app.command("init")
def init_command(
    repository: str = typer.Argument(DEFAULT_REPOSITORY, help="Folder to create."),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Create an empty model repository folder."""
    path = Path(repository)
    try:
        created = init_repository(path)
    except ServerError as exc:
        raise _fail(exc) from None
    if json_output:
        _print_json({"repository": str(path), "created": created, "models": count_models(path)})
        return
    console = make_console(stderr=False)
    if created:
        console.print(f"created [bold]{escape(str(path))}[/]; add a model with: trt repo add FILE -r {path}")
    else:
        console.print(f"{escape(str(path))} already exists with {count_models(path)} model(s)")


@repo_app.command("add")
def add_command(
    model_file: Path = typer.Argument(
        ...,
        help="A .onnx, .pt (TorchScript), .plan (TensorRT) or model.py; or a folder holding model.py and the "
        "modules it imports (copied whole but for __pycache__, *.pyc and hidden files).",
    ),
    repository: str = _REPOSITORY_OPTION,
    name: str = typer.Option(None, "--name", "-n", help="Model name (default: from the file name)."),
    version: int = typer.Option(None, "--version", "-v", help="Version number (default: the next one)."),
    max_batch_size: int = typer.Option(
        None, "--max-batch-size", help="0 for no batch dimension (default: read from the model)."
    ),
    dynamic_batching: bool = typer.Option(
        None, "--dynamic-batching/--no-dynamic-batching", help="Default: on when the model batches."
    ),
    instances: int = typer.Option(None, "--instances", help="Instances of the model (instance_group count)."),
    kind: str = typer.Option(None, "--kind", help="cpu or gpu (instance_group kind)."),
    inputs: list[str] = typer.Option(
        None, "--input", help="NAME:TYPE:DIMS; needed for TorchScript and for model.py without auto-complete."
    ),
    outputs: list[str] = typer.Option(
        None, "--output", help="NAME:TYPE:DIMS (default: read from the model)."
    ),
    includes: list[Path] = typer.Option(
        None, "--include", help="A file or folder to copy beside the model file (repeatable)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace an existing version or config.pbtxt."),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Copy a model file into the repository with a complete config.pbtxt read from the model.

    An ONNX model's external data files come with it; so do the files given with --include.
    """
    if is_remote(repository):
        raise _fail("trt repo add writes local folders; upload with your object-store tools afterwards")
    try:
        options = AddOptions(
            name=name,
            version=version,
            max_batch_size=max_batch_size,
            dynamic_batching=dynamic_batching,
            instances=instances,
            kind=kind.lower() if kind else None,
            inputs=tuple(TensorSpec.parse(text) for text in inputs or []),
            outputs=tuple(TensorSpec.parse(text) for text in outputs or []),
            includes=tuple(includes or []),
            force=force,
        )
        result = add_model(model_file, Path(repository), options)
    except ServerError as exc:
        raise _fail(exc) from None
    if json_output:
        _print_json(
            {
                "model": result.model,
                "version": result.version,
                "model_file": str(result.model_file),
                "config": str(result.config_path),
                "config_written": result.config_written,
                "extra_files": list(result.extra_files),
                "effective_config": config_to_dict(result.config),
            }
        )
        return
    console = make_console(stderr=False)
    console.print(f"added [bold]{result.model}[/] version {result.version}: {escape(str(result.model_file))}")
    if result.extra_files:
        console.print(f"with {escape(', '.join(result.extra_files))} beside it")
    if result.config_written:
        console.print(f"wrote {escape(str(result.config_path))}:")
        console.print(escape(config_to_text(result.config)), highlight=False)
    else:
        console.print(f"kept {escape(str(result.config_path))} (the new file fits it)")


@repo_app.command("list")
def list_command(
    repositories: list[str] = typer.Argument(None, help="Repository folders or s3:// paths."),
    model_namespacing: bool = typer.Option(
        False, "--model-namespacing", help="Each repository a namespace, as trt serve --model-namespacing."
    ),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """List the models in a repository: versions, backend, tensors, batching, instances. Configs are
    checked; the model files themselves are opened by trt repo validate."""
    locations = [_location(r) for r in repositories or [DEFAULT_REPOSITORY]]
    try:
        summaries = list_models(locations, model_namespacing)
    except ServerError as exc:
        raise _fail(exc) from None
    if json_output:
        _print_json([summary.as_dict() for summary in summaries])
        return
    table = Table(title=f"Models in {', '.join(map(str, locations))}", title_justify="left")
    columns = ["Model", "Versions", "Backend", "Inputs", "Outputs", "Batching", "Instances"]
    folders = model_namespacing and len(locations) > 1  # a name may repeat: say where each is
    for column in ["Model", "Folder", *columns[1:]] if folders else columns:
        table.add_column(column, style="bold" if column == "Model" else None)
    for summary in summaries:
        versions = ",".join(map(str, summary.versions)) or "-"
        if summary.served_versions and summary.served_versions != summary.versions:
            versions += f" (serves {','.join(map(str, summary.served_versions))})"
        outputs = "\n".join(summary.outputs)
        if summary.error:
            outputs = (outputs + "\n" if outputs else "") + f"[red]won't load: {escape(summary.error)}[/]"
        table.add_row(
            summary.name, *([summary.path] if folders else []), versions, summary.backend or "?",
            "\n".join(summary.inputs), outputs, summary.batching, summary.instances,
        )  # fmt: skip
    make_console(stderr=False).print(table)


@repo_app.command("show")
def show_command(
    model: str = typer.Argument(..., help="Model name."),
    repository: str = _REPOSITORY_OPTION,
    json_output: bool = typer.Option(False, "--json", help="Triton's /config JSON instead of config.pbtxt."),
) -> None:
    """Print a model's effective config (after auto-complete), as the server would run it."""
    try:
        config = show_model([_location(repository)], model)
    except ServerError as exc:
        raise _fail(exc) from None
    if json_output:
        _print_json(config_to_dict(config))
    else:
        sys.stdout.write(config_to_text(config))


@repo_app.command("remove")
def remove_command(
    model: str = typer.Argument(..., help="Model name."),
    repository: str = _REPOSITORY_OPTION,
    version: int = typer.Option(None, "--version", "-v", help="Remove only this version."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Delete a model (or one version of it) from a repository."""
    what = f"version {version} of '{model}'" if version is not None else f"model '{model}'"
    if not yes:
        if not sys.stdin.isatty():
            raise _fail(f"removing {what} needs confirmation: pass --yes")
        typer.confirm(f"Delete {what} from {repository}?", abort=True)
    try:
        removal = remove_model(Path(repository), model, version)
    except ServerError as exc:
        raise _fail(exc) from None
    if json_output:
        _print_json({"removed": str(removal.removed), "no_version_left": removal.model_left_without_versions})
        return
    console = make_console(stderr=False)
    console.print(f"removed {escape(str(removal.removed))}")
    if removal.model_left_without_versions:
        console.print(f"[yellow]'{model}' has no version left and will not load[/]")


@repo_app.command("validate")
def validate_command(
    repositories: list[str] = typer.Argument(None, help="Repository folders or s3:// paths."),
    model: str = typer.Option(None, "--model", "-m", help="Check only this model."),
    load: bool = typer.Option(False, "--load", help="Also load each model and run one inference."),
    warnings_as_errors: bool = typer.Option(False, "--warnings-as-errors", help="Fail on warnings too."),
    allow_missing_backends: bool = typer.Option(
        False,
        "--allow-missing-backends",
        help="A backend not installed here (TensorRT on a CPU machine) is a note, not an error; the rest "
        "of its models is still checked.",
    ),
    model_config_name: str = typer.Option(
        "", "--model-config-name", help="Check configs/NAME.pbtxt where a model has it (as trt serve would)."
    ),
    model_namespacing: bool = typer.Option(
        False, "--model-namespacing", help="Each repository a namespace, as trt serve --model-namespacing."
    ),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Check every model against Triton's rules and its own files; name the file and line of each fault."""
    locations = [_location(r) for r in repositories or [DEFAULT_REPOSITORY]]
    try:
        config_name = parse_model_config_name(model_config_name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    # Loading models logs through the server's loggers; the report says the same, once.
    logging.getLogger("trt").setLevel(logging.CRITICAL)
    err = make_console(stderr=True)
    with Progress(
        TextColumn("[bold]validating[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=json_output or not err.is_terminal,
    ) as progress:
        task = progress.add_task("", total=None)

        def on_model(name: str) -> None:
            progress.update(task, description=name, advance=1)

        report = validate_repository(
            locations, model, load, on_model=on_model, model_config_name=config_name,
            model_namespacing=model_namespacing, allow_missing_backends=allow_missing_backends,
        )  # fmt: skip
    failed = report.errors > 0 or (warnings_as_errors and report.warnings > 0)
    if json_output:
        _print_json({**report.as_dict(), "ok": not failed})
    else:
        _print_report(make_console(stderr=False), report, load)
    if failed:
        raise typer.Exit(EXIT_FINDINGS)


def _print_report(console: Console, report: ValidationReport, load: bool) -> None:
    for finding in report.findings:
        console.print(f"[bold red]error[/] {escape(finding.location)}: {escape(finding.message)}")
    for model in report.models:
        mark = "[green]ok[/]" if model.ok else "[bold red]fail[/]"
        details = ", ".join(
            part
            for part in (
                model.backend,
                f"version {','.join(map(str, model.versions))}" if model.versions else "",
                {True: "loaded", False: "did not load", None: ""}[model.loaded] if load else "",
            )
            if part
        )
        console.print(f"{mark} [bold]{escape(model.name)}[/]" + (f" [dim]({details})[/]" if details else ""))
        for finding in model.findings:
            color = {Severity.ERROR: "red", Severity.WARNING: "yellow"}.get(finding.severity, "cyan")
            console.print(
                f"    [{color}]{finding.severity}[/] {escape(finding.location)}: {escape(finding.message)}"
            )
    passed = sum(model.ok for model in report.models)
    console.print(
        f"{len(report.models)} model(s): {passed} ok, {len(report.models) - passed} failing; "
        f"{report.errors} error(s), {report.warnings} warning(s)"
        + (f", {report.notes} note(s)" if report.notes else "")
    )
