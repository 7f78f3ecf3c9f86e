"""Python models written for Triton (`model.py`, `TritonPythonModel`) run unchanged in `trt serve`."""

from __future__ import annotations

import asyncio
import glob
import itertools
import json
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.server.backends.python import python_models as models
from tests.support import ROOT, ServerProcess, int_inputs, write_simple
from trt.server.backends.python.instance import ModelProcessDied, PythonModelInstance
from trt.server.backends.python.stub import _ipc, trt_pb_wire
from trt.server.core.backends.base import BackendRequest, BackendResponse
from trt.server.core.extensions.statistics import ModelStatistics
from trt.server.core.scheduling.request_scheduler import RequestScheduler
from trt.server.core.scheduling.timing import ExecutionTimes
from trt.server.core.types import InferenceRequest, InferenceResponse, OutputTensor


def _write(repo: Path, name: str, source: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(source)
    (repo / name / "config.pbtxt").write_text(config)


# Imports the modules beside it both ways Triton allows; its folder also holds a json.py, which must
# not shadow the standard library's (Triton appends the model's folders to sys.path).
IMPORTS = """
import json

import numpy as np
import offsets
import triton_python_backend_utils as pb_utils

from .scaling import SCALE


class TritonPythonModel:
    def execute(self, requests):
        json.dumps({})
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * SCALE + offsets.OFFSET)]))
        return responses
"""

IMPORTS_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""


# Answers OUTPUT1 only when the request's "both" parameter says so, as vLLM's backend answers its
# token counts only when asked.
PARTIAL_OUTPUTS = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", x + 1)]
            if json.loads(request.parameters()).get("both"):
                outputs.append(pb_utils.Tensor("OUTPUT1", x + 2))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""
PARTIAL_OUTPUTS_CONFIG = """
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 2 ] }
]
"""


# Returns what its input asks for: "none" of the responses, one "bare" response (not in a list).
MISCOUNTS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        how = pb_utils.get_input_tensor_by_name(requests[0], "HOW").as_numpy()[0]
        if how == b"bare":
            return pb_utils.InferenceResponse([])
        return []
"""
MISCOUNTS_CONFIG = """
backend: "python"
input [{ name: "HOW" data_type: TYPE_STRING dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_STRING dims: [ 1 ] }]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("python_repo")
    _write(repo, "add_sub", models.ADD_SUB, models.ADD_SUB_CONFIG)
    _write(repo, "strings", models.STRINGS, models.STRINGS_CONFIG)
    _write(repo, "batch_errors", models.BATCH_ERRORS, models.BATCH_ERRORS_CONFIG)
    _write(repo, "bls", models.BLS, models.BLS_CONFIG)
    _write(repo, "auto_complete", models.AUTO_COMPLETE, models.AUTO_COMPLETE_CONFIG)
    _write(
        repo,
        "broken_init",
        models.RAISES_IN_INITIALIZE,
        models.AUTO_COMPLETE_CONFIG + models.ADD_SUB_CONFIG.split("\n", 3)[3],
    )
    _write(repo, "imports", IMPORTS, IMPORTS_CONFIG)
    _write(repo, "partial_outputs", PARTIAL_OUTPUTS, PARTIAL_OUTPUTS_CONFIG)
    _write(repo, "miscounts", MISCOUNTS, MISCOUNTS_CONFIG)
    _write(repo, "own_types", models.OWN_TYPES, models.OWN_TYPES_CONFIG)
    version_dir = repo / "imports" / "1"
    (version_dir / "scaling.py").write_text("SCALE = 3.0\n")
    (version_dir / "offsets.py").write_text("OFFSET = 0.5\n")
    (version_dir / "json.py").write_text("raise ImportError('json.py beside model.py shadowed the stdlib')\n")
    write_simple(repo)
    proc = ServerProcess([repo], ["--exit-on-error=false"]).start(tmp_path_factory.mktemp("logs"))
    yield proc
    assert proc.alive(), proc.log()
    proc.stop()
    assert "Cleaning up..." in proc.log()  # finalize() ran at shutdown


def test_triton_add_sub_runs_unchanged_over_http_and_grpc(server: ServerProcess) -> None:
    a = np.random.default_rng(0).random(4, dtype=np.float32)
    b = np.random.default_rng(1).random(4, dtype=np.float32)
    http = httpclient.InferenceServerClient(server.http_url)
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = http.infer("add_sub", inputs, request_id="1")
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)

    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    grpc_inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
    grpc_inputs[0].set_data_from_numpy(a)
    grpc_inputs[1].set_data_from_numpy(b)
    result = grpc.infer("add_sub", grpc_inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)
    assert http.get_model_metadata("add_sub")["platform"] == "python"


