"""Backends: ONNX Runtime here; PyTorch, TensorRT and Python plug into the same interface."""
