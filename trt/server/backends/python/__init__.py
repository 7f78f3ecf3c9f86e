"""Python backend: Triton's ``TritonPythonModel`` in ``model.py``, one process per instance."""

from trt.server.backends.python.backend import PythonBackend

__all__ = ["PythonBackend"]