def test_bytes_in_and_out_with_parameters_and_correlation_id(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    text = np.array([b"hello", b"w\x00rld", "caf\u00e9".encode()], dtype=np.object_)
    tensor = httpclient.InferInput("TEXT", [3], "BYTES")
    tensor.set_data_from_numpy(text)
    result = client.infer(
        "strings", [tensor], request_id="r-9", sequence_id=42, parameters={"color": "blue", "n": 3}
    )
    assert list(result.as_numpy("UPPER")) == [b"HELLO", b"W\x00RLD", "CAF\u00e9".encode()]
    info = json.loads(result.as_numpy("INFO")[0])
    assert info["parameters"] == {"color": "blue", "n": 3}
    assert info["correlation_id"] == 42
    assert info["request_id"] == "r-9"
    assert "strings ready on CPU" in server.log()  # pb_utils.Logger reaches the server log


def test_an_output_the_model_leaves_out_is_absent_from_the_response_as_in_triton(
    server: ServerProcess,
) -> None:
    data = np.array([1, 2], dtype=np.int32)
    for client_module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
        client = client_module.InferenceServerClient(url)
        tensor = client_module.InferInput("INPUT0", [2], "INT32")
        tensor.set_data_from_numpy(data)
        result = client.infer("partial_outputs", [tensor])  # every output asked for
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + 1)
        assert result.as_numpy("OUTPUT1") is None
        asked = [client_module.InferRequestedOutput("OUTPUT1")]
        assert client.infer("partial_outputs", [tensor], outputs=asked).as_numpy("OUTPUT1") is None
        result = client.infer("partial_outputs", [tensor], parameters={"both": True})
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), data + 2)


def test_outputs_keep_the_type_the_model_gave_them_as_in_triton(server: ServerProcess) -> None:
    # Cast to the config's types, 3 / 2 would have been answered as 1, without a word.
    data = np.array([3, -5], dtype=np.int32)
    for client_module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
        client = client_module.InferenceServerClient(url)
        tensor = client_module.InferInput("X", [2], "INT32")
        tensor.set_data_from_numpy(data)
        result = client.infer("own_types", [tensor])
        halves, count = result.as_numpy("HALVES"), result.as_numpy("COUNT")
        assert (halves.dtype, count.dtype) == (np.float64, np.int32)
        np.testing.assert_array_equal(halves, [1.5, -2.5])
        np.testing.assert_array_equal(count, [2])


def test_an_exception_in_execute_fails_the_request_and_the_model_keeps_serving(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("TEXT", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"raise"], dtype=np.object_))
    with pytest.raises(InferenceServerException) as info:
        client.infer("strings", [tensor])
    assert info.value.status() == "500"
    # Triton's stub words it so (seen with Triton 2.51), less the traceback it appends; a config
    # without instance_group has one group named as the model, so its instance is strings_0.
    assert info.value.message() == (
        "Failed to process the request(s) for model 'strings_0', message: "
        "TritonModelException: asked to raise"
    )
    tensor.set_data_from_numpy(np.array([b"fine"], dtype=np.object_))
    assert list(client.infer("strings", [tensor]).as_numpy("UPPER")) == [b"FINE"]


