"""trt: serve, load-test and tune Triton model repositories.

The command is ``trt``; the distribution on PyPI is ``trt-serve`` (the name ``trt`` there belongs to
an unrelated project). Subpackages: ``trt.server`` (the serving runtime; its core's face is
``trt.server.core``), ``trt.perf`` (load generation), ``trt.analyzer`` (config search), ``trt.cli``
(the command line) and ``trt.protos`` (Triton's wire contract).
"""

__version__ = "0.2.0"

# The pip distribution that provides this package; install hints name it.
DISTRIBUTION = "trt-serve"

__all__ = ["DISTRIBUTION", "__version__"]
