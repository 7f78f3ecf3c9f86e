"""ONNX models on ONNX Runtime's CUDA execution provider (onnxruntime-gpu), called with tritonclient.

Skipped where onnxruntime offers no CUDAExecutionProvider (the CPU package, as on CI).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
if "CUDAExecutionProvider" not in ort.get_available_providers():
    pytest.skip("needs onnxruntime-gpu's CUDAExecutionProvider", allow_module_level=True)

import tritonclient.grpc as grpcclient  # noqa: E402

from tests.support import SIMPLE_CONFIG, ServerProcess, int_inputs, write_simple  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("ort_gpu_repo")
    write_simple(repo, "on_gpu", SIMPLE_CONFIG.replace("KIND_CPU", "KIND_GPU"))
    proc = ServerProcess([repo])
    proc.start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def test_a_kind_gpu_instance_runs_on_the_cuda_provider_and_answers(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    first, second = int_inputs(batch=3)
    inputs = [grpcclient.InferInput(name, [3, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(first)
    inputs[1].set_data_from_numpy(second)
    result = client.infer("on_gpu", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
    assert "on CUDAExecutionProvider" in server.log()
