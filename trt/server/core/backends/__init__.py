"""The backend interface every backend implements, and the registry that finds a model's backend.

Backends (``trt.server.backends``, or plug-ins from other packages) depend on this; the core never
imports a backend module by name.
"""
