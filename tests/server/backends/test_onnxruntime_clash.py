"""onnxruntime and onnxruntime-gpu (or another build) installed side by side, as installing trt beside
onnxruntime-gpu does: each provides the module ``onnxruntime``, and the one installed last overwrote the
other's files. trt names the clash and the fix when ONNX Runtime is first used, and in the error of a
KIND_GPU model that then finds no CUDA provider, rather than leaving a GPU user with a bare "no
CUDAExecutionProvider". The second distribution is its installed record alone (``*.dist-info`` on
``PYTHONPATH``), which is what pip's bookkeeping reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import tritonclient.http as httpclient

from tests.support import SIMPLE_CONFIG, ServerProcess, int_inputs, write_simple

if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
    pytest.skip("the installed onnxruntime has a CUDA provider", allow_module_level=True)

FIX = "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu"


def _record_of_onnxruntime_gpu(folder: Path) -> Path:
    record = folder / "onnxruntime_gpu-1.31.1.dist-info"
    record.mkdir(parents=True)
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxruntime-gpu\nVersion: 1.31.1\n")
    return folder


def test_both_builds_installed_are_named_with_the_fix_and_cpu_models_still_serve(tmp_path: Path) -> None:
    write_simple(tmp_path / "repo")
    write_simple(tmp_path / "repo", "on_gpu", SIMPLE_CONFIG.replace("KIND_CPU", "KIND_GPU"))
    server = ServerProcess(
        [tmp_path / "repo"],
        ["--exit-on-error=false"],
        env={"PYTHONPATH": str(_record_of_onnxruntime_gpu(tmp_path / "site"))},
    ).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        first, second = int_inputs()
        inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(first)
        inputs[1].set_data_from_numpy(second)
        result = client.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
        assert not client.is_model_ready("on_gpu")
        index = {row["name"]: row for row in client.get_model_repository_index()}
        assert FIX in index["on_gpu"]["reason"]
        log = server.log()
        assert log.count("are installed side by side") >= 1
        assert FIX in log
    finally:
        server.stop()
