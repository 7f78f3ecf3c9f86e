"""TensorFlow SavedModels and GraphDefs written by TensorFlow in the test, served by trt serve and
checked with tritonclient; sessions shared between instances in-process.

TensorFlow is heavy (about 600 MB, seconds to import): CI installs the tensorflow extra and runs
these; ``pytest -m 'not tensorflow'`` leaves them out where it is not installed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.tensorflow

from tests.server.core.scheduling.test_sequence_batcher import ACCUMULATE  # noqa: E402
from tests.support import ServerProcess  # noqa: E402
from trt.server.core.backends.base import InstanceSpec, ModelFiles  # noqa: E402
from trt.server.core.models.config import read_config_file  # noqa: E402


def _tensorflow() -> Any:
    """TensorFlow, imported by the tests that run (not at collection: the default run deselects them,
    and importing it costs seconds). Missing, it fails the suite that was asked for."""
    import tensorflow

    return tensorflow


def _modules(tf: Any) -> dict[str, Any]:
    """The SavedModels' modules: add/sub, a string model, and one of a fixed shape [2, 4] (no batch)."""

    class AddSub(tf.Module):  # type: ignore[misc,name-defined]
        @tf.function(
            input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None, 4], tf.float32)]
        )
        def serve(self, x: Any, y: Any) -> dict[str, Any]:
            return {"sum": x + y, "diff": x - y}

    class Text(tf.Module):  # type: ignore[misc,name-defined]
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, text: Any) -> dict[str, Any]:
            return {"upper": tf.strings.upper(text), "length": tf.strings.length(text)}

    class Pair(tf.Module):  # type: ignore[misc,name-defined]
        @tf.function(input_signature=[tf.TensorSpec([2, 4], tf.float32)])
        def serve(self, pair: Any) -> dict[str, Any]:
            return {"total": tf.reduce_sum(pair, axis=1)}

    class Accumulate(tf.Module):  # type: ignore[misc,name-defined]
        """OUTPUT = ACC_IN * (1 - START) + INPUT, carried to the next request as ACC_OUT."""

        spec = tf.TensorSpec([None, 1], tf.int32)

        @tf.function(input_signature=[spec, spec, spec])
        def serve(self, INPUT: Any, START: Any, ACC_IN: Any) -> dict[str, Any]:
            total = ACC_IN * (1 - START) + INPUT
            return {"OUTPUT": total, "ACC_OUT": tf.identity(total)}

    return {"addsub": AddSub, "text": Text, "pair": Pair, "accumulate": Accumulate}


def _save(tf: Any, module: Any, folder: Path, signature: str = "serving_default") -> None:
    tf.saved_model.save(module, str(folder / "1" / "model.savedmodel"), signatures={signature: module.serve})


def _graphdef_with_a_variable(tf: Any, path: Path) -> None:
    """OUTPUT = INPUT * scale, where scale is a variable set by the graph's "init" operation: without
    TF_INIT_OPS_FILE running it, the model cannot execute."""
    graph = tf.Graph()
    with graph.as_default():
        values = tf.compat.v1.placeholder(tf.float32, [None, 4], name="INPUT")
        scale = tf.compat.v1.Variable(2.5, name="scale")
        tf.identity(values * scale, name="OUTPUT")
        tf.compat.v1.global_variables_initializer()  # an operation named "init"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(graph.as_graph_def().SerializeToString())


