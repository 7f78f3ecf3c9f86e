"""What ``trt serve`` announces once started: the services it listens on (checked for collisions
before anything binds) and the summary of models and endpoints, as a table or one JSON line."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trt.cli.hosted_flags import ListeningService
from trt.server.compiled import build_description, compiled_modules

if TYPE_CHECKING:  # the server's modules are imported when it starts, not for `trt serve --help`
    from trt.server.core.server import InferenceServer
    from trt.server.runtime import ServeOptions


def listening_services(options: ServeOptions) -> list[ListeningService]:
    services = [
        ListeningService(name, endpoint.address, endpoint.port)
        for name, endpoint in (("HTTP", options.http), ("GRPC", options.grpc), ("metrics", options.metrics))
        if endpoint.enabled
    ]
    if options.sagemaker is not None:
        sagemaker = options.sagemaker
        services.append(
            ListeningService("SageMaker", sagemaker.address, sagemaker.port, sagemaker.safe_port_range)
        )
    if options.vertex_ai is not None:
        services.append(ListeningService("Vertex AI", options.vertex_ai.address, options.vertex_ai.port))
    if options.openai.enabled:
        services.append(ListeningService("OpenAI", options.openai.address, options.openai.port))
    return services


def print_summary(server: InferenceServer, options: ServeOptions, as_json: bool) -> None:
    rows = server.repository_index()
    endpoints = {
        name: f"{endpoint.address}:{endpoint.port}"
        for name, endpoint in (
            ("http", options.http),
            ("grpc", options.grpc),
            ("metrics", options.metrics),
            ("openai", options.openai),
        )
        if endpoint.enabled
    }
    for name, hosted in (("sagemaker", options.sagemaker), ("vertex_ai", options.vertex_ai)):
        if hosted is not None:
            endpoints[name] = f"{hosted.address}:{hosted.port}"
    if as_json:
        summary = {
            "endpoints": endpoints,
            "compiled_modules": list(compiled_modules()),
            "models": [
                {"name": r.name, "version": r.version, "state": r.state or "UNLOADED", "reason": r.reason}
                | ({"repository": r.namespace} if r.namespace else {})
                for r in rows
            ],
        }
        print(orjson.dumps(summary).decode(), flush=True)
        return
    console = Console(stderr=True)
    table = Table(title="Models", title_justify="left")
    table.add_column("Model", style="bold")
    namespaced = any(row.namespace for row in rows)  # --model-namespacing: a name may repeat
    if namespaced:
        table.add_column("Repository")
    table.add_column("Version")
    table.add_column("Status")
    for row in rows:
        if row.state == "READY":
            status = "[green]READY[/green]"
        elif row.state:
            status = f"[red]{row.state}[/red]: {escape(row.reason)}"
        else:
            status = "[dim]not loaded[/dim]"
        table.add_row(row.name, *([row.namespace] if namespaced else []), row.version or "-", status)
    console.print(table)
    for name, where in endpoints.items():
        console.print(f"[bold]{name:8}[/bold] {where}")
    console.print(f"[bold]{'build':8}[/bold] {build_description(compiled_modules())}")