@pytest.mark.parametrize(
    ("how", "words"),
    [
        (  # Triton 2.51's words, seen side by side (less the newline it ends with)
            b"none",
            "Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
            "InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0",
        ),
        (b"bare", "Expected a list in the execute return, found type '<class "),
    ],
)
def test_execute_returning_the_wrong_number_of_responses_is_refused_in_tritons_words(
    server: ServerProcess, how: bytes, words: str
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("HOW", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([how], dtype=np.object_))
    with pytest.raises(InferenceServerException) as info:
        client.infer("miscounts", [tensor])
    assert info.value.status() == "StatusCode.INTERNAL"
    assert info.value.message().startswith(
        "Failed to process the request(s) for model 'miscounts_0', message: " + words
    ), info.value.message()


def _batch_request(url: str, value: int) -> dict[str, int] | str:
    client = httpclient.InferenceServerClient(url)  # one per thread: the client is gevent-based
    tensor = httpclient.InferInput("VALUE", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    try:
        result = client.infer("batch_errors", [tensor])
    except InferenceServerException as exc:
        return str(exc)
    finally:
        client.close()  # in this thread: collected in another, its gevent pool fails to close
    return {name: int(result.as_numpy(name)[0][0]) for name in ("DOUBLE", "SHARED", "PID")}


def test_an_error_for_one_request_of_a_batch_leaves_the_others_answered(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before = client.get_inference_statistics("batch_errors")["model_stats"][0]
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(_batch_request, server.http_url, 1)
        time.sleep(0.1)  # the first request is executing: the next three queue up together
        rest = [pool.submit(_batch_request, server.http_url, v) for v in (2, -3, 4)]
        results = [first.result(), *(f.result() for f in rest)]
    assert results[0]["DOUBLE"] == 2  # type: ignore[index]
    assert isinstance(results[2], str) and "negative value -3" in results[2]
    assert "[400]" in results[2]  # TritonError.INVALID_ARG maps to 400
    answered = [results[1], results[3]]
    assert [r["DOUBLE"] for r in answered] == [4, 8]  # type: ignore[index]
    assert all(r["SHARED"] == 3 for r in answered)  # type: ignore[index]
    after = client.get_inference_statistics("batch_errors")["model_stats"][0]
    assert after["execution_count"] - before["execution_count"] == 2
    assert after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 3


def test_killing_the_model_process_fails_in_flight_requests_and_the_next_succeeds(
    server: ServerProcess,
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    pid = _batch_request(server.http_url, 1)["PID"]  # type: ignore[index]
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(_batch_request(server.http_url, 5)))
    worker.start()
    time.sleep(0.1)  # in flight: the model sleeps 0.3 s
    os.kill(pid, signal.SIGKILL)
    worker.join(10)
    assert isinstance(outcome[0], str) and "exited" in outcome[0]
    answer = _batch_request(server.http_url, 6)
    assert answer["DOUBLE"] == 12  # type: ignore[index]
    assert answer["PID"] != pid  # type: ignore[index]
    assert client.is_server_live()


def test_bls_calls_an_onnx_model_through_the_server(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    first, second = int_inputs()
    inputs = [
        httpclient.InferInput("A", [1, 16], "INT32"),
        httpclient.InferInput("B", [1, 16], "INT32"),
        httpclient.InferInput("TARGET", [1, 1], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(first)
    inputs[1].set_data_from_numpy(second)
    inputs[2].set_data_from_numpy(np.array([[b"simple"]], dtype=np.object_))
    before = client.get_inference_statistics("simple")["model_stats"][0]["inference_count"]
    result = client.infer("bls", inputs)
    np.testing.assert_array_equal(result.as_numpy("SUM"), 2 * (first + second))  # exec() + async_exec()
    after = client.get_inference_statistics("simple")["model_stats"][0]["inference_count"]
    assert after - before == 2  # both calls went through the server's scheduler

    inputs[2].set_data_from_numpy(np.array([[b"no_such_model"]], dtype=np.object_))
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.infer("bls", inputs)


def test_model_py_imports_the_modules_beside_it_by_name_and_relatively(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("X", [2], "FP32")
    tensor.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
    np.testing.assert_allclose(client.infer("imports", [tensor]).as_numpy("Y"), [3.5, 6.5])


def test_auto_complete_config_and_a_failing_initialize(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    config = client.get_model_config("auto_complete")
    assert config["max_batch_size"] == 4
    assert config["input"][0]["name"] == "X" and config["input"][0]["dims"] == [2]
    assert "dynamic_batching" in config
    index = {row["name"]: row for row in client.get_model_repository_index()}
    assert index["broken_init"]["state"] == "UNAVAILABLE"
    assert "cannot find my weights" in index["broken_init"]["reason"]


def test_execution_env_path_runs_the_model_in_its_own_interpreter(tmp_path: Path) -> None:
    env = tmp_path / "env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env)], check=True
    )
    repo = tmp_path / "repo"
    env_path = '{ string_value: "$$TRITON_MODEL_DIRECTORY/../../env" }'
    config = models.AUTO_COMPLETE_CONFIG + f'parameters {{ key: "EXECUTION_ENV_PATH" value: {env_path} }}\n'

    _write(repo, "in_env", models.AUTO_COMPLETE, config)
    proc = ServerProcess([repo]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        tensor = httpclient.InferInput("X", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 2), dtype=np.float32))
        who = client.infer("in_env", [tensor]).as_numpy("WHO")[0][0].decode()
        assert Path(who).parent == env / "bin"
    finally:
        proc.stop()


def test_the_example_preprocessing_model_feeds_the_example_cnn(tmp_path: Path) -> None:
    repository = ROOT / "model_repository"
    proc = ServerProcess(
        [repository],
        ["--model-control-mode=explicit", "--load-model=preprocess_image", "--load-model=cnn_onnx"],
    ).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        image = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
        tensor = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[image.tobytes()]], dtype=np.object_))
        pixels = client.infer("preprocess_image", [tensor]).as_numpy("PIXELS")
        assert pixels.shape == (1, 3, 64, 64)
        expected = (
            image.transpose(2, 0, 1) / 255.0 - np.array([0.485, 0.456, 0.406])[:, None, None]
        ) / np.array([0.229, 0.224, 0.225])[:, None, None]
        np.testing.assert_allclose(pixels[0], expected, rtol=1e-5, atol=1e-5)
        logits_input = httpclient.InferInput("input", [1, 3, 64, 64], "FP32")
        logits_input.set_data_from_numpy(pixels)
        assert client.infer("cnn_onnx", [logits_input]).as_numpy("logits").shape == (1, 10)

        tensor.set_data_from_numpy(np.array([[b"too short"]], dtype=np.object_))
        with pytest.raises(InferenceServerException, match="12288 bytes"):
            client.infer("preprocess_image", [tensor])
    finally:
        proc.stop()


DLPACK = """
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            source = pb_utils.get_input_tensor_by_name(request, "X")
            doubled = torch.utils.dlpack.from_dlpack(source.to_dlpack()) * 2
            output = pb_utils.Tensor.from_dlpack("Y", torch.utils.dlpack.to_dlpack(doubled))
            responses.append(pb_utils.InferenceResponse([output]))
        return responses
"""


def test_tensors_cross_to_torch_through_dlpack(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    repo = tmp_path / "repo"
    config = 'backend: "python"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
    config += 'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
    _write(repo, "dlpack", DLPACK, config)
    proc = ServerProcess([repo]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        tensor = httpclient.InferInput("X", [3], "FP32")
        tensor.set_data_from_numpy(np.array([1.0, 2.0, 3.5], dtype=np.float32))
        np.testing.assert_array_equal(client.infer("dlpack", [tensor]).as_numpy("Y"), [2.0, 4.0, 7.0])
    finally:
        proc.stop()


def test_a_packed_environment_is_unpacked_once_into_the_cache(tmp_path: Path) -> None:
    env = tmp_path / "built_env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--copies", "--system-site-packages", "--without-pip", str(env)],
        check=True,
    )
    repo = tmp_path / "repo"
    env_path = '{ string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" }'
    config = models.AUTO_COMPLETE_CONFIG + f'parameters {{ key: "EXECUTION_ENV_PATH" value: {env_path} }}\n'
    _write(repo, "packed", models.AUTO_COMPLETE, config)
    subprocess.run(["tar", "-czf", str(repo / "packed" / "env.tar.gz"), "-C", str(env), "."], check=True)
    cache = tmp_path / "cache"
    proc = ServerProcess([repo], env={"TRT_CACHE_DIR": str(cache)}).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(proc.http_url)
        tensor = httpclient.InferInput("X", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 2), dtype=np.float32))
        who = Path(client.infer("packed", [tensor]).as_numpy("WHO")[0][0].decode())
        assert who.parent.parent.parent == cache / "environments"
        assert sorted(p.name for p in (repo / "packed").iterdir()) == ["1", "config.pbtxt", "env.tar.gz"]
    finally:
        proc.stop()


# -- the channel between the server and a model's process, driven without a server ---------------


def test_a_ring_keeps_order_across_its_end_spills_big_messages_and_says_when_it_is_full() -> None:
    spill_fd = _ipc.new_segment("trt_test_spill", 0)
    with mmap.mmap(-1, _ipc.Ring.bytes_needed(1024) + 8) as buffer:
        spill = _ipc.Spill(spill_fd, buffer, _ipc.Ring.bytes_needed(1024))
        ring = _ipc.Ring(buffer, 0, 1024, trt_pb_wire.Codec("tag"), spill)
        for round_ in range(50):  # crosses the end of the ring many times
            assert ring.put(("message", round_, "x" * (round_ * 7 % 200)))
            assert ring.get() == ["message", round_, "x" * (round_ * 7 % 200)]
        assert ring.get() is _ipc.EMPTY
        big = np.arange(10_000, dtype=np.int64)  # over max_message: through the spill
        assert ring.put(("big", big))
        assert os.fstat(spill_fd).st_size > big.nbytes
        assert not ring.put(("big", big))  # one at a time: the first is not read yet
        _, received = ring.get()
        np.testing.assert_array_equal(received, big)
        assert os.fstat(spill_fd).st_size == 0  # its memory given back once read
        assert ring.put(("big", big)) and ring.get()[0] == "big"
        accepted = 0
        while ring.put(("fill", accepted)):
            accepted += 1
        assert 5 < accepted < 64  # 1,024 bytes of messages of 24
        assert [ring.get()[1] for _ in range(accepted)] == list(range(accepted))
        assert ring.empty()
        ring.close()
    os.close(spill_fd)


def test_the_fenced_ring_other_architectures_use_carries_messages_between_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """x86 needs no fences; aarch64 and POWER do. Both sides fence at once here, from two threads."""
    fences = []

    def counting_fence() -> None:
        fences.append(1)
        _ipc._lock_fence()

    monkeypatch.setattr(_ipc, "_fence", counting_fence)
    received: list[object] = []
    with mmap.mmap(-1, _ipc.Ring.bytes_needed(256)) as buffer:
        ring = _ipc.Ring(buffer, 0, 256, trt_pb_wire.Codec(None))

        def consume() -> None:
            while len(received) < 2000:
                message = ring.get()
                if message is not _ipc.EMPTY:
                    received.append(message)

        consumer = threading.Thread(target=consume)
        consumer.start()
        for number in range(2000):
            while not ring.put(number):
                pass  # full: the consumer is behind
        consumer.join(30)
        ring.close()
    assert received == list(range(2000))
    assert len(fences) >= 4 * 2000  # two on each put, two on each get


def _instance(tmp_path: Path, source: str, config: dict[str, object], **sizes: int) -> PythonModelInstance:
    (tmp_path / "1").mkdir(parents=True, exist_ok=True)
    (tmp_path / "1" / "model.py").write_text(source)
    args = {
        "model_config": json.dumps({"name": "m", **config}),
        "model_instance_kind": "CPU",
        "model_instance_name": "m_0",
        "model_instance_device_id": "0",
        "model_repository": str(tmp_path),
        "model_version": "1",
        "model_name": "m",
    }
    return PythonModelInstance(sys.executable, tmp_path / "1" / "model.py", args, None, **sizes)


def test_tensors_larger_than_the_arena_and_the_rings_cross_both_ways(tmp_path: Path) -> None:
    instance = _instance(tmp_path, models.ECHO, {}, arena_bytes=4096, ring_bytes=4096)
    tag = instance._tag
    small = np.arange(8, dtype=np.float32)
    big = np.random.default_rng(0).random((300, 1000), dtype=np.float32)  # 1.2 MB
    text = np.array([b"a", b"\x00b" * 5000, "caf\u00e9".encode()], dtype=np.object_)

    async def scenario() -> list[BackendResponse]:
        try:
            answers = []
            for inputs in ({"S": small, "B": big, "T": text}, {"S": small}, {"B": big}):
                names = tuple(f"OUT_{name}" for name in inputs)
                answers += await instance.execute_requests([BackendRequest("", inputs, names, {})])
            assert glob.glob(f"/dev/shm/{tag}*") == []
            return answers
        finally:
            await instance.aclose()

    first, second, third = asyncio.run(scenario())
    np.testing.assert_array_equal(first.outputs["OUT_S"], small)
    np.testing.assert_array_equal(first.outputs["OUT_B"], big)
    assert list(first.outputs["OUT_T"]) == list(text)
    np.testing.assert_array_equal(second.outputs["OUT_S"], small)
    np.testing.assert_array_equal(third.outputs["OUT_B"], big)
    assert glob.glob(f"/dev/shm/{tag}*") == []


def test_a_model_that_sends_faster_than_its_ring_drains_waits_and_loses_nothing(tmp_path: Path) -> None:
    instance = _instance(tmp_path, models.MANY_RESPONSES, {}, ring_bytes=4096)
    received: list[int] = []
    finals: list[bool] = []

    def on_response(answer: BackendResponse | None, final: bool) -> None:
        if answer is not None:
            received.append(int(answer.outputs["INDEX"][0]))
        finals.append(final)

    async def scenario() -> None:
        try:
            request = BackendRequest("", {"COUNT": np.array([3000], dtype=np.int32)}, ("INDEX",), {})
            request.on_response = on_response
            await instance.execute_requests([request])
        finally:
            await instance.aclose()

    asyncio.run(scenario())
    assert received == list(range(3000))
    assert finals[-1] and not any(finals[:-1])


def test_a_dead_process_fails_what_it_held_and_is_restarted(tmp_path: Path) -> None:
    instance = _instance(tmp_path, models.BATCH_ERRORS, {})
    value = {"VALUE": np.array([[4]], dtype=np.int32)}

    async def scenario() -> tuple[int, BackendResponse]:
        try:
            first = instance.pid
            in_flight = asyncio.ensure_future(
                instance.execute_requests([BackendRequest("", value, ("DOUBLE",), {})])
            )
            await asyncio.sleep(0.1)
            os.kill(first, signal.SIGKILL)
            with pytest.raises(ModelProcessDied, match="exited"):
                await in_flight
            [answer] = await instance.execute_requests([BackendRequest("", value, ("DOUBLE", "PID"), {})])
            return first, answer
        finally:
            await instance.aclose()

    first, answer = asyncio.run(scenario())
    assert answer.outputs["DOUBLE"][0][0] == 8
    assert answer.outputs["PID"][0][0] != first


class _EchoServices:
    """The server as BLS sees it: answers model 'echo' with its input, a little later."""

    stop_deadline = None  # not stopping

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        await asyncio.sleep(0.001)
        data = request.inputs[0].data
        assert data is not None
        return InferenceResponse("echo", "1", request.id, [OutputTensor("Y", "INT64", data.shape, data)])


def test_many_bls_answers_at_once_reach_their_callers_through_a_small_ring(tmp_path: Path) -> None:
    instance = _instance(tmp_path, models.CONCURRENT_BLS, {}, ring_bytes=4096)
    instance.services = _EchoServices()

    async def scenario() -> list[BackendResponse]:
        try:
            count = {"COUNT": np.array([60], dtype=np.int32)}
            return await instance.execute_requests([BackendRequest("", count, ("FIRSTS",), {})])
        finally:
            await instance.aclose()

    [answer] = asyncio.run(scenario())
    assert answer.error is None, answer.error
    assert list(answer.outputs["FIRSTS"]) == list(range(60))


# Takes 0.4 s per request and says when (CLOCK_MONOTONIC, as the server's perf_counter_ns), and
# in which process.
TIMED = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        started = time.perf_counter_ns()
        time.sleep(0.4)
        span = pb_utils.Tensor("SPAN", np.array([started, time.perf_counter_ns()], dtype=np.int64))
        pid = pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))
        return [pb_utils.InferenceResponse([span, pid]) for _ in requests]
