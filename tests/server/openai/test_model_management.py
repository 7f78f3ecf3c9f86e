"""Triton's front end loads and unloads models by name in explicit mode (``POST /v1/models/{model}/load``
and ``/unload``); its refusals are 400s in OpenAI's error shape with Triton's words."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import openai

from tests.server.openai.conftest import OpenAIServer
from tests.support import ServerProcess, free_port, write_simple

SPARE = "simple_fp32"  # in the example repository, not loaded by the shared server


def _post(base_url: str, path: str, method: str = "POST") -> tuple[int, dict]:
    body = b"" if method == "POST" else None
    request = urllib.request.Request(f"{base_url}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_model_is_loaded_listed_and_unloaded(openai_server: OpenAIServer, client: openai.OpenAI) -> None:
    assert SPARE not in {model.id for model in client.models.list()}
    status, loaded = _post(openai_server.base_url, f"/v1/models/{SPARE}/load")
    assert status == 200, loaded
    assert (loaded["id"], loaded["object"]) == (SPARE, "model") and loaded["created"] > 0
    assert client.models.retrieve(SPARE).id == SPARE
    status, again = _post(openai_server.base_url, f"/v1/models/{SPARE}/load")
    assert (status, again["error"]["message"]) == (400, f"Model '{SPARE}' is already loaded")
    status, unloaded = _post(openai_server.base_url, f"/v1/models/{SPARE}/unload")
    assert (status, unloaded) == (200, {"status": "success", "model": SPARE})
    assert SPARE not in {model.id for model in client.models.list()}


def test_unknown_models_and_wrong_methods_are_refused(openai_server: OpenAIServer) -> None:
    status, error = _post(openai_server.base_url, "/v1/models/no_such_model/unload")
    assert (status, error["error"]["message"]) == (400, "Unknown model: no_such_model")
    # Triton's core answers a model it cannot find with INTERNAL, which its front end passes on as a 500
    status, error = _post(openai_server.base_url, "/v1/models/no_such_model/load")
    assert status == 500 and error["error"]["message"].startswith(
        "Failed to load model 'no_such_model': failed to load 'no_such_model', failed to poll from"
    )
    status, error = _post(openai_server.base_url, f"/v1/models/{SPARE}/load", method="GET")
    assert status == 405 and error["error"]["code"] == "method_not_allowed"


def test_outside_explicit_mode_nothing_is_loaded_or_unloaded(tmp_path: Path) -> None:
    write_simple(tmp_path / "repo")
    port = free_port()
    flags = ["--allow-openai=true", "--openai-address=127.0.0.1", f"--openai-port={port}"]
    server = ServerProcess([tmp_path / "repo"], flags).start(tmp_path)
    try:
        for action in ("load", "unload"):
            status, error = _post(f"http://127.0.0.1:{port}", f"/v1/models/simple/{action}")
            assert (status, error["error"]["message"]) == (
                400,
                "Model load/unload requires --model-control-mode=explicit",
            )
    finally:
        server.stop()
