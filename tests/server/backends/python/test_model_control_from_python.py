"""``pb_utils.load_model``, ``unload_model`` and ``is_model_ready`` from a Python model, as in Triton."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.support import ServerProcess, write_simple

# Loads `simple` from initialize() (the documented pattern), then acts on request.
CONTROLLER = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.ready_before = pb_utils.is_model_ready("simple")
        pb_utils.load_model(model_name="simple")
        self.ready_after = pb_utils.is_model_ready(model_name="simple", model_version="1")

    def execute(self, requests):
        responses = []
        for request in requests:
            action = pb_utils.get_input_tensor_by_name(request, "ACTION").as_numpy()[0].decode()
            error = ""
            try:
                if action == "unload":
                    pb_utils.unload_model("simple")
                elif action == "load":
                    pb_utils.load_model("simple")
                elif action == "load_with_config":
                    pb_utils.load_model("simple", config=json.dumps({"max_batch_size": 4}))
                elif action == "bad_config":
                    pb_utils.load_model("simple", config="{not json")
                elif action == "files_without_config":
                    pb_utils.load_model("simple", files={"file:1/model.onnx": b"onnx"})
                elif action == "load_self":
                    pb_utils.load_model("controller")
                elif action == "unknown":
                    pb_utils.load_model("no_such_model")
            except pb_utils.TritonModelException as exc:
                error = str(exc)
            flags = [self.ready_before, self.ready_after, pb_utils.is_model_ready("simple")]
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("READY", np.array(flags, bool)),
                pb_utils.Tensor("ERROR", np.array([error.encode()], np.object_)),
            ]))
        return responses
"""

CONTROLLER_CONFIG = """
backend: "python"
input [ { name: "ACTION" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "READY" data_type: TYPE_BOOL dims: [ 3 ] },
  { name: "ERROR" data_type: TYPE_STRING dims: [ 1 ] }
]
"""


def _act(client: httpclient.InferenceServerClient, action: str) -> tuple[list[bool], str]:
    tensor = httpclient.InferInput("ACTION", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([action.encode()], dtype=np.object_))
    result = client.infer("controller", [tensor])
    return [bool(x) for x in result.as_numpy("READY")], result.as_numpy("ERROR")[0].decode()


def test_a_python_model_loads_and_unloads_models_of_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    (repo / "controller" / "1").mkdir(parents=True)
    (repo / "controller" / "1" / "model.py").write_text(CONTROLLER)
    (repo / "controller" / "config.pbtxt").write_text(CONTROLLER_CONFIG)
    server = ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=controller"])
    server.start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        # initialize() found `simple` unloaded and loaded it before the server started serving.
        assert client.is_model_ready("simple")
        (before, after, now), error = _act(client, "ready")
        assert (before, after, now, error) == (False, True, True, "")

        (_, _, now), error = _act(client, "unload")
        assert (now, error) == (False, "")  # not ready the moment the call returns
        assert not client.is_model_ready("simple")

        (_, _, now), error = _act(client, "load_with_config")
        assert (now, error) == (True, "")
        assert client.get_model_config("simple")["max_batch_size"] == 4

        for action, message in (
            ("bad_config", "failed to load 'simple'"),
            ("files_without_config", "need a 'config'"),
            ("load_self", "cannot load itself"),
            ("unknown", "no_such_model"),
        ):
            (_, _, now), error = _act(client, action)
            assert message in error, (action, error)
            assert now, action  # a refused load leaves the loaded model serving
        assert client.get_model_config("simple")["max_batch_size"] == 4

        assert _act(client, "load") == ([False, True, True], "")
        assert client.get_model_config("simple")["max_batch_size"] == 8  # config.pbtxt again
        index = {row["name"]: row for row in client.get_model_repository_index()}
        assert index["simple"]["state"] == "READY", json.dumps(index)
    finally:
        server.stop()
