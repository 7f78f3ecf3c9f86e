"""TorchScript models under Triton's pytorch_libtorch rules, served by trt serve."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from server.backends.pytorch import input_order, output_positions
from tests.support import ROOT, ServerProcess

torch = pytest.importorskip("torch")


class AddSub(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, x - y


def _write(repo: Path, name: str, module: torch.nn.Module, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    torch.jit.script(module).save(str(repo / name / "1" / "model.pt"))
    (repo / name / "config.pbtxt").write_text(f'platform: "pytorch_libtorch"\n{config}')


def _tensors(kind: str, specs: list[tuple[str, str]]) -> str:
    return (
        f"{kind} [ " + ", ".join(f'{{ name: "{n}" data_type: {t} dims: [ 4 ] }}' for n, t in specs) + " ]\n"
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("torch_repo")
    # Listed out of order on purpose: the __<i> suffix, not the config order, picks the argument.
    _write(repo, "indexed", AddSub(), "max_batch_size: 4\n"
           + _tensors("input", [("INPUT__1", "TYPE_FP32"), ("INPUT__0", "TYPE_FP32")])
           + _tensors("output", [("OUTPUT__1", "TYPE_FP32"), ("OUTPUT__0", "TYPE_FP32")]))  # fmt: skip
    # Named like forward()'s arguments, listed in the other order.
    _write(repo, "by_argument", AddSub(), "max_batch_size: 4\n"
           + _tensors("input", [("y", "TYPE_FP32"), ("x", "TYPE_FP32")])
           + _tensors("output", [("SUM", "TYPE_FP32"), ("DIFFERENCE", "TYPE_FP32")]))  # fmt: skip
    _write(repo, "half", AddSub().half(), "max_batch_size: 4\n"
           + _tensors("input", [("INPUT__0", "TYPE_FP16"), ("INPUT__1", "TYPE_FP16")])
           + _tensors("output", [("OUTPUT__0", "TYPE_FP16"), ("OUTPUT__1", "TYPE_FP16")]))  # fmt: skip
    _write(repo, "no_dims", AddSub(), 'input [ { name: "INPUT__0" data_type: TYPE_FP32 } ]\n')
    strings = _tensors("input", [("INPUT__0", "TYPE_STRING"), ("INPUT__1", "TYPE_FP32")])
    _write(repo, "strings", AddSub(), strings + _tensors("output", [("OUTPUT__0", "TYPE_FP32")]))
    proc = ServerProcess([repo, ROOT / "model_repository"], ["--exit-on-error=false",
                         "--model-control-mode=explicit", "--load-model=*"])  # fmt: skip
    proc.start(tmp_path_factory.mktemp("logs"))
    yield proc
    proc.stop()


def _infer(server: ServerProcess, model: str, names: tuple[str, str], a: np.ndarray, b: np.ndarray) -> dict:
    client = httpclient.InferenceServerClient(server.http_url)
    datatype = "FP16" if a.dtype == np.float16 else "FP32"
    inputs = [httpclient.InferInput(n, list(a.shape), datatype) for n in names]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer(model, inputs)
    return {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}


def test_indexed_names_map_to_argument_and_result_positions(server: ServerProcess) -> None:
    a, b = np.full((2, 4), 5, np.float32), np.full((2, 4), 2, np.float32)
    out = _infer(server, "indexed", ("INPUT__0", "INPUT__1"), a, b)
    np.testing.assert_array_equal(out["OUTPUT__0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT__1"], a - b)  # x = INPUT__0, y = INPUT__1


def test_names_matching_forward_arguments_follow_the_signature(server: ServerProcess) -> None:
    x, y = np.full((1, 4), 10, np.float32), np.full((1, 4), 3, np.float32)
    out = _infer(server, "by_argument", ("x", "y"), x, y)
    np.testing.assert_array_equal(out["DIFFERENCE"], x - y)  # not y - x, though the config lists y first


def test_fp16_model(server: ServerProcess) -> None:
    a, b = np.full((1, 4), 1.5, np.float16), np.full((1, 4), 0.25, np.float16)
    out = _infer(server, "half", ("INPUT__0", "INPUT__1"), a, b)
    assert out["OUTPUT__0"].dtype == np.float16
    np.testing.assert_array_equal(out["OUTPUT__0"], a + b)


def test_the_example_torchscript_model(server: ServerProcess) -> None:
    module = torch.jit.load(str(ROOT / "model_repository" / "torch_mlp" / "1" / "model.pt"))
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT__0", [3, 64], "FP32")
    tensor.set_data_from_numpy(x)
    got = client.infer("torch_mlp", [tensor]).as_numpy("OUTPUT__0")
    with torch.inference_mode():
        np.testing.assert_allclose(got, module(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)


def test_configs_torchscript_cannot_serve_are_refused_with_the_reason(server: ServerProcess) -> None:
    index = {
        row["name"]: row
        for row in httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    }
    assert index["no_dims"]["state"] == "UNAVAILABLE"
    assert "needs every input and output in config.pbtxt" in index["no_dims"]["reason"]
    assert "TYPE_STRING tensors cannot reach a TorchScript model" in index["strings"]["reason"]


def test_naming_rules() -> None:
    assert input_order(["INPUT__1", "INPUT__0"], []) == ["INPUT__0", "INPUT__1"]
    assert input_order(["b", "a"], ["a", "b"]) == ["a", "b"]
    assert input_order(["q", "p"], ["a", "b"]) == ["q", "p"]
    assert output_positions(["OUT__1", "OUT__0"]) == {"OUT__1": 1, "OUT__0": 0}
    assert output_positions(["A", "B"]) == {"A": 0, "B": 1}
