"""--model-namespacing: two repositories each hold a model called "simple" that computes differently
(a sum in one, a product in the other). Both serve; each repository's ensemble runs its own "simple";
a request naming "simple" is ambiguous and refused, as Triton refuses it."""

from __future__ import annotations

import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from tests.support import (
    SIMPLE_CONFIG,
    ServerProcess,
    int_inputs,
    run_one_step_ensemble,
    save_onnx,
    simple_inputs,
    wait_until,
    write_one_step_ensemble,
    write_simple,
)

AMBIGUOUS = (
    "There are 2 identifiers of model 'simple' in global map, model namespace must be provided to "
    "resolve ambiguity."
)
CACHED = SIMPLE_CONFIG + "response_cache { enable: true }\n"


def _product_model() -> object:
    """The add/sub model's interface, but OUTPUT0 = INPUT0 * INPUT1."""
    shape = ["batch", 16]
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "product",
        [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("OUTPUT0", "OUTPUT1")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _two_repositories(root: Path) -> tuple[Path, Path]:
    sums, products = root / "sums", root / "products"
    write_simple(sums, config=CACHED)
    write_simple(sums, "solo")  # a name only this repository holds
    write_one_step_ensemble(sums, "pipeline_sums", "simple")
    write_simple(products, config=CACHED)
    save_onnx(_product_model(), products / "simple" / "1" / "model.onnx")
    write_one_step_ensemble(products, "pipeline_products", "simple")
    write_one_step_ensemble(products, "pipeline_solo", "solo")  # no "solo" here: the one elsewhere
    return sums, products


@pytest.fixture(scope="module")
def namespaced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path, Path]]:
    root = tmp_path_factory.mktemp("namespaces")
    sums, products = _two_repositories(root)
    flags = ["--model-namespacing=true", "--cache-config=local,size=1048576", "--json"]
    server = ServerProcess([sums, products], flags).start(root)
    try:
        yield server, sums, products
    finally:
        server.stop()


def _run(server: ServerProcess, model: str) -> np.ndarray:
    a, b = int_inputs()
    return run_one_step_ensemble(httpclient.InferenceServerClient(server.http_url), model, a, b * 3)


def test_each_ensemble_runs_the_model_of_its_own_repository(
    namespaced: tuple[ServerProcess, Path, Path],
) -> None:
    server = namespaced[0]
    a, b = int_inputs()
    b = b * 3
    # The same inputs through both: the response cache must tell the two "simple" models apart.
    for _ in range(2):
        assert (_run(server, "pipeline_sums") == a + b).all()
        assert (_run(server, "pipeline_products") == a * b).all()


def test_an_ensemble_step_finds_a_name_only_another_repository_holds(
    namespaced: tuple[ServerProcess, Path, Path],
) -> None:
    a, b = int_inputs()
    assert (_run(namespaced[0], "pipeline_solo") == a + b * 3).all()


def test_a_request_naming_an_ambiguous_model_is_refused_over_http_and_grpc(
    namespaced: tuple[ServerProcess, Path, Path],
) -> None:
    server = namespaced[0]
    a, _ = int_inputs()
    http = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as refused:
        http.infer("simple", simple_inputs(httpclient, a))
    assert refused.value.status() == "400"
    assert AMBIGUOUS in refused.value.message()
    with pytest.raises(InferenceServerException) as metadata:
        http.get_model_metadata("simple")
    assert AMBIGUOUS in metadata.value.message()

    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as grpc_refused:
        grpc.infer("simple", simple_inputs(grpcclient, a))
    assert grpc_refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert AMBIGUOUS in grpc_refused.value.message()
    with pytest.raises(InferenceServerException) as statistics:
        grpc.get_inference_statistics("simple")
    assert AMBIGUOUS in statistics.value.message()
    # A name one repository holds is served as ever.
    assert http.is_model_ready("solo")
    assert http.get_model_metadata("solo")["name"] == "solo"


def test_the_index_lists_the_name_once_per_repository(namespaced: tuple[ServerProcess, Path, Path]) -> None:
    client = httpclient.InferenceServerClient(namespaced[0].http_url)
    rows = [row for row in client.get_model_repository_index() if row["name"] == "simple"]
    assert [(row["version"], row["state"]) for row in rows] == [("1", "READY"), ("1", "READY")]


def test_the_start_up_summary_says_which_repository_each_model_came_from(
    namespaced: tuple[ServerProcess, Path, Path],
) -> None:
    server, sums, products = namespaced
    rows = [row for row in server.json_summary()["models"] if row["name"] == "simple"]
    assert sorted(row["repository"] for row in rows) == sorted([str(sums), str(products)])


def test_model_metrics_are_labelled_with_the_repository(namespaced: tuple[ServerProcess, Path, Path]) -> None:
    server, sums, products = namespaced
    _run(server, "pipeline_sums")
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    success = [line for line in text.splitlines() if line.startswith("nv_inference_request_success{")]
    for repository in (sums, products):
        assert any(f'namespace="{repository}",model="simple",version="1"' in line for line in success), (
            success
        )
    assert any(f'namespace="{sums}",model="solo"' in line for line in success)


def test_explicit_loads_and_unloads_act_in_every_repository(tmp_path: Path) -> None:
    sums, products = _two_repositories(tmp_path)
    flags = ["--model-namespacing=true", "--model-control-mode=explicit", "--load-model=simple"]
    server = ServerProcess([sums, products], flags).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        ready = lambda: sorted(  # noqa: E731
            row["name"] for row in client.get_model_repository_index() if row.get("state") == "READY"
        )
        assert ready() == ["simple", "simple"]
        client.unload_model("simple")
        assert ready() == []
        client.load_model("simple")
        client.load_model("pipeline_products")
        assert ready() == ["pipeline_products", "simple", "simple"]
        a, b = int_inputs()
        assert (_run(server, "pipeline_products") == a * b * 3).all()
    finally:
        server.stop()


def test_without_namespacing_a_name_in_two_repositories_is_not_served(tmp_path: Path) -> None:
    """The default, and Triton's: the ensembles find no unambiguous "simple" either."""
    sums, products = _two_repositories(tmp_path)
    server = ServerProcess([sums, products], ["--exit-on-error=false"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        index = {row["name"]: row for row in client.get_model_repository_index()}
        assert index["simple"]["reason"] == "the name appears in more than one model repository"
        assert client.is_model_ready("solo")
        with pytest.raises(InferenceServerException):
            _run(server, "pipeline_sums")
    finally:
        server.stop()


def test_polling_adds_and_removes_one_repository_s_copy(tmp_path: Path) -> None:
    sums, products = tmp_path / "sums", tmp_path / "products"
    write_simple(sums)
    products.mkdir()
    flags = ["--model-namespacing=true", "--model-control-mode=poll", "--repository-poll-secs=0.3"]
    server = ServerProcess([sums, products], flags).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        states = lambda: [  # noqa: E731
            row.get("state") for row in client.get_model_repository_index() if row["name"] == "simple"
        ]
        assert states() == ["READY"]
        write_simple(products, config=SIMPLE_CONFIG)
        wait_until(lambda: states() == ["READY", "READY"])
        shutil.rmtree(products / "simple")
        wait_until(lambda: sorted(states()) == ["READY", "UNAVAILABLE"])
        assert client.is_model_ready("simple")  # the one left is unambiguous again
    finally:
        server.stop()
