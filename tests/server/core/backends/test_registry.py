"""Optional backends fail alone, and say which extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ROOT


@pytest.mark.parametrize(
    ("module", "backend", "extra"), [("torch", "pytorch", "torch"), ("tensorrt", "tensorrt", "tensorrt")]
)
def test_a_missing_package_names_the_extra_to_install(module: str, backend: str, extra: str) -> None:
    probe = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from trt.server.core.backends.registry import get_backend, _BY_NAME\n"
        f"try:\n    get_backend(_BY_NAME[{backend!r}])\n"
        "except Exception as exc:\n    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert f"pip install 'trt-serve[{extra}]'" in result.stdout
