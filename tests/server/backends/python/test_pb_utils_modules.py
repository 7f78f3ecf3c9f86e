"""pb_utils is made in several modules beside it, in the folder that comes first on a model process's
sys.path: a model still finds every name under ``triton_python_backend_utils``, and its own helper
modules are never shadowed by ours."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from trt.server.backends.python.instance import PythonModelInstance
from trt.server.backends.python.process import STUB
from trt.server.core.backends.base import BackendRequest

# Every name pb_utils offered while it was one module (Triton's surface, and json, struct and np,
# which Triton's module has too).
PB_UTILS_NAMES = [
    "InferenceRequest", "InferenceResponse", "InferenceResponseSender", "InferenceTrace", "Logger",
    "Metric", "MetricFamily", "ModelConfig", "PreferredMemory", "ResponseIterator",
    "TRITONSERVER_MEMORY_CPU", "TRITONSERVER_MEMORY_GPU", "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START", "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE", "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY", "Tensor", "TritonError", "TritonModelException", "deserialize_bytes_tensor",
    "get_input_config_by_name", "get_input_tensor_by_name", "get_output_config_by_name",
    "get_output_tensor_by_name", "is_model_ready", "json", "load_model", "np", "numpy_to_triton_string",
    "numpy_to_triton_type", "serialize_byte_tensor", "struct", "triton_string_to_numpy",
    "triton_to_numpy_type", "unload_model", "using_decoupled_model_transaction_policy",
]  # fmt: skip

LIST_NAMES = """
import json
import triton_python_backend_utils as pb_utils

public = [n for n in dir(pb_utils) if not n.startswith("_") and n != "annotations"]
print(json.dumps({"public": sorted(public), "all": sorted(pb_utils.__all__)}))
"""


def test_pb_utils_offers_every_name_it_offered_as_one_module() -> None:
    env = {**os.environ, "PYTHONPATH": str(STUB.parent)}  # as the model process has it
    listed = subprocess.run(
        [sys.executable, "-c", LIST_NAMES], env=env, capture_output=True, text=True, check=True
    )
    names = json.loads(listed.stdout)
    assert names["public"] == sorted(PB_UTILS_NAMES)
    assert names["all"] == sorted(PB_UTILS_NAMES)


def test_the_model_process_modules_carry_names_a_model_folder_is_unlikely_to_hold() -> None:
    entry_points = {"_ipc.py", "triton_python_backend_utils.py", "trt_python_stub.py"}
    modules = {path.name for path in STUB.parent.glob("*.py")}
    assert entry_points <= modules
    assert {name for name in modules - entry_points if not name.startswith("trt_pb_")} == set()


# Its folder holds helpers with the plain names of pb_utils's parts: the model imports its own.
HELPERS = ("tensors", "errors", "metrics", "logger", "config", "runtime", "model_control", "bls")
WITH_HELPERS = """
import numpy as np
import triton_python_backend_utils as pb_utils

import bls, config, errors, logger, metrics, model_control, runtime, tensors

HELPERS = [tensors, errors, metrics, logger, config, runtime, model_control, bls]


class TritonPythonModel:
    def execute(self, requests):
        found = np.array([helper.VALUE for helper in HELPERS], dtype=np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("FOUND", found)]) for _ in requests]
"""


def test_a_model_imports_its_own_helpers_named_like_parts_of_pb_utils(tmp_path: Path) -> None:
    version = tmp_path / "1"
    version.mkdir()
    (version / "model.py").write_text(WITH_HELPERS)
    for value, name in enumerate(HELPERS):
        (version / f"{name}.py").write_text(f"VALUE = {value}\n")
    args = {
        "model_config": json.dumps({"name": "helpers"}),
        "model_instance_kind": "CPU",
        "model_instance_name": "helpers_0",
        "model_instance_device_id": "0",
        "model_repository": str(tmp_path),
        "model_version": "1",
        "model_name": "helpers",
    }
    instance = PythonModelInstance(sys.executable, version / "model.py", args, None)

    async def scenario() -> np.ndarray:
        try:
            [answer] = await instance.execute_requests([BackendRequest("", {}, ("FOUND",), {})])
            assert answer.error is None, answer.error
            return answer.outputs["FOUND"]
        finally:
            await instance.aclose()

    assert list(asyncio.run(scenario())) == list(range(len(HELPERS)))
