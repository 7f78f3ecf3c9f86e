"""What the Vertex AI front end is told: its flags (tritonserver's) and the ``AIP_*`` variables Vertex AI
sets in a prediction container."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from trt.server.core.types import RepositoryIndexEntry


class VertexAiSetupError(ValueError):
    """The Vertex AI endpoint cannot start (Triton's message: the server exits)."""


@dataclass(frozen=True, slots=True)
class VertexAiOptions:
    address: str = "0.0.0.0"
    port: int = 8080  # --vertex-ai-port, default AIP_HTTP_PORT
    default_model: str = ""  # --vertex-ai-default-model
    predict_route: str = ""  # AIP_PREDICT_ROUTE, a regular expression as in Triton
    health_route: str = ""  # AIP_HEALTH_ROUTE

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str], address: str, port: int, default_model: str
    ) -> VertexAiOptions:
        return cls(
            address=address,
            port=port,
            default_model=default_model,
            predict_route=environ.get("AIP_PREDICT_ROUTE", ""),
            health_route=environ.get("AIP_HEALTH_ROUTE", ""),
        )

    def routes(self) -> tuple[re.Pattern[str], re.Pattern[str]]:
        """The predict and health routes, checked as Triton checks them when the endpoint starts."""
        if not self.predict_route:
            raise VertexAiSetupError("API_PREDICT_ROUTE is not defined for Vertex AI endpoint")
        if not self.health_route:
            raise VertexAiSetupError("AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint")
        try:
            return re.compile(self.predict_route), re.compile(self.health_route)
        except re.error as exc:
            raise VertexAiSetupError(
                f"AIP_PREDICT_ROUTE / AIP_HEALTH_ROUTE is not a valid pattern: {exc}"
            ) from None


def resolve_default_model(default_model: str, ready: list[RepositoryIndexEntry]) -> str:
    """The model plain predict requests go to: the one named, which must be loaded, or else the only one
    the repository serves."""
    if not default_model:
        if len(ready) != 1:
            raise VertexAiSetupError(
                "Expect the model repository contains only a single model if default model is not specified"
            )
        return ready[0].name
    if not any(row.name == default_model for row in ready):
        raise VertexAiSetupError(f"Expect the default model '{default_model}' is loaded")
    return default_model


def vertex_defaults(environ: Mapping[str, str]) -> tuple[bool, int]:
    """Whether Vertex AI is on by default (``AIP_MODE=PREDICTION``, which also turns HTTP and gRPC off by
    default) and its port by default (``AIP_HTTP_PORT``, else 8080)."""
    port_text = environ.get("AIP_HTTP_PORT", "8080")
    try:
        port = int(port_text)
    except ValueError:
        raise VertexAiSetupError(f"AIP_HTTP_PORT must be a port number, got '{port_text}'") from None
    return environ.get("AIP_MODE", "") == "PREDICTION", port
