"""The Vertex AI front end (``trt serve --allow-vertex-ai=true``, the default under
``AIP_MODE=PREDICTION``): a transport beside HTTP and gRPC."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trt.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from trt.server.vertex_ai.app import VertexAiApp
    from trt.server.vertex_ai.options import VertexAiOptions, VertexAiSetupError

__all__ = [
    "VertexAiApp",
    "VertexAiOptions",
    "VertexAiSetupError",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "VertexAiApp": "trt.server.vertex_ai.app",
        "VertexAiOptions": "trt.server.vertex_ai.options",
        "VertexAiSetupError": "trt.server.vertex_ai.options",
    },
)
