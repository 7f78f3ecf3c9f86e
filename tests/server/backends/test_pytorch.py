"""TorchScript models under Triton's pytorch_libtorch rules: served by trt serve and checked with
tritonclient against torch run in the test, plus the naming rules and instance behaviour in-process."""

from __future__ import annotations

import shutil
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.utils import InferenceServerException

torch = pytest.importorskip("torch")

from tests.support import ROOT, ServerProcess  # noqa: E402
from trt.protos import model_config_pb2  # noqa: E402
from trt.server.backends.pytorch import PyTorchBackend  # noqa: E402
from trt.server.backends.pytorch_plan import ForwardArgument, ForwardSignature, plan_call  # noqa: E402
from trt.server.backends.torchscript import TorchScriptInstance  # noqa: E402
from trt.server.core.backends.base import InstanceSpec, ModelFiles  # noqa: E402
from trt.server.core.errors import ModelConfigError, ModelLoadError  # noqa: E402


class AddSub(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, x - y


class ScaleShift(torch.nn.Module):
    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return x * 2 if bias is None else x * 2 + bias


class DictInput(torch.nn.Module):
    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["a"] * inputs["b"]


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.layer(features)


class Positive(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x > 0).to(torch.int64)


def _tensors(kind: str, specs: list[tuple[str, str]], extra: str = "") -> str:
    entries = ", ".join(f'{{ name: "{n}" data_type: {t} dims: [ 4 ]{extra} }}' for n, t in specs)
    return f"{kind} [ {entries} ]\n"


def _write(repo: Path, name: str, module: torch.nn.Module, config: str) -> Path:
    (repo / name / "1").mkdir(parents=True)
    torch.jit.script(module).save(str(repo / name / "1" / "model.pt"))
    (repo / name / "config.pbtxt").write_text(f'platform: "pytorch_libtorch"\n{config}')
    return repo / name


FP32_PAIR = [("INPUT__0", "TYPE_FP32"), ("INPUT__1", "TYPE_FP32")]
ADD_SUB = _tensors("input", FP32_PAIR) + _tensors("output", [("OUTPUT__0", "TYPE_FP32")])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("torch_repo")
    batch = "max_batch_size: 4\n"
    # Listed out of order on purpose: the __<i> suffix, not the config order, picks the position.
    _write(repo, "indexed", AddSub(), batch
           + _tensors("input", [("INPUT__1", "TYPE_FP32"), ("INPUT__0", "TYPE_FP32")])
           + _tensors("output", [("OUTPUT__1", "TYPE_FP32"), ("OUTPUT__0", "TYPE_FP32")]))  # fmt: skip
    # Named like forward()'s arguments but listed in the other order; outputs in config order.
    _write(repo, "by_argument", AddSub(), batch
           + _tensors("input", [("y", "TYPE_FP32"), ("x", "TYPE_FP32")])
           + _tensors("output", [("SUM", "TYPE_FP32"), ("DIFFERENCE", "TYPE_FP32")]))  # fmt: skip
    # Neither argument names nor __<i>: the config's order is forward()'s order.
    _write(repo, "config_order", AddSub(), batch
           + _tensors("input", [("MINUEND", "TYPE_FP32"), ("SUBTRAHEND", "TYPE_FP32")])
           + _tensors("output", [("TOTAL", "TYPE_FP32"), ("REMAINDER", "TYPE_FP32")]))  # fmt: skip
    # Only the second returned value is served.
    _write(repo, "second_output", AddSub(), batch
           + _tensors("input", FP32_PAIR) + _tensors("output", [("OUTPUT__1", "TYPE_FP32")]))  # fmt: skip
    _write(repo, "optional_bias", ScaleShift(), batch
           + 'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] },'
           + ' { name: "bias" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]\n'
           + _tensors("output", [("OUTPUT__0", "TYPE_FP32")]))  # fmt: skip
    _write(repo, "dict_input", DictInput(), batch
           + _tensors("input", [("a", "TYPE_FP32"), ("b", "TYPE_FP32")])
           + _tensors("output", [("product", "TYPE_FP32")]))  # fmt: skip
    _write(repo, "half", AddSub().half(), batch
           + _tensors("input", [("INPUT__0", "TYPE_FP16"), ("INPUT__1", "TYPE_FP16")])
           + _tensors("output", [("OUTPUT__0", "TYPE_FP16"), ("OUTPUT__1", "TYPE_FP16")]))  # fmt: skip
    _write(repo, "any_width", AddSub(), batch
           + 'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] },'
           + ' { name: "INPUT__1" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
           + _tensors("output", [("OUTPUT__0", "TYPE_FP32")]))  # fmt: skip
    # forward() answers INT64: one config says so, the other says FP32.
    positive_in = _tensors("input", [("INPUT__0", "TYPE_FP32")])
    for name, answered in (("positive", "TYPE_INT64"), ("positive_as_float", "TYPE_FP32")):
        _write(repo, name, Positive(), batch + positive_in + _tensors("output", [("OUTPUT__0", answered)]))
    # Refused at load, each with its reason in the repository index.
    _write(repo, "no_dims", AddSub(), 'input [ { name: "INPUT__0" data_type: TYPE_FP32 } ]\n')
    strings = _tensors("input", [("INPUT__0", "TYPE_STRING"), ("INPUT__1", "TYPE_FP32")])
    _write(repo, "strings", AddSub(), strings + _tensors("output", [("OUTPUT__0", "TYPE_FP32")]))
    _write(repo, "third_of_two", AddSub(), _tensors("input", FP32_PAIR)
           + _tensors("output", [("OUTPUT__2", "TYPE_FP32")]))  # fmt: skip
    bad_parameter = 'parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "all" } }\n'
    _write(repo, "bad_threads", AddSub(), ADD_SUB + bad_parameter)
    pickled = _write(repo, "not_torchscript", AddSub(), ADD_SUB)
    torch.save(AddSub().state_dict(), pickled / "1" / "model.pt")
    shutil.copytree(ROOT / "model_repository" / "torch_mlp", repo / "torch_mlp")
    proc = ServerProcess([repo], ["--exit-on-error=false", "--strict-readiness=false"])
    proc.start(tmp_path_factory.mktemp("logs"))
    yield proc
    assert proc.alive(), f"the server died during the tests:\n{proc.log()}"
    proc.stop()


def _infer(server: ServerProcess, model: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    client = httpclient.InferenceServerClient(server.http_url)
    inputs = []
    for name, array in feeds.items():
        datatype = "FP16" if array.dtype == np.float16 else "FP32"
        tensor = httpclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs)
    return {o["name"]: result.as_numpy(o["name"]) for o in result.get_response()["outputs"]}


def _pair(batch: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(batch)
    first, second = rng.standard_normal((2, batch, 4)).astype(np.float32)
    return first, second


def test_indexed_names_pick_argument_and_result_positions(server: ServerProcess) -> None:
    a, b = _pair()
    out = _infer(server, "indexed", {"INPUT__0": a, "INPUT__1": b})
    np.testing.assert_allclose(out["OUTPUT__0"], a + b, rtol=1e-6)
    np.testing.assert_allclose(out["OUTPUT__1"], a - b, rtol=1e-6)  # x = INPUT__0, y = INPUT__1


def test_names_matching_forward_arguments_follow_the_signature(server: ServerProcess) -> None:
    x, y = _pair()
    out = _infer(server, "by_argument", {"x": x, "y": y})
    np.testing.assert_allclose(out["DIFFERENCE"], x - y, rtol=1e-6)  # not y - x, though y is listed first


def test_other_names_follow_the_config_order(server: ServerProcess) -> None:
    a, b = _pair()
    out = _infer(server, "config_order", {"SUBTRAHEND": b, "MINUEND": a})
    np.testing.assert_allclose(out["REMAINDER"], a - b, rtol=1e-6)
    np.testing.assert_allclose(out["TOTAL"], a + b, rtol=1e-6)


def test_a_config_may_serve_only_some_of_the_returned_values(server: ServerProcess) -> None:
    a, b = _pair()
    out = _infer(server, "second_output", {"INPUT__0": a, "INPUT__1": b})
    assert list(out) == ["OUTPUT__1"]
    np.testing.assert_allclose(out["OUTPUT__1"], a - b, rtol=1e-6)


def test_an_optional_input_left_out_takes_the_forward_default(server: ServerProcess) -> None:
    x, bias = _pair()
    np.testing.assert_allclose(_infer(server, "optional_bias", {"x": x})["OUTPUT__0"], x * 2, rtol=1e-6)
    with_bias = _infer(server, "optional_bias", {"x": x, "bias": bias})["OUTPUT__0"]
    np.testing.assert_allclose(with_bias, x * 2 + bias, rtol=1e-6)


def test_a_dict_argument_receives_every_input_by_name(server: ServerProcess) -> None:
    a, b = _pair()
    np.testing.assert_allclose(_infer(server, "dict_input", {"a": a, "b": b})["product"], a * b, rtol=1e-6)


def test_fp16_model(server: ServerProcess) -> None:
    a, b = (x.astype(np.float16) for x in _pair(3))
    out = _infer(server, "half", {"INPUT__0": a, "INPUT__1": b})
    assert out["OUTPUT__0"].dtype == np.float16
    module = torch.jit.script(AddSub().half())
    expected = module(torch.from_numpy(a), torch.from_numpy(b))
    np.testing.assert_array_equal(out["OUTPUT__0"], expected[0].numpy())
    np.testing.assert_array_equal(out["OUTPUT__1"], expected[1].numpy())


def test_the_example_torchscript_model(server: ServerProcess) -> None:
    module = torch.jit.load(str(ROOT / "model_repository" / "torch_mlp" / "1" / "model.pt"))
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    got = _infer(server, "torch_mlp", {"INPUT__0": x})["OUTPUT__0"]
    with torch.inference_mode():
        np.testing.assert_allclose(got, module(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)


def test_a_model_that_fails_answers_with_torchs_reason_and_the_server_stays_up(server: ServerProcess) -> None:
    three, five = np.ones((1, 3), np.float32), np.ones((1, 5), np.float32)
    with pytest.raises(InferenceServerException) as failure:
        _infer(server, "any_width", {"INPUT__0": three, "INPUT__1": five})
    # torch's own last line, not the TorchScript traceback with the server's file paths.
    assert str(failure.value) == (
        "[500] PyTorch execute failure: RuntimeError: The size of tensor a (3) must match the size of "
        "tensor b (5) at non-singleton dimension 1"
    )
    out = _infer(server, "any_width", {"INPUT__0": five, "INPUT__1": five})
    np.testing.assert_array_equal(out["OUTPUT__0"], np.full((1, 5), 2, np.float32))


def test_an_output_of_another_type_than_the_configs_is_refused_not_cast(server: ServerProcess) -> None:
    features = np.array([[-1, 2, 0, 3]], np.float32)
    out = _infer(server, "positive", {"INPUT__0": features})
    assert out["OUTPUT__0"].dtype == np.int64
    np.testing.assert_array_equal(out["OUTPUT__0"], [[0, 1, 0, 1]])
    with pytest.raises(InferenceServerException) as failure:
        _infer(server, "positive_as_float", {"INPUT__0": features})
    # Triton's pytorch backend's words and status: INVALID_ARG.
    assert str(failure.value) == (
        "[400] configuration expects datatype TYPE_FP32 for output 'OUTPUT__0', model provides TYPE_INT64"
    )


@pytest.mark.parametrize(
    ("model", "fragments"),
    [
        (
            "no_dims",
            [
                "config.pbtxt must list every input and output with name, data_type and dims",
                "input 'INPUT__0' has no dims",
                "no outputs listed",
                "forward(x, y) -> Tuple[Tensor, Tensor]: inputs INPUT__0, INPUT__1 (or x, y), "
                "outputs OUTPUT__0, OUTPUT__1",
            ],
        ),
        ("strings", ["input 'INPUT__0': TYPE_STRING (BYTES) tensors cannot reach a TorchScript model"]),
        ("third_of_two", ["output 'OUTPUT__2' is value 2 of what forward() returns", "returns 2 values"]),
        ("bad_threads", ["parameter INTRA_OP_THREAD_COUNT must be a positive integer, got 'all'"]),
        ("not_torchscript", ["torch.jit.load could not read", "torch.jit.script(model).save(path)"]),
    ],
)
def test_configs_torchscript_cannot_serve_are_refused_with_the_reason(
    server: ServerProcess, model: str, fragments: list[str]
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    index = {row["name"]: row for row in client.get_model_repository_index()}
    assert index[model]["state"] == "UNAVAILABLE"
    for fragment in fragments:
        assert fragment in index[model]["reason"]


# In-process: the naming rules as a pure function, and what an instance does with threads and inputs.


def _signature(*names: str, returns: int | None = 1, defaults: tuple[str, ...] = ()) -> ForwardSignature:
    arguments = tuple(ForwardArgument(n, "Tensor", n in defaults) for n in names)
    return ForwardSignature(arguments, returns, f"forward({', '.join(names)})")


def test_forward_argument_names_win_over_index_names_as_in_triton() -> None:
    plan = plan_call(["INPUT__0", "INPUT__1"], [], ["OUT"], _signature("INPUT__1", "INPUT__0"))
    assert (plan.convention, plan.inputs) == ("forward_argument", ("INPUT__1", "INPUT__0"))


def test_index_names_use_what_follows_the_first_double_underscore() -> None:
    plan = plan_call(["B__1", "A__0"], [], ["OUT__0"], _signature("p", "q"))
    assert (plan.convention, plan.inputs) == ("named_index", ("A__0", "B__1"))
    plan = plan_call(["X__Y__0", "Z__1"], [], ["OUT"], _signature("p", "q"))
    assert (plan.convention, plan.inputs) == ("config_order", ("X__Y__0", "Z__1"))


def test_skipping_an_argument_with_a_default_calls_by_keyword() -> None:
    plan = plan_call(["c", "a"], [], ["OUT"], _signature("a", "b", "c", defaults=("b",)))
    assert (plan.inputs, plan.keyword) == (("a", "c"), True)
    assert not plan_call(["a", "b"], [], ["OUT"], _signature("a", "b", "c", defaults=("c",))).keyword


@pytest.mark.parametrize(
    ("inputs", "optional", "outputs", "signature", "fragment"),
    [
        (["IN__0", "IN__2"], [], ["OUT"], _signature("a", "b"), "0..1 once each"),
        (["p", "q", "r"], [], ["OUT"], _signature("a", "b"), "lists 3 inputs but forward(a, b) takes 2"),
        (["IN__0"], [], ["OUT"], _signature("a", "b"), "argument 'b' gets no config input"),
        (["a"], ["a"], ["OUT"], _signature("a"), "input 'a' is optional in the config"),
        (["IN__0"], ["IN__0"], ["OUT"], _signature("a"), "need names that are forward() arguments"),
        (["a"], [], ["OUT__1"], _signature("a", returns=1), "returns 1 value"),
        (
            ["a"],
            [],
            ["OUT"],
            ForwardSignature((ForwardArgument("a", "int", False),), 1, "forward(a)"),
            "argument 'a' is int",
        ),
    ],
)
def test_configs_that_cannot_call_forward_are_refused(
    inputs: list[str], optional: list[str], outputs: list[str], signature: ForwardSignature, fragment: str
) -> None:
    with pytest.raises(ModelConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        plan_call(inputs, optional, outputs, signature)


def test_the_signature_of_scripted_and_traced_modules(tmp_path: Path) -> None:
    scripted = ForwardSignature.of(torch.jit.script(ScaleShift()))
    assert [(a.name, a.type, a.has_default) for a in scripted.arguments or ()] == [
        ("x", "Tensor", False),
        ("bias", "Optional[Tensor]", True),
    ]
    assert scripted.returns == 1
    torch.jit.trace(Linear(), torch.zeros(2, 4)).save(str(tmp_path / "traced.pt"))
    traced = ForwardSignature.of(torch.jit.load(str(tmp_path / "traced.pt")))
    assert [a.name for a in traced.arguments or ()] == ["features"]
    assert ForwardSignature.of(torch.jit.script(AddSub())).returns == 2


def _instance(tmp_path: Path, config_text: str, kind: str = "KIND_CPU") -> TorchScriptInstance:
    model_dir = _write(tmp_path, f"m{len(list(tmp_path.iterdir()))}", AddSub(), config_text)
    config = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    files = ModelFiles(model_dir.name, 1, model_dir, model_dir / "1")
    PyTorchBackend().validate(config, files)
    return PyTorchBackend().create_instance(config, files, InstanceSpec("i_0", kind, 0, 1))


def _threads(count: int) -> str:
    return f'parameters {{ key: "INTRA_OP_THREAD_COUNT" value: {{ string_value: "{count}" }} }}\n' + ADD_SUB


def test_each_instance_runs_with_its_own_thread_count_in_whatever_thread_runs_it(tmp_path: Path) -> None:
    one, two = _instance(tmp_path, _threads(1)), _instance(tmp_path, _threads(2))
    feeds = {"INPUT__0": np.ones(4, np.float32), "INPUT__1": np.ones(4, np.float32)}
    seen: list[int] = []

    def run() -> None:  # one thread, as the event loop is when it runs quick models inline
        for instance in (one, two, one):
            instance.execute(feeds, ["OUTPUT__0"])
            seen.append(torch.get_num_threads())

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert seen == [1, 2, 1]


def test_read_only_inputs_are_copied_not_written_through(tmp_path: Path) -> None:
    instance = _instance(tmp_path, ADD_SUB.replace("OUTPUT__0", "OUTPUT__1"))
    buffer = np.arange(4, dtype=np.float32).tobytes()
    view = np.frombuffer(buffer, dtype=np.float32)  # what a request decoded from the wire looks like
    assert not view.flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when handed a non-writable array
        out = instance.execute({"INPUT__0": view, "INPUT__1": np.ones(4, np.float32)}, ["OUTPUT__1"])
    np.testing.assert_array_equal(out["OUTPUT__1"], np.arange(4) - 1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given where CUDA is missing")
def test_a_gpu_instance_without_cuda_says_so(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="KIND_GPU but this torch sees no CUDA device"):
        _instance(tmp_path, ADD_SUB, "KIND_GPU")
