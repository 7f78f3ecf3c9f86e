"""Ensembles and the models their steps run, as Triton's repository manager ties them: an ensemble
serves only while each step's model does; an explicit load of an ensemble loads its steps' models, and
``unload_dependents`` unloads those again; an ensemble a missing model kept out comes back with it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import (
    SIMPLE_CONFIG,
    ServerProcess,
    int_inputs,
    run_one_step_ensemble,
    wait_until,
    write_broken,
    write_one_step_ensemble,
    write_simple,
)
from trt.server.core.models.config import parse_config_text
from trt.server.core.models.dependencies import tensor_problem
from trt.server.core.models.table import ModelKey, ModelTable


def _states(client: httpclient.InferenceServerClient) -> dict[str, tuple[str, str]]:
    return {
        row["name"]: (row.get("state", ""), row.get("reason", ""))
        for row in client.get_model_repository_index()
    }


def _run(client: httpclient.InferenceServerClient, model: str) -> np.ndarray:
    return run_one_step_ensemble(client, model, *int_inputs())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("dependencies")
    write_simple(repo)
    write_one_step_ensemble(repo, "pipeline", "simple")
    write_broken(repo)
    write_one_step_ensemble(repo, "over_broken", "broken_config")
    write_one_step_ensemble(repo, "over_version_2", "simple")
    config = repo / "over_version_2" / "config.pbtxt"
    config.write_text(
        config.read_text().replace('model_name: "simple"', 'model_name: "simple" model_version: 2')
    )
    write_one_step_ensemble(repo, "mistyped", "simple")
    mistyped = repo / "mistyped" / "config.pbtxt"
    mistyped.write_text(mistyped.read_text().replace('"A" data_type: TYPE_INT32', '"A" data_type: TYPE_FP32'))
    server = ServerProcess([repo], ["--model-control-mode=explicit"]).start(repo)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_url)
    yield client
    for name in ("pipeline", "simple"):  # each test starts from nothing loaded
        client.unload_model(name)
    client.close()


def test_loading_an_ensemble_loads_its_steps_model_and_unload_dependents_unloads_it(
    client: httpclient.InferenceServerClient,
) -> None:
    client.load_model("pipeline")
    assert _states(client)["simple"][0] == "READY"
    a, b = int_inputs()
    assert (_run(client, "pipeline") == a + b).all()
    client.unload_model("pipeline", unload_dependents=True)
    assert not client.is_model_ready("simple")
    # UNLOADING until its instances are released in the background, as in Triton.
    wait_until(lambda: _states(client)["simple"] == ("UNAVAILABLE", "unloaded"))
    # A model loaded by name stays when the ensemble goes, with or without unload_dependents.
    client.load_model("simple")
    client.load_model("pipeline")
    client.unload_model("pipeline", unload_dependents=True)
    assert _states(client)["simple"][0] == "READY"


def test_unload_dependents_over_grpc(server: ServerProcess, client: httpclient.InferenceServerClient) -> None:
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    grpc.load_model("pipeline")
    assert grpc.is_model_ready("simple")
    grpc.unload_model("pipeline", unload_dependents=True)
    assert not grpc.is_model_ready("simple")
    grpc.close()


def test_without_unload_dependents_the_steps_model_stays(client: httpclient.InferenceServerClient) -> None:
    client.load_model("pipeline")
    client.unload_model("pipeline")
    assert _states(client)["simple"][0] == "READY"


def test_loading_a_name_no_repository_holds_adds_nothing_to_the_index(
    client: httpclient.InferenceServerClient,
) -> None:
    before = client.get_model_repository_index()
    with pytest.raises(InferenceServerException, match="no model folder named 'nowhere'"):
        client.load_model("nowhere")
    assert client.get_model_repository_index() == before


def test_an_ensemble_is_not_served_while_a_steps_model_fails_to_load(
    client: httpclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("over_broken")
    message = refused.value.message()
    assert "ensemble 'over_broken' depends on 'broken_config' which has no loaded version." in message
    assert "Model 'broken_config' loading failed with error:" in message
    assert _states(client)["over_broken"][0] == "UNAVAILABLE"


def test_an_ensemble_naming_a_version_that_is_not_loaded_is_refused_over_grpc(
    server: ServerProcess, client: httpclient.InferenceServerClient
) -> None:
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as refused:
        grpc.load_model("over_version_2")
    assert "ensemble 'over_version_2' depends on 'simple' whose required version 2 is not loaded." in (
        refused.value.message()
    )
    assert _states(client)["simple"][0] == "READY"  # loaded for it, and left: the version was missing


def test_at_start_up_an_ensemble_over_a_missing_model_is_not_served(tmp_path: Path) -> None:
    write_simple(tmp_path)
    write_one_step_ensemble(tmp_path, "pipeline", "simple")
    write_one_step_ensemble(tmp_path, "over_nothing", "not_in_repository")
    server = ServerProcess([tmp_path], ["--exit-on-error=false"]).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        states = _states(client)
        assert states["over_nothing"] == (
            "UNAVAILABLE",
            "ensemble over_nothing contains models that are not available or ambiguous: not_in_repository",
        )
        assert states["pipeline"][0] == "READY"
        assert not client.is_server_ready()  # strict readiness counts the ensemble that failed
    finally:
        server.stop()


def test_unloading_a_steps_model_unloads_the_ensemble_until_it_is_back(tmp_path: Path) -> None:
    """Started with --load-model=pipeline alone, which loads simple with it; the server stays ready
    while the ensemble waits, as after any unload."""
    write_simple(tmp_path)
    write_one_step_ensemble(tmp_path, "pipeline", "simple")
    flags = ["--model-control-mode=explicit", "--load-model=pipeline"]
    server = ServerProcess([tmp_path], flags).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        assert _states(client)["simple"][0] == "READY"
        client.unload_model("simple")
        assert not client.is_model_ready("pipeline")
        wait_until(
            lambda: (
                _states(client)["pipeline"]
                == ("UNAVAILABLE", "ensemble 'pipeline' depends on 'simple' which has no loaded version.")
            )
        )
        with pytest.raises(InferenceServerException, match="no available versions"):
            _run(client, "pipeline")
        assert client.is_server_ready()
        client.load_model("simple")
        assert client.is_model_ready("pipeline")
        a, b = int_inputs()
        assert (_run(client, "pipeline") == a + b).all()
    finally:
        server.stop()


def _ensemble_config(tensor_type: str = "TYPE_INT32", dims: str = "[ 16 ]", max_batch_size: int = 8) -> str:
    return (
        f'name: "e"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
        f'input [ {{ name: "A" data_type: {tensor_type} dims: {dims} }}, '
        '{ name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
        'ensemble_scheduling { step [ { model_name: "simple" input_map { key: "INPUT0" value: "A" } '
        'input_map { key: "INPUT1" value: "B" } output_map { key: "OUTPUT0" value: "OUT" } } ] }\n'
    )


def _problem(ensemble: str, step: str = SIMPLE_CONFIG) -> str | None:
    table = ModelTable()
    table.add(ModelKey("", "simple")).config = parse_config_text(step)
    return tensor_problem(ModelKey("", "e"), parse_config_text(ensemble), table)


def test_an_ensemble_that_fits_its_steps_model_has_no_tensor_problem() -> None:
    assert _problem(_ensemble_config()) is None
    # -1 matches any size; a model without batching may spell out the batch dimension
    assert _problem(_ensemble_config(dims="[ -1 ]")) is None
    unbatched = _ensemble_config(dims="[ -1, 16 ]", max_batch_size=0)
    assert _problem(unbatched.replace("dims: [ 16 ]", "dims: [ -1, 16 ]")) is None


def test_tensor_problems_are_named_in_tritons_words() -> None:
    assert _problem(_ensemble_config("TYPE_FP32")) == (
        "in ensemble e, ensemble tensor A: inconsistent data type: TYPE_FP32 is inferred from model e "
        "while TYPE_INT32 is inferred from model simple"
    )
    assert _problem(_ensemble_config(dims="[ 8 ]")) == (
        "in ensemble e, ensemble tensor A: inconsistent shape: [-1,8] is inferred from model e while "
        "[-1,16] is inferred from model simple"
    )
    assert _problem(_ensemble_config(max_batch_size=16)) == (
        "ensemble e allows maximum batch size 16, but it contains model simple which only allows "
        "maximum batch size to be 8"
    )
    assert _problem(_ensemble_config().replace('key: "INPUT1"', 'key: "INPUT9"')) == (
        "in ensemble e, ensemble tensor B is mapping to non-existing input INPUT9 in model simple"
    )
    unfed = _ensemble_config().replace('input_map { key: "INPUT1" value: "B" } ', "")
    assert (
        _problem(unfed) == "in ensemble e, input INPUT1 in model simple is not mapped to any ensemble tensors"
    )
    assert _problem(_ensemble_config().replace('key: "OUTPUT0"', 'key: "OUTPUT7"')) == (
        "in ensemble e, ensemble tensor OUT is mapped from non-existing output OUTPUT7 in model simple"
    )


def test_an_ensemble_at_odds_with_its_steps_model_is_refused_at_load(
    client: httpclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("mistyped")
    assert "in ensemble mistyped, ensemble tensor A: inconsistent data type: TYPE_FP32" in (
        refused.value.message()
    )
    assert _states(client)["mistyped"][0] == "UNAVAILABLE"


def test_in_poll_mode_an_ensemble_follows_its_steps_model_out_of_the_repository_and_back(
    tmp_path: Path,
) -> None:
    write_simple(tmp_path)
    write_one_step_ensemble(tmp_path, "pipeline", "simple")
    flags = ["--model-control-mode=poll", "--repository-poll-secs=0.3"]
    server = ServerProcess([tmp_path], flags).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_model_ready("pipeline")
        shutil.move(tmp_path / "simple", tmp_path / ".simple")  # hidden folders are not models
        wait_until(lambda: _states(client)["pipeline"][0] == "UNAVAILABLE")
        assert "depends on 'simple' which has no loaded version" in _states(client)["pipeline"][1]
        shutil.move(tmp_path / ".simple", tmp_path / "simple")  # back as it was: loaded again
        wait_until(lambda: client.is_model_ready("pipeline"))
        assert client.is_model_ready("simple")
        a, b = int_inputs()
        assert (_run(client, "pipeline") == a + b).all()
    finally:
        server.stop()
