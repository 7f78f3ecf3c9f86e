"""The ``trt`` command line."""
