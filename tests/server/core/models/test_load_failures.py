"""A load request that fails answers in Triton's words and codes (its L0_lifecycle tests match on
``load failed for model '<m>'`` and ``failed to load '<m>', failed to poll from model repository``),
compared side by side with Triton 2.51; an unload of a name the server does not know succeeds, as
Triton's does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.server.backends.python.python_models import DOUBLES, ONE_NUMBER
from tests.support import ServerProcess, write_python_model


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("repo")
    write_python_model(
        repo, "broken", "raise RuntimeError('cannot import')\n", 'backend: "python"\n' + ONE_NUMBER
    )
    write_python_model(repo, "badcfg", DOUBLES, 'backend: "python"\nmax_batch_size: oops\n')
    (repo / "noversion").mkdir()
    (repo / "noversion" / "config.pbtxt").write_text('backend: "python"\n' + ONE_NUMBER)
    (repo / "nofile" / "1").mkdir(parents=True)
    (repo / "nofile" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n' + ONE_NUMBER)
    proc = ServerProcess([repo], ["--model-control-mode=explicit"]).start(tmp_path_factory.mktemp("logs"))
    proc.repo = repo  # type: ignore[attr-defined]
    yield proc
    proc.stop()


BAD_ARGUMENT = ("400", "StatusCode.INVALID_ARGUMENT")
INTERNAL = ("500", "StatusCode.INTERNAL")
POLL_FAILED = "failed to poll from model repository"
CASES = [
    ("broken", BAD_ARGUMENT, "load failed for model 'broken': version 1 is at UNAVAILABLE state: "),
    (
        "noversion",
        BAD_ARGUMENT,
        "load failed for model 'noversion': at least one version must be available under the version "
        "policy of model 'noversion'",
    ),
    ("badcfg", INTERNAL, f"failed to load 'badcfg', {POLL_FAILED}: "),
    ("missing", INTERNAL, f"failed to load 'missing', {POLL_FAILED}"),
]


@pytest.mark.parametrize(("model", "codes", "words"), CASES, ids=[case[0] for case in CASES])
@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_failed_load_is_answered_in_tritons_words(
    server: ServerProcess, module: object, model: str, codes: tuple[str, str], words: str
) -> None:
    url = server.http_url if module is httpclient else server.grpc_url
    client = module.InferenceServerClient(url)  # type: ignore[attr-defined]
    with pytest.raises(InferenceServerException) as info:
        client.load_model(model)
    assert info.value.status() == codes[0 if module is httpclient else 1]
    assert info.value.message().startswith(words), info.value.message()


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ("badcfg", "badcfg/config.pbtxt"),
        ("nofile", "model file not found: nofile/1/model.onnx"),
        ("missing", "no model folder named 'missing' in the model repository"),
    ],
)
def test_a_failed_load_names_the_models_files_not_where_the_server_keeps_them(
    server: ServerProcess, model: str, words: str
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        client.load_model(model)
    repo = str(server.repo)  # type: ignore[attr-defined]
    assert words in info.value.message()
    assert repo not in info.value.message()
    reasons = [row.get("reason", "") for row in client.get_model_repository_index()]
    assert not [reason for reason in reasons if repo in reason]
    assert repo in server.log()  # the operator's log still says where


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_unloading_a_name_the_server_does_not_know_succeeds(server: ServerProcess, module: object) -> None:
    url = server.http_url if module is httpclient else server.grpc_url
    module.InferenceServerClient(url).unload_model("no_such_model")  # type: ignore[attr-defined]


# Triton's L0_input_validation cases, which match on these texts.
TRAVERSALS = ["../etc", "a/../b", "../../etc/passwd", "model/..", "..", "/etc/passwd", "model/", " ..", ".. "]
BLANKS = ["", " ", "   ", "\t", "\n", " \t \n "]


@pytest.mark.parametrize("name", TRAVERSALS)
def test_a_name_that_would_leave_the_repository_is_refused_in_tritons_words(
    server: ServerProcess, name: str
) -> None:
    with pytest.raises(InferenceServerException) as info:
        grpcclient.InferenceServerClient(server.grpc_url).load_model(name)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "model name must not contain path traversal characters" in info.value.message()


@pytest.mark.parametrize("name", BLANKS)
def test_an_empty_or_blank_name_is_refused_in_tritons_words(server: ServerProcess, name: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        grpcclient.InferenceServerClient(server.grpc_url).load_model(name)
    assert info.value.message() == "Model name cannot be empty. Please enter a valid name to deploy."
