"""TorchScript models on a CUDA device, served by `trt serve` and called with tritonclient over gRPC.

Skipped where torch sees no CUDA device (CI has none); `scripts/gpu_check.sh` runs these on a GPU host.
Each model below refuses inputs that are not on a CUDA device, so an answer proves where it ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device that torch can use", allow_module_level=True)

import tritonclient.grpc as grpcclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from tests.support import ServerProcess  # noqa: E402


class LinearOnCuda(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(64, 10)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if not features.is_cuda:
            raise RuntimeError("input is not on a CUDA device")
        return self.layer(features)


class AddSubOnCuda(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not (x.is_cuda and y.is_cuda):
            raise RuntimeError("input is not on a CUDA device")
        return x + y, x - y


LINEAR = LinearOnCuda().eval()
LINEAR_TENSORS = (
    'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 64 ] } ]\n'
    'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]\n'
)


def _write(repo: Path, name: str, module: torch.nn.Module, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    torch.jit.script(module).save(str(repo / name / "1" / "model.pt"))
    (repo / name / "config.pbtxt").write_text(f'platform: "pytorch_libtorch"\n{config}')


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("torch_gpu_repo")
    batched = "max_batch_size: 32\n" + LINEAR_TENSORS
    _write(repo, "on_gpu", LINEAR, batched + "instance_group [ { kind: KIND_GPU count: 1 } ]\n")
    _write(repo, "on_cpu", LINEAR, batched + "instance_group [ { kind: KIND_CPU count: 1 } ]\n")
    _write(repo, "auto", LINEAR, batched)  # no instance_group: KIND_AUTO, a GPU where there is one
    _write(repo, "batched_pair", LINEAR, batched
           + "instance_group [ { kind: KIND_GPU count: 2 } ]\n"
           + "dynamic_batching { max_queue_delay_microseconds: 2000 }\n")  # fmt: skip
    half = (
        "max_batch_size: 8\n"
        'input [ { name: "INPUT__0" data_type: TYPE_FP16 dims: [ 16 ] },'
        ' { name: "INPUT__1" data_type: TYPE_FP16 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP16 dims: [ 16 ] },'
        ' { name: "OUTPUT__1" data_type: TYPE_FP16 dims: [ 16 ] } ]\n'
        "instance_group [ { kind: KIND_GPU } ]\n"
    )
    _write(repo, "half", AddSubOnCuda().half(), half)
    absent = torch.cuda.device_count()  # the first ordinal this machine does not have
    _write(
        repo, "absent_gpu", LINEAR, batched + f"instance_group [ {{ kind: KIND_GPU gpus: [ {absent} ] }} ]\n"
    )
    proc = ServerProcess([repo], ["--exit-on-error=false", "--strict-readiness=false"])
    proc.start(tmp_path_factory.mktemp("logs"))
    yield proc
    assert proc.alive(), f"the server died during the tests:\n{proc.log()}"
    proc.stop()


def _expected(features: np.ndarray) -> np.ndarray:
    weight = LINEAR.layer.weight.detach().numpy().astype(np.float64)
    bias = LINEAR.layer.bias.detach().numpy().astype(np.float64)
    return (features.astype(np.float64) @ weight.T + bias).astype(np.float32)


def _infer(server: ServerProcess, model: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = []
    for name, array in feeds.items():
        tensor = grpcclient.InferInput(
            name, list(array.shape), "FP16" if array.dtype == np.float16 else "FP32"
        )
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs)
    return {o.name: result.as_numpy(o.name) for o in result.get_response().outputs}


def _features(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 64)).astype(np.float32)


def test_a_kind_gpu_instance_computes_on_the_gpu(server: ServerProcess) -> None:
    features = _features(5)
    out = _infer(server, "on_gpu", {"INPUT__0": features})["OUTPUT__0"]
    np.testing.assert_allclose(out, _expected(features), rtol=1e-4, atol=1e-5)


def test_a_kind_cpu_instance_of_the_same_model_stays_on_the_cpu(server: ServerProcess) -> None:
    with pytest.raises(InferenceServerException, match="input is not on a CUDA device"):
        _infer(server, "on_cpu", {"INPUT__0": _features(1)})


def test_kind_auto_places_a_torch_model_on_every_gpu_as_triton_does(server: ServerProcess) -> None:
    config = grpcclient.InferenceServerClient(server.grpc_url).get_model_config("auto").config
    kinds = {group.kind for group in config.instance_group}
    gpus = sorted(gpu for group in config.instance_group for gpu in group.gpus)
    assert kinds == {grpcclient.model_config_pb2.ModelInstanceGroup.KIND_GPU}
    assert gpus == list(range(torch.cuda.device_count()))
    features = _features(3, seed=1)
    out = _infer(server, "auto", {"INPUT__0": features})["OUTPUT__0"]
    np.testing.assert_allclose(out, _expected(features), rtol=1e-4, atol=1e-5)


def test_fp16_tensors_on_the_gpu(server: ServerProcess) -> None:
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((2, 4, 16)).astype(np.float16)
    out = _infer(server, "half", {"INPUT__0": x, "INPUT__1": y})
    assert out["OUTPUT__0"].dtype == np.float16
    np.testing.assert_array_equal(out["OUTPUT__0"], x + y)
    np.testing.assert_array_equal(out["OUTPUT__1"], x - y)


def test_two_gpu_instances_under_dynamic_batching_answer_every_request_correctly(
    server: ServerProcess,
) -> None:
    requests = [_features(1 + index % 4, seed=index) for index in range(64)]

    def call(features: np.ndarray) -> np.ndarray:
        return _infer(server, "batched_pair", {"INPUT__0": features})["OUTPUT__0"]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(call, requests))
    for features, out in zip(requests, answers, strict=True):
        np.testing.assert_allclose(out, _expected(features), rtol=1e-4, atol=1e-5)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    stats = client.get_inference_statistics("batched_pair").model_stats[0]
    assert stats.inference_count == sum(len(features) for features in requests)
    assert stats.execution_count < len(requests)  # 16 callers at once: some requests shared a batch


def test_a_gpu_the_machine_lacks_fails_that_model_alone_with_the_reason(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    index = {model.name: model for model in client.get_model_repository_index().models}
    assert index["absent_gpu"].state == "UNAVAILABLE"
    assert f"GPU {torch.cuda.device_count()}" in index["absent_gpu"].reason
    assert index["on_gpu"].state == "READY"