"""


def test_an_instance_holds_its_next_request_while_it_runs_one_and_times_it_from_its_start(
    tmp_path: Path,
) -> None:
    """The scheduler hands a Python model's only instance the next requests while one executes (they
    are in the model process's ring when the first ends); they still run one at a time, in order,
    and the statistics see the held ones as queued until each starts, as Triton's would."""
    instance = _instance(tmp_path, TIMED, {})
    stats = ModelStatistics("m", "1")
    scheduler = RequestScheduler([instance], stats)

    async def scenario() -> tuple[list[tuple[BackendResponse, ExecutionTimes]], list[int]]:
        try:
            submitted = time.perf_counter_ns()
            calls = [
                asyncio.ensure_future(scheduler.schedule(BackendRequest(str(n), {}, ("SPAN",), {}), 1))
                for n in range(3)
            ]
            await asyncio.sleep(0.2)
            pending_while_first_runs = stats.pending
            assert len(instance._executions) == 3  # the running one, and the next two in its ring
            await asyncio.sleep(0.4)
            pending_while_second_runs = stats.pending
            answers = await asyncio.gather(*calls)
            return answers, [submitted, pending_while_first_runs, pending_while_second_runs]
        finally:
            await instance.aclose()

    answers, (submitted, pending_first, pending_second) = asyncio.run(scenario())
    assert (pending_first, pending_second) == (2, 1)
    spans = [answer.outputs["SPAN"] for answer, _ in answers]
    for earlier, later in itertools.pairwise(spans):
        assert later[0] >= earlier[1]  # one at a time, in order
    for (_, times), span in zip(answers, spans, strict=True):
        # Queued from submission until the model started it; executing for its own 0.4 s only.
        assert abs(times.queue_ns - (span[0] - submitted)) < 50_000_000, (times, span - submitted)
        assert 0.4e9 <= times.infer_ns < 0.55e9, times
    assert stats.execution_count == 3 and stats.pending == 0


