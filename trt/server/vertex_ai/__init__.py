"""The Vertex AI front end (``trt serve --allow-vertex-ai=true``, the default under
``AIP_MODE=PREDICTION``): a transport beside HTTP and gRPC."""

from trt.server.vertex_ai.app import VertexAiApp
from trt.server.vertex_ai.options import VertexAiOptions, VertexAiSetupError

__all__ = ["VertexAiApp", "VertexAiOptions", "VertexAiSetupError"]
