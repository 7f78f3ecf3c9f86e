"""``trt serve``'s SageMaker and Vertex AI flags, resolved as tritonserver resolves them.

Vertex AI's environment changes defaults: ``AIP_MODE=PREDICTION`` turns Vertex AI on and HTTP and gRPC
off unless a flag says otherwise, ``AIP_HTTP_PORT`` is Vertex AI's port and ``AIP_STORAGE_URI`` the model
repository when none is given. ``--sagemaker-safe-port-range`` bounds the ports of the other endpoints;
two endpoints on one address and port are refused, with tritonserver's messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import typer

from trt.cli.flags import parse_bool
from trt.server.sagemaker.options import SageMakerOptions, parse_port_range
from trt.server.vertex_ai.options import VertexAiOptions, VertexAiSetupError, vertex_defaults


@dataclass(frozen=True)
class HostedFlags:
    """What the flags and the environment ask for."""

    sagemaker: SageMakerOptions | None
    vertex_ai: VertexAiOptions | None
    http_on_by_default: bool  # False under AIP_MODE=PREDICTION
    grpc_on_by_default: bool
    storage_uri: str  # AIP_STORAGE_URI: the repository when --model-repository is not given


@dataclass(frozen=True)
class ListeningService:
    name: str  # as tritonserver's messages name it
    address: str
    port: int
    allowed_range: tuple[int, int] | None = None  # --sagemaker-safe-port-range, for the others


def resolve_hosted_flags(
    context: typer.Context,
    environ: Mapping[str, str],
    address: str,
    allow_sagemaker: str,
    sagemaker_port: int,
    sagemaker_safe_port_range: str,
    allow_vertex_ai: str,
    vertex_ai_port: int | None,
    vertex_ai_default_model: str,
) -> HostedFlags:
    try:
        vertex_on, vertex_port = vertex_defaults(environ)
    except VertexAiSetupError as exc:
        raise typer.BadParameter(str(exc)) from None
    if allow_vertex_ai:
        vertex_on = parse_bool(allow_vertex_ai, "--allow-vertex-ai")
    sagemaker = None
    if parse_bool(allow_sagemaker, "--allow-sagemaker"):
        safe_range = None
        if sagemaker_safe_port_range:
            try:
                safe_range = parse_port_range(sagemaker_safe_port_range)
            except ValueError as exc:
                raise typer.BadParameter(str(exc)) from None
        sagemaker = SageMakerOptions.from_environment(environ, address, sagemaker_port, safe_range)
    vertex_ai = None
    if vertex_on:
        port = vertex_ai_port if vertex_ai_port is not None else vertex_port
        vertex_ai = VertexAiOptions.from_environment(environ, address, port, vertex_ai_default_model)
    predicting = environ.get("AIP_MODE", "") == "PREDICTION"
    return HostedFlags(
        sagemaker=sagemaker,
        vertex_ai=vertex_ai,
        http_on_by_default=not (predicting and _defaulted(context, "allow_http")),
        grpc_on_by_default=not (predicting and _defaulted(context, "allow_grpc")),
        storage_uri=environ.get("AIP_STORAGE_URI", ""),
    )


def _defaulted(context: typer.Context, parameter: str) -> bool:
    # By name: typer may carry its own copy of click, whose enum is not click's.
    source = context.get_parameter_source(parameter)
    return source is None or source.name == "DEFAULT"


def check_port_collisions(services: list[ListeningService]) -> None:
    """tritonserver's port check: no two services on one address and port, and with a SageMaker safe
    range, every other service on its address inside it."""
    for index, current in enumerate(services):
        others = services if current.allowed_range is not None else services[index + 1 :]
        for other in others:
            if other is current or other.address != current.address:
                continue
            bounds = current.allowed_range
            if bounds is not None and not bounds[0] <= other.port <= bounds[1]:
                raise typer.BadParameter(
                    f"The server cannot listen to {other.name} requests at port {other.port}, "
                    f"allowed port range is [{bounds[0]}, {bounds[1]}]"
                )
            if other.port == current.port:
                raise typer.BadParameter(
                    f"The server cannot listen to {current.name} requests and {other.name} requests at "
                    f"the same address and port {current.address}:{current.port}"
                )
