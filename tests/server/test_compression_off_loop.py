"""A large compressed request or answer is inflated and deflated on a thread: the event loop goes on
answering everyone else meanwhile. On the loop, gzip of a 32 MB answer held every request of every
model for over a second (zlib lets go of the GIL while it works, so a thread frees the loop)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support import ServerProcess, longest_health_wait_while, save_onnx

ELEMENTS = 8_000_000  # 32 MB of FP32, random: zlib finds nothing to shorten and works the longest

IDENTITY_CONFIG = """
platform: "onnxruntime_onnx"
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def _write_identity(repo: Path) -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])], "identity",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n"])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    save_onnx(model, repo / "identity" / "1" / "model.onnx")
    (repo / "identity" / "config.pbtxt").write_text(IDENTITY_CONFIG)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("compression_repo")
    _write_identity(repo)
    # Compressed gRPC answers, to the clients that accept them (tritonclient's do).
    proc = ServerProcess([repo], ["--grpc-infer-response-compression-level=high"])
    proc.start(tmp_path_factory.mktemp("compression_logs"))
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    return np.random.default_rng(7).random(ELEMENTS, dtype=np.float32)


def test_a_large_gzip_answer_over_http_leaves_the_loop_free(server: ServerProcess, data: np.ndarray) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    tensor = httpclient.InferInput("X", [ELEMENTS], "FP32")
    tensor.set_data_from_numpy(data)
    answers: list[np.ndarray] = []

    def infer() -> None:
        result = client.infer(
            "identity", [tensor], request_compression_algorithm="gzip", response_compression_algorithm="gzip"
        )
        answers.append(result.as_numpy("Y"))

    took, worst = longest_health_wait_while(server, infer)
    assert np.array_equal(answers[0], data)
    assert worst < max(0.25 * took, 0.2), f"a health check waited {worst:.2f} s of a {took:.2f} s request"


def test_a_large_compressed_answer_over_grpc_leaves_the_loop_free(
    server: ServerProcess, data: np.ndarray
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("X", [ELEMENTS], "FP32")
    tensor.set_data_from_numpy(data)
    answers: list[np.ndarray] = []

    def infer() -> None:
        answers.append(client.infer("identity", [tensor], compression_algorithm="gzip").as_numpy("Y"))

    took, worst = longest_health_wait_while(server, infer)
    assert np.array_equal(answers[0], data)
    assert worst < max(0.25 * took, 0.2), f"a health check waited {worst:.2f} s of a {took:.2f} s request"
