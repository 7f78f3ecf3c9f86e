"""scripts/generate_model_repository.py: the example models exist, work, are reproducible and not stale."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

pytest.importorskip("onnx")  # the generator builds models with onnx.helper

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "generate_model_repository.py"
COMMITTED = ROOT / "model_repository"

# Models generated without torch; cnn_onnx needs torch and is checked separately.
BASE_MODELS = ("simple", "simple_fp32", "mlp_onnx")
# Files whose bytes must not depend on when or where the generator ran.
REPRODUCIBLE_FILES = [f"{name}/{leaf}" for name in BASE_MODELS for leaf in ("1/model.onnx", "config.pbtxt")]


def generate(output: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, f"generator failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def generations(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two runs of the generator into two folders, at the same time: each keeps one core busy for
    seconds, and the runs share nothing but the script."""
    first, second = (tmp_path_factory.mktemp(name) / "model_repository" for name in ("generated", "again"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(generate, (first, second)))  # list(): a failed run raises here
    return first, second


@pytest.fixture(scope="module")
def generated(generations: tuple[Path, Path]) -> Path:
    return generations[0]


@pytest.fixture(scope="module")
def generated_again(generations: tuple[Path, Path]) -> Path:
    return generations[1]


def session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", BASE_MODELS)
def test_expected_files_exist(generated: Path, name: str) -> None:
    assert (generated / name / "config.pbtxt").is_file()
    assert (generated / name / "1" / "model.onnx").is_file()
    assert f'name: "{name}"' in (generated / name / "config.pbtxt").read_text()


def test_simple_adds_and_subtracts(generated: Path) -> None:
    sess = session(generated / "simple" / "1" / "model.onnx")
    assert [i.name for i in sess.get_inputs()] == ["INPUT0", "INPUT1"]
    assert all(i.shape == ["batch", 16] and i.type == "tensor(int32)" for i in sess.get_inputs())
    in0 = np.arange(5 * 16, dtype=np.int32).reshape(5, 16)
    in1 = np.full((5, 16), 7, dtype=np.int32)
    out0, out1 = sess.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": in0, "INPUT1": in1})
    assert out0.dtype == np.int32 and out1.dtype == np.int32
    np.testing.assert_array_equal(out0, in0 + in1)
    np.testing.assert_array_equal(out1, in0 - in1)


def test_simple_config_matches_triton_example(generated: Path) -> None:
    config = (generated / "simple" / "config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in config
    assert "max_batch_size: 8" in config
    assert config.count("data_type: TYPE_INT32 dims: [ 16 ]") == 4
    assert "instance_group [ { kind: KIND_CPU count: 1 } ]" in config


def test_mlp_shapes(generated: Path) -> None:
    sess = session(generated / "mlp_onnx" / "1" / "model.onnx")
    (logits,) = sess.run(["OUTPUT0"], {"INPUT0": np.ones((3, 256), dtype=np.float32)})
    assert logits.shape == (3, 10) and logits.dtype == np.float32
    assert (generated / "mlp_onnx" / "1" / "model.onnx").stat().st_size < 4 * 1024 * 1024


@pytest.mark.parametrize("relative", ["simple/1/model.onnx", "mlp_onnx/1/model.onnx"])
def test_generation_is_byte_identical(generated: Path, generated_again: Path, relative: str) -> None:
    assert (generated / relative).read_bytes() == (generated_again / relative).read_bytes()


@pytest.mark.parametrize("relative", REPRODUCIBLE_FILES)
def test_committed_files_are_not_stale(generated: Path, relative: str) -> None:
    committed = COMMITTED / relative
    assert committed.is_file(), f"{committed} is missing: run python scripts/generate_model_repository.py"
    assert committed.read_bytes() == (generated / relative).read_bytes(), (
        f"{committed} differs from a fresh generation: run python scripts/generate_model_repository.py"
    )


def test_cnn_onnx(generated: Path) -> None:
    pytest.importorskip("torch")
    model_dir = generated / "cnn_onnx"
    config = (model_dir / "config.pbtxt").read_text()
    # Minimal on purpose, so the server's auto-complete has to fill in inputs and outputs.
    assert config == 'name: "cnn_onnx"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 32\n'
    model_path = model_dir / "1" / "model.onnx"
    assert model_path.stat().st_size < 1024 * 1024
    sess = session(model_path)
    (inp,) = sess.get_inputs()
    assert (inp.name, inp.shape) == ("input", ["batch", 3, 64, 64])
    assert isinstance(sess.get_outputs()[0].shape[0], str)
    (logits,) = sess.run(["logits"], {"input": np.zeros((4, 3, 64, 64), dtype=np.float32)})
    assert logits.shape == (4, 10) and logits.dtype == np.float32


def test_torch_mlp(generated: Path) -> None:
    torch = pytest.importorskip("torch")
    model_dir = generated / "torch_mlp"
    config = (model_dir / "config.pbtxt").read_text()
    assert config == (COMMITTED / "torch_mlp" / "config.pbtxt").read_text()
    # Triton's TorchScript naming, a batching FP32 model, every tensor listed: PyTorch cannot auto-complete.
    for fragment in (
        'platform: "pytorch_libtorch"',
        "max_batch_size: 32",
        'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 64 ] } ]',
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]',
    ):
        assert fragment in config
    model_path = model_dir / "1" / "model.pt"
    assert model_path.stat().st_size < 1024 * 1024
    fresh = torch.jit.load(str(model_path))
    committed = torch.jit.load(str(COMMITTED / "torch_mlp" / "1" / "model.pt"))
    # Compared by code and weights, not bytes: TorchScript's debug records hold the absolute path of
    # torch's own sources, which differs between installations.
    assert fresh.code == committed.code, "stale torch_mlp: run python scripts/generate_model_repository.py"
    fresh_state, committed_state = fresh.state_dict(), committed.state_dict()
    assert fresh_state.keys() == committed_state.keys()
    for key, tensor in fresh_state.items():
        assert torch.equal(tensor, committed_state[key]), f"stale torch_mlp weights ({key}): regenerate"
    with torch.inference_mode():
        logits = fresh(torch.ones(3, 64))
    assert logits.shape == (3, 10) and logits.dtype == torch.float32


# tiny_llm: what the generator writes (model.py, its engine and config.pbtxt are sources it copies).
TINY_LLM_FILES = [
    f"tiny_llm/1/{name}"
    for name in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    )
]


@pytest.mark.parametrize("relative", TINY_LLM_FILES)
def test_tiny_llm_is_reproducible_and_committed_as_generated(
    generated: Path, generated_again: Path, relative: str
) -> None:
    fresh = (generated / relative).read_bytes()
    assert fresh == (generated_again / relative).read_bytes()
    stale = (
        f"{COMMITTED / relative} differs from a fresh generation: run scripts/generate_model_repository.py"
    )
    assert (COMMITTED / relative).read_bytes() == fresh, stale


def test_tiny_llm_is_small_enough_to_commit_and_complete_where_generated(generated: Path) -> None:
    model_dir = generated / "tiny_llm"
    assert sum(path.stat().st_size for path in model_dir.rglob("*") if path.is_file()) < 2 * 1024 * 1024
    for source in ("config.pbtxt", "1/model.py", "1/tiny_llm_engine.py"):
        assert (model_dir / source).read_bytes() == (COMMITTED / "tiny_llm" / source).read_bytes()