GRAPHDEF = """
platform: "tensorflow_graphdef"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 200000 }
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters { key: "TF_INIT_OPS_FILE" value { string_value: "init_ops.json" } }
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tf = _tensorflow()
    made = _modules(tf)
    repo = tmp_path_factory.mktemp("tensorflow_repo")
    _save(tf, made["addsub"](), repo / "addsub")  # no config: auto-complete from the signature
    _save(tf, made["text"](), repo / "text")
    _save(tf, made["pair"](), repo / "pair")
    _save(tf, made["addsub"](), repo / "other_signature", signature="predict")  # no serving_default
    (repo / "shared").mkdir()
    _save(tf, made["addsub"](), repo / "shared")
    (repo / "shared" / "config.pbtxt").write_text(
        'platform: "tensorflow_savedmodel"\ninstance_group [ { kind: KIND_CPU count: 3 } ]\n'
        'parameters { key: "MAX_SESSION_SHARE_COUNT" value { string_value: "2" } }\n'
    )
    _save(tf, made["accumulate"](), repo / "accumulate")
    (repo / "accumulate" / "config.pbtxt").write_text(
        'platform: "tensorflow_savedmodel"\n' + ACCUMULATE % 5_000_000
    )
    _graphdef_with_a_variable(tf, repo / "scaled" / "1" / "model.graphdef")
    (repo / "scaled" / "config.pbtxt").write_text(GRAPHDEF)
    (repo / "scaled" / "init_ops.json").write_text(json.dumps({"init_ops": ["init"]}))  # the model folder's
    _graphdef_with_a_variable(tf, repo / "missing_init_ops" / "1" / "model.graphdef")
    (repo / "missing_init_ops" / "config.pbtxt").write_text(GRAPHDEF.replace("init_ops.json", "missing.json"))
    _graphdef_with_a_variable(tf, repo / "unlisted" / "1" / "model.graphdef")
    (repo / "unlisted" / "config.pbtxt").write_text('platform: "tensorflow_graphdef"\n')
    _save(tf, made["addsub"](), repo / "wrong_signature")
    (repo / "wrong_signature" / "config.pbtxt").write_text(
        'platform: "tensorflow_savedmodel"\n'
        'parameters { key: "TF_SIGNATURE_DEF" value { string_value: "nope" } }\n'
    )
    return repo


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess([repo], ["--exit-on-error=false", "--strict-readiness=false"])
    process.start(tmp_path_factory.mktemp("logs"))
    process.wait_live(120)
    yield process
    assert process.alive(), process.log()
    process.stop()


def test_a_savedmodel_without_config_is_completed_from_its_signature(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    config = client.get_model_config("addsub")
    assert (config["platform"], config["backend"], config["max_batch_size"]) == (
        "tensorflow_savedmodel",
        "tensorflow",
        4,
    )
    assert "dynamic_batching" in config
    assert sorted((t["name"], t["data_type"], t["dims"]) for t in config["input"]) == [
        ("x", "TYPE_FP32", [4]),
        ("y", "TYPE_FP32", [4]),
    ]
    assert sorted(t["name"] for t in config["output"]) == ["diff", "sum"]
    text = {t["name"]: t for t in client.get_model_config("text")["input"]}["text"]
    assert text["data_type"] == "TYPE_STRING" and text["dims"] == [1] and text["reshape"] == {"shape": []}
    pair = client.get_model_config("pair")
    assert pair["max_batch_size"] == 0 and pair["input"][0]["dims"] == [2, 4]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_savedmodels_and_graphdefs_answer_with_the_right_numbers(
    server: ServerProcess, protocol: str
) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)

    def tensor(name: str, array: np.ndarray, datatype: str) -> Any:
        made = module.InferInput(name, list(array.shape), datatype)
        made.set_data_from_numpy(array)
        return made

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.full((3, 4), 0.5, dtype=np.float32)
    result = client.infer("addsub", [tensor("x", x, "FP32"), tensor("y", y, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("sum"), x + y)
    np.testing.assert_array_equal(result.as_numpy("diff"), x - y)
    words = np.array([[b"abc"], [b"tf"]], dtype=np.object_)
    result = client.infer("text", [tensor("text", words, "BYTES")])
    assert result.as_numpy("upper").ravel().tolist() == [b"ABC", b"TF"]
    assert result.as_numpy("length").ravel().tolist() == [3, 2]
    pair = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(
        client.infer("pair", [tensor("pair", pair, "FP32")]).as_numpy("total"), [6, 22]
    )
    scaled = client.infer("scaled", [tensor("INPUT", x, "FP32")]).as_numpy("OUTPUT")
    np.testing.assert_allclose(scaled, x * 2.5)
    result = client.infer("other_signature", [tensor("x", x, "FP32"), tensor("y", y, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("sum"), x + y)  # its only signature, taken with a warning


def test_the_dynamic_batcher_joins_concurrent_requests(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before = client.get_inference_statistics("scaled")["model_stats"][0]
    rows = np.arange(24, dtype=np.float32).reshape(6, 1, 4)
    answers: list[np.ndarray] = [np.empty(0)] * len(rows)

    def send(index: int) -> None:
        own = httpclient.InferenceServerClient(server.http_url)
        made = httpclient.InferInput("INPUT", [1, 4], "FP32")
        made.set_data_from_numpy(rows[index])
        answers[index] = own.infer("scaled", [made]).as_numpy("OUTPUT")
        own.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(rows))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for row, answer in zip(rows, answers, strict=True):
        np.testing.assert_allclose(answer, row * 2.5)
    after = client.get_inference_statistics("scaled")["model_stats"][0]
    inferences = int(after["inference_count"]) - int(before.get("inference_count", 0))
    executions = int(after["execution_count"]) - int(before.get("execution_count", 0))
    assert inferences == 6 and executions < 6, (inferences, executions)


def test_a_sequence_model_gets_its_controls_and_implicit_state(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)

    def step(value: int, sequence: int, start: bool = False, end: bool = False) -> int:
        tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        result = client.infer(
            "accumulate", [tensor], sequence_id=sequence, sequence_start=start, sequence_end=end
        )
        return int(result.as_numpy("OUTPUT")[0][0])

    assert step(3, 21, start=True) == 3
    assert step(10, 22, start=True) == 10
    assert step(4, 21) == 7
    assert step(5, 22, end=True) == 15
    assert step(1, 21, end=True) == 8


def test_models_that_cannot_be_served_say_why_and_fail_alone(server: ServerProcess) -> None:
    rows = {
        row["name"]: row
        for row in httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    }
    assert rows["unlisted"]["state"] == "UNAVAILABLE"
    assert "a GraphDef does not say which tensors are its inputs and outputs" in rows["unlisted"]["reason"]
    assert rows["wrong_signature"]["state"] == "UNAVAILABLE"
    assert (
        "the SavedModel has no signature 'nope' under tag 'serve'; it has: serving_default"
        in rows["wrong_signature"]["reason"]
    )
    assert rows["missing_init_ops"]["state"] == "UNAVAILABLE"
    assert "TF_INIT_OPS_FILE 'missing.json' is in neither" in rows["missing_init_ops"]["reason"]
    assert rows["addsub"]["state"] == "READY"


def test_a_bad_request_is_an_error_and_the_model_serves_on(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    wrong = httpclient.InferInput("x", [1, 5], "FP32")
    wrong.set_data_from_numpy(np.ones((1, 5), dtype=np.float32))
    other = httpclient.InferInput("y", [1, 4], "FP32")
    other.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    with pytest.raises(InferenceServerException, match="x"):
        client.infer("addsub", [wrong, other])
    assert client.is_model_ready("addsub")


def test_instances_share_sessions_up_to_max_session_share_count(repo: Path) -> None:
    from trt.server.backends.tensorflow import TensorFlowBackend

    config = read_config_file(repo / "shared" / "config.pbtxt")
    config.name = "shared"
    backend = TensorFlowBackend()
    files = ModelFiles("shared", 1, repo / "shared", repo / "shared" / "1")
    backend.auto_complete(config, files, 4)
    instances = [
        backend.create_instance(config, files, InstanceSpec(f"s_{i}", "KIND_CPU", 0, 1)) for i in range(3)
    ]
    ((_, graphs),) = backend._sessions.items()
    assert [graph.users for graph in graphs] == [2, 1]  # three instances, at most two to a session
    x = np.ones((1, 4), dtype=np.float32)
    for instance in instances:
        np.testing.assert_array_equal(instance.execute({"x": x, "y": x}, ["sum"])["sum"], x * 2)
    for instance in instances:
        instance.close()
    assert backend._sessions == {}
