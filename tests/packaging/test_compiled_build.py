"""The optional compiled request path (``TRT_COMPILE=1``, see setup.py) builds, loads and serves.

One build of a copy of this checkout (``scripts/build_compiled.py``: mypyc, about half a minute on two
cores), then ``trt serve`` from that copy, answering tritonclient over HTTP (binary and JSON) and gRPC,
a Python model and an ONNX one, an error in Triton's words and the statistics: each of those crosses
compiled modules. The rest of the suite runs on the pure-Python tree; the whole suite was also run
against a compiled build (see the README).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.server.backends.python.python_models import ADD_SUB, ADD_SUB_CONFIG
from tests.support import ROOT, ServerProcess, write_python_model, write_simple
from trt.server.compiled import COMPILED_MODULES

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("cc") is None, reason="the compiled build needs a C compiler"),
    pytest.mark.skipif(importlib.util.find_spec("mypyc") is None, reason="the compiled build needs mypy"),
]


@pytest.fixture(scope="module")
def compiled_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("compiled") / "trt-compiled"
    built = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_compiled.py"), str(copy)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    return copy


def _add_sub_inputs(module: object) -> tuple[list[object], np.ndarray, np.ndarray]:
    a = np.array([1.5, 2.0, -3.0, 4.25], dtype=np.float32)
    b = np.array([0.5, 1.0, 1.0, 0.25], dtype=np.float32)
    tensors = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        tensor = module.InferInput(name, [4], "FP32")  # type: ignore[attr-defined]
        tensor.set_data_from_numpy(data)
        tensors.append(tensor)
    return tensors, a, b


def test_the_compiled_build_serves_both_protocols(compiled_copy: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "add_sub", ADD_SUB, ADD_SUB_CONFIG)
    write_simple(repo)
    server = ServerProcess(
        [repo], ["--json"], env={"PYTHONPATH": str(compiled_copy)}, cwd=compiled_copy
    ).start(tmp_path)
    try:
        summary = server.json_summary()
        assert summary["compiled_modules"] == list(COMPILED_MODULES)

        http = httpclient.InferenceServerClient(server.http_url)
        for _ in range(3):  # the first head is parsed; the next ones take its remembered plan
            tensors, a, b = _add_sub_inputs(httpclient)
            result = http.infer("add_sub", tensors)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)

        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        tensors, a, b = _add_sub_inputs(grpcclient)
        result = grpc.infer("add_sub", tensors)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)

        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = httpclient.InferInput(name, [1, 16], "INT32")
            tensor.set_data_from_numpy(data, binary_data=False)
            inputs.append(tensor)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)]
        result = http.infer("simple", inputs, outputs=outputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)

        for tensor in inputs:
            tensor.set_shape([2, 8])
        with pytest.raises(InferenceServerException, match=r"Expected \[-1,16\], got \[2,8\]"):
            http.infer("simple", inputs)

        stats = http.get_inference_statistics("add_sub")["model_stats"][0]
        assert stats["inference_stats"]["success"]["count"] == 4
        assert stats["execution_count"] == 4
    finally:
        server.stop()