def test_each_of_several_instances_holds_one_request_behind_the_one_it_runs(tmp_path: Path) -> None:
    """With two instances, a request never waits in one's ring behind a second queued one while
    the other could take it: each holds the running execution and the next, the rest wait in the
    scheduler's queue."""
    instances = [_instance(tmp_path / name, TIMED, {}) for name in ("a", "b")]
    stats = ModelStatistics("m", "1")
    scheduler = RequestScheduler(instances, stats)

    async def scenario() -> tuple[list[int], int]:
        try:
            calls = [
                asyncio.ensure_future(scheduler.schedule(BackendRequest(str(n), {}, ("PID",), {}), 1))
                for n in range(6)
            ]
            await asyncio.sleep(0.2)
            held = [len(instance._executions) for instance in instances]
            waiting = len(scheduler._waiting)
            await asyncio.gather(*calls)
            return held, waiting
        finally:
            for instance in instances:
                await instance.aclose()

    held, waiting = asyncio.run(scenario())
    assert held == [2, 2] and waiting == 2
    assert stats.execution_count == 6 and stats.pending == 0


def test_a_request_held_behind_one_whose_process_dies_runs_on_the_new_process(tmp_path: Path) -> None:
    """Only what the process was executing fails with it; the request it held but had not started
    is still queued work, as in Triton, and the restarted process answers it."""
    instance = _instance(tmp_path, TIMED, {})
    scheduler = RequestScheduler([instance], ModelStatistics("m", "1"))

    async def scenario() -> tuple[int, BaseException, BackendResponse]:
        try:
            first = instance.pid
            running, held = (
                asyncio.ensure_future(scheduler.schedule(BackendRequest(name, {}, ("PID",), {}), 1))
                for name in ("running", "held")
            )
            await asyncio.sleep(0.2)
            assert len(instance._executions) == 2
            os.kill(first, signal.SIGKILL)
            with pytest.raises(ModelProcessDied) as failure:
                await running
            answer, _ = await held
            return first, failure.value, answer
        finally:
            await instance.aclose()

    first, failure, answer = asyncio.run(scenario())
    assert "exited" in str(failure)
    assert answer.error is None and answer.outputs["PID"][0] != first


def test_a_held_request_cancelled_while_its_process_restarts_never_runs(tmp_path: Path) -> None:
    instance = _instance(tmp_path, TIMED, {})
    stats = ModelStatistics("m", "1")
    scheduler = RequestScheduler([instance], stats)

    async def scenario() -> None:
        try:
            running, held = (
                asyncio.ensure_future(scheduler.schedule(BackendRequest(name, {}, ("PID",), {}), 1))
                for name in ("running", "held")
            )
            await asyncio.sleep(0.2)
            os.kill(instance.pid, signal.SIGKILL)
            with pytest.raises(ModelProcessDied):
                await running
            held.cancel()  # the new process is still starting
            await scheduler.schedule(BackendRequest("after", {}, ("PID",), {}), 1)
        finally:
            await instance.aclose()

    asyncio.run(scenario())
    assert stats.execution_count == 1  # "after" alone: "running" failed, "held" never ran
