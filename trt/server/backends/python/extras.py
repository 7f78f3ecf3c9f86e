"""Which of trt's extras installs a module that a model.py failed to import."""

from __future__ import annotations

import re

from trt import DISTRIBUTION
from trt.server.core.errors import BackendUnavailable

# Modules a model.py may import that one of trt's extras installs. A model whose import or
# initialize() fails for want of one is BackendUnavailable, naming the extra, so that start-up can
# pass over it as it passes over a backend whose library is missing.
MODULE_EXTRAS = {
    "torch": "torch",
    "tokenizers": "genai",
    "transformers": "genai",
    "safetensors": "genai",
    "jinja2": "genai",
    "tensorrt": "tensorrt",
    "cuda": "tensorrt",
    "pynvml": "gpu",
    "s3fs": "s3",
}
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def missing_extra(failure: str) -> BackendUnavailable | None:
    """The error to report when a model process failed on a module that one of trt's extras installs
    (``failure`` is its one-line reason, ``ModuleNotFoundError: No module named 'x'`` within)."""
    match = _MISSING_MODULE.search(failure)
    if match is None:
        return None
    module = match.group(1).split(".")[0]
    extra = MODULE_EXTRAS.get(module)
    if extra is None:
        return None
    hint = f"pip install '{DISTRIBUTION}[{extra}]'"
    return BackendUnavailable(f"model.py needs {module}, which is not installed; install it with: {hint}")
