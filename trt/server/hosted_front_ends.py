"""The front ends of managed hosting services, started beside HTTP and gRPC when asked for: SageMaker
(``--allow-sagemaker``) and Vertex AI (``--allow-vertex-ai``). Each answers on a port of its own through
an HTTP app of its own, with the HTTP endpoint's size limit and restrictions (as Triton shares them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trt.server.core.server import InferenceServer
from trt.server.http.app import HttpApp
from trt.server.http.messages import Handler
from trt.server.restrictions import Restrictions
from trt.server.sagemaker.app import SageMakerApp
from trt.server.sagemaker.options import SageMakerOptions
from trt.server.vertex_ai.app import VertexAiApp
from trt.server.vertex_ai.options import VertexAiOptions, resolve_default_model


@dataclass(frozen=True)
class HostedFrontEnd:
    name: str  # as Triton's log names the service
    address: str
    port: int
    handler: Handler
    cancellable: Callable[[str], bool]


def hosted_front_ends(
    core: InferenceServer,
    sagemaker: SageMakerOptions | None,
    vertex_ai: VertexAiOptions | None,
    max_input_size: int,
    restrictions: Restrictions,
    metrics: Callable[[], bytes] | None,
) -> list[HostedFrontEnd]:
    """The front ends to start, once the models are loaded (Vertex AI's default model must be among
    them); raises ``VertexAiSetupError`` with Triton's message when Vertex AI cannot start."""
    front_ends = []
    if sagemaker is not None:
        app = SageMakerApp(HttpApp(core, max_input_size, restrictions), sagemaker)
        front_ends.append(
            HostedFrontEnd("Sagemaker HTTPService", sagemaker.address, sagemaker.port, app, app.cancellable)
        )
    if vertex_ai is not None:
        predict, health = vertex_ai.routes()
        default_model = resolve_default_model(vertex_ai.default_model, core.repository_index(ready_only=True))
        vertex = VertexAiApp(
            HttpApp(core, max_input_size, restrictions), default_model, predict, health, metrics
        )
        front_ends.append(
            HostedFrontEnd(
                "Vertex AI HTTPService", vertex_ai.address, vertex_ai.port, vertex, vertex.cancellable
            )
        )
    return front_ends
