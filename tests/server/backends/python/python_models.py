"""model.py sources used by the Python backend tests, written the way Triton users write them."""

from __future__ import annotations

ADD_SUB = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0, out_1 = (in_0.as_numpy() + in_1.as_numpy(), in_0.as_numpy() - in_1.as_numpy())
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0.astype(self.output0_dtype))
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1.astype(self.output1_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_tensor_0, out_tensor_1]))
        return responses

    def finalize(self):
        print("Cleaning up...")
"""

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""

STRINGS = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]
        pb_utils.Logger.log_info(f"{self.name} ready on {args['model_instance_kind']}")

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            if b"raise" in list(text.reshape(-1)):
                raise pb_utils.TritonModelException("asked to raise")
            upper = np.array([item.upper() for item in text.reshape(-1)], dtype=np.object_).reshape(text.shape)
            context = {
                "parameters": json.loads(request.parameters()),
                "correlation_id": request.correlation_id(),
                "request_id": request.request_id(),
                "requested": request.requested_output_names(),
            }
            info = np.array([json.dumps(context).encode()], dtype=np.object_)
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("UPPER", upper), pb_utils.Tensor("INFO", info)])
            )
        return responses
"""

STRINGS_CONFIG = """
backend: "python"
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "UPPER" data_type: TYPE_STRING dims: [ -1 ] }, { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# Sleeps so that concurrent requests queue up and reach execute() together; fails the requests
# whose VALUE is negative and answers the others; reports how many requests shared the execution.
BATCH_ERRORS = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.3)
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            if (value < 0).any():
                error = pb_utils.TritonError(f"negative value {int(value.min())}", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            shared = np.full(value.shape, len(requests), dtype=np.int32)
            pid = np.full(value.shape, os.getpid(), dtype=np.int64)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("DOUBLE", value * 2), pb_utils.Tensor("SHARED", shared), pb_utils.Tensor("PID", pid)]
                )
            )
        return responses
"""

BATCH_ERRORS_CONFIG = """
backend: "python"
max_batch_size: 8
dynamic_batching { }
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "DOUBLE" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "SHARED" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }
]
"""

# Calls the ONNX model `simple` through the server (BLS), synchronously or with asyncio.
BLS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            target = pb_utils.get_input_tensor_by_name(request, "TARGET").as_numpy().reshape(-1)[0].decode()
            call = pb_utils.InferenceRequest(
                model_name=target,
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", b)],
                trace=request.trace(),  # as Triton's docs pass it on; trt does not trace BLS calls
            )
            sync_response = call.exec()
            async_response = await call.async_exec()
            if sync_response.has_error():
                responses.append(pb_utils.InferenceResponse(error=sync_response.error()))
                continue
            total = pb_utils.get_output_tensor_by_name(sync_response, "OUTPUT0").as_numpy()
            again = pb_utils.get_output_tensor_by_name(async_response, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total + again)]))
        return responses
"""

BLS_CONFIG = """
backend: "python"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "B" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "TARGET" data_type: TYPE_STRING dims: [ 1 ] }
]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""

# No inputs or outputs in its config: auto_complete_config supplies them.
AUTO_COMPLETE = """
import sys

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
        auto_complete_model_config.add_output({"name": "WHO", "data_type": "TYPE_STRING", "dims": [1]})
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        import numpy as np

        responses = []
        for request in requests:
            batch = pb_utils.get_input_tensor_by_name(request, "X").as_numpy().shape[0]
            who = np.array([[sys.executable.encode()]] * batch, dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("WHO", who)]))
        return responses
"""

AUTO_COMPLETE_CONFIG = 'backend: "python"\n'

RAISES_IN_INITIALIZE = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("cannot find my weights")

    def execute(self, requests):
        return []
"""

# Answers every input back as OUT_<name>, whatever its type or size.
ECHO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT_" + t.name(), t.as_numpy()) for t in request.inputs()])
            for request in requests
        ]
"""

# Decoupled: COUNT responses sent from inside execute() as fast as it can, then the final flag.
MANY_RESPONSES = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            for index in range(count):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("INDEX", np.array([index], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

# Many BLS calls at once with asyncio: answers arrive for several waiting threads at a time.
CONCURRENT_BLS = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            calls = [
                pb_utils.InferenceRequest(
                    model_name="echo", requested_output_names=["Y"],
                    inputs=[pb_utils.Tensor("X", np.full(64, index, dtype=np.int64))],
                ).async_exec()
                for index in range(count)
            ]
            answers = await asyncio.gather(*calls)
            firsts = [int(pb_utils.get_output_tensor_by_name(a, "Y").as_numpy()[0]) for a in answers]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("FIRSTS", np.array(firsts, dtype=np.int64))]))
        return responses
"""

# One request at a time. A request whose id starts with "wait" waits up to 5 s for its client to give
# up, one starting with "nap" sleeps 0.5 s; each logs "<model name>: executing <id>" and, for "wait",
# "<model name>: <id> cancelled" or "... not cancelled".
WAITER = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            rid = request.request_id()
            pb_utils.Logger.log_info(f"{self.name}: executing {rid}")
            if rid.startswith("wait"):
                began = time.monotonic()
                while time.monotonic() - began < 5 and not request.is_cancelled():
                    time.sleep(0.01)
                outcome = "cancelled" if request.is_cancelled() else "not cancelled"
                pb_utils.Logger.log_info(f"{self.name}: {rid} {outcome}")
            elif rid.startswith("nap"):
                time.sleep(0.5)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1], np.int32))]))
        return responses
"""

WAITER_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# N -> 2N, and an error response ("negative input") for a negative N.
DOUBLES = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "N").as_numpy()
            if n[0] < 0:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative input")))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", n * 2)]))
        return responses
"""
ONE_NUMBER = """
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# Answers in its own types, not the config's: halves as FP64 into an INT32 output, a count as INT32
# into an FP32 one.
OWN_TYPES = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            halves = pb_utils.Tensor("HALVES", x / 2)
            count = pb_utils.Tensor("COUNT", np.array([x.size], np.int32))
            responses.append(pb_utils.InferenceResponse([halves, count]))
        return responses
"""
OWN_TYPES_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [
  { name: "HALVES" data_type: TYPE_INT32 dims: [ 2 ] },
  { name: "COUNT" data_type: TYPE_FP32 dims: [ 1 ] }
]
"""
