"""The models ``chaos_drill.py`` serves: each one a way a model behaves that a server must survive.

- ``slow_add``: INPUT0 + 1 after DELAY_MS (Python, two instances): requests a client gives up on;
- ``burst``: decoupled, COUNT answers of SIZE bytes GAP_US apart, each stamped with its index and
  filled with ``index % 251``: streams, pauses, cancellations, bytes checked at the client;
- ``pipeline``: an ensemble of ``burst`` and ``copy`` (two instances): the decoupled-step ensemble;
- ``crashy``: MODE 1 exits its process, 2 raises, 0 answers: a model that dies under load;
- ``seq``: a running total per sequence (sequence batcher, direct, 2 s idle): abandoned sequences;
- ``simple``: the example ONNX model with a dynamic batcher (shared memory, perf_analyzer);
- ``tiny_llm``: the example generative model, for the OpenAI routes (when its extras are installed).
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SLOW_ADD_CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "DELAY_MS" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""
SLOW_ADD_PY = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            d = int(pb_utils.get_input_tensor_by_name(r, "DELAY_MS").as_numpy()[0])
            if d:
                time.sleep(d / 1000)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x + 1)]))
        return out
"""
BURST_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "SIZE" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "GAP_US" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "OUT" data_type: TYPE_UINT8 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""
BURST_PY = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(r, "COUNT").as_numpy()[0])
            size = max(4, int(pb_utils.get_input_tensor_by_name(r, "SIZE").as_numpy()[0]))
            gap = int(pb_utils.get_input_tensor_by_name(r, "GAP_US").as_numpy()[0])
            for i in range(count):
                if sender.is_cancelled():
                    break
                body = np.full(size, i % 251, dtype=np.uint8)
                body[:4] = np.frombuffer(np.int32(i).tobytes(), dtype=np.uint8)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", body)]))
                if gap:
                    time.sleep(gap / 1e6)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
CRASHY_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
CRASHY_PY = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            mode = int(pb_utils.get_input_tensor_by_name(r, "MODE").as_numpy()[0])
            if mode == 1:
                os._exit(3)
            if mode == 2:
                raise RuntimeError("asked to fail")
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([mode], np.int32))]))
        return out
"""
SIMPLE_CONFIG = """
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""


SEQ_CONFIG = """
backend: "python"
max_batch_size: 4
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "TOTAL" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
sequence_batching {
  max_sequence_idle_microseconds: 2000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
"""
SEQ_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        out = []
        for r in requests:
            value = pb_utils.get_input_tensor_by_name(r, "VALUE").as_numpy()
            start = pb_utils.get_input_tensor_by_name(r, "START").as_numpy()
            end = pb_utils.get_input_tensor_by_name(r, "END").as_numpy()
            corrid = pb_utils.get_input_tensor_by_name(r, "CORRID").as_numpy()
            totals = []
            for row in range(value.shape[0]):
                key = int(corrid[row].flat[0])
                if int(start[row].flat[0]):
                    self.totals[key] = 0
                self.totals[key] = self.totals.get(key, 0) + int(value[row].flat[0])
                totals.append([self.totals[key]])
                if int(end[row].flat[0]):
                    del self.totals[key]
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("TOTAL", np.array(totals, np.int32))]))
        return out
"""
COPY_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_UINT8 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""
COPY_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data.copy())]))
        return responses
"""
PIPELINE_CONFIG = """
platform: "ensemble"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "SIZE" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "GAP_US" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "OUT" data_type: TYPE_UINT8 dims: [ -1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "burst" model_version: -1
      input_map { key: "COUNT" value: "COUNT" } input_map { key: "SIZE" value: "SIZE" }
      input_map { key: "GAP_US" value: "GAP_US" } output_map { key: "OUT" value: "raw" } },
    { model_name: "copy" model_version: -1
      input_map { key: "IN" value: "raw" } output_map { key: "OUT" value: "OUT" } }
  ]
}
"""


def build_repository(folder: Path, with_llm: bool) -> list[str]:
    """Write the repository; the models in it."""
    python_models = (
        ("slow_add", SLOW_ADD_CONFIG, SLOW_ADD_PY),
        ("burst", BURST_CONFIG, BURST_PY),
        ("crashy", CRASHY_CONFIG, CRASHY_PY),
        ("seq", SEQ_CONFIG, SEQ_PY),
        ("copy", COPY_CONFIG, COPY_PY),
    )
    for name, config, source in python_models:
        (folder / name / "1").mkdir(parents=True)
        (folder / name / "config.pbtxt").write_text(config)
        (folder / name / "1" / "model.py").write_text(source)
    (folder / "pipeline" / "1").mkdir(parents=True)
    (folder / "pipeline" / "config.pbtxt").write_text(PIPELINE_CONFIG)
    (folder / "simple" / "1").mkdir(parents=True)
    (folder / "simple" / "config.pbtxt").write_text(SIMPLE_CONFIG)
    shutil.copy(ROOT / "model_repository/simple/1/model.onnx", folder / "simple/1/model.onnx")
    names = [name for name, _, _ in python_models] + ["pipeline", "simple"]
    if with_llm:
        shutil.copytree(ROOT / "model_repository/tiny_llm", folder / "tiny_llm")
        names.append("tiny_llm")
    return names
