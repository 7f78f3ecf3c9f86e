"""trt's own backends as the registry sees them before importing any: name, platforms and model files,
and the extra that installs what each needs. pyproject.toml registers each under the ``trt.backends``
entry points, as a plug-in package would; this module imports nothing heavy.

The order of the entry points there is the order file detection tries them in, Triton's: TensorFlow,
TensorRT, ONNX Runtime, OpenVINO, PyTorch, Python.
"""

from __future__ import annotations

from trt import DISTRIBUTION
from trt.server.core.backends.registry import BackendEntry, ModelFormat

TENSORFLOW = BackendEntry(
    "tensorflow",
    "trt.server.backends.tensorflow:TensorFlowBackend",
    (
        ModelFormat("tensorflow_savedmodel", "model.savedmodel"),
        ModelFormat("tensorflow_graphdef", "model.graphdef"),
    ),
    install=f"{DISTRIBUTION}[tensorflow]",
)
TENSORRT = BackendEntry(
    "tensorrt",
    "trt.server.backends.tensorrt:TensorRTBackend",
    (ModelFormat("tensorrt_plan", "model.plan"),),
    install=f"{DISTRIBUTION}[tensorrt]",
    gpu=True,
)
ONNXRUNTIME = BackendEntry(
    "onnxruntime",
    "trt.server.backends.onnxruntime:OnnxRuntimeBackend",
    (ModelFormat("onnxruntime_onnx", "model.onnx"),),
    gpu=True,
)
OPENVINO = BackendEntry(
    "openvino",
    "trt.server.backends.openvino:OpenVinoBackend",
    (ModelFormat("", "model.xml"),),  # Triton names no platform for OpenVINO
    install=f"{DISTRIBUTION}[openvino]",
)
PYTORCH = BackendEntry(
    "pytorch",
    "trt.server.backends.pytorch:PyTorchBackend",
    (ModelFormat("pytorch_libtorch", "model.pt"),),
    install=f"{DISTRIBUTION}[torch]",
    gpu=True,
)
PYTHON = BackendEntry(
    "python",
    "trt.server.backends.python:PythonBackend",
    (ModelFormat("", "model.py"),),
    decoupled=True,
)
