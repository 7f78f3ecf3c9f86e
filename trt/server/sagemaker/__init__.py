"""The SageMaker front end (``trt serve --allow-sagemaker=true``): a transport beside HTTP and gRPC."""

from trt.server.sagemaker.app import SageMakerApp
from trt.server.sagemaker.options import SageMakerOptions

__all__ = ["SageMakerApp", "SageMakerOptions"]
