"""The SageMaker front end (``trt serve --allow-sagemaker=true``): a transport beside HTTP and gRPC."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trt.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from trt.server.sagemaker.app import SageMakerApp
    from trt.server.sagemaker.options import SageMakerOptions

__all__ = [
    "SageMakerApp",
    "SageMakerOptions",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "SageMakerApp": "trt.server.sagemaker.app",
        "SageMakerOptions": "trt.server.sagemaker.options",
    },
)
