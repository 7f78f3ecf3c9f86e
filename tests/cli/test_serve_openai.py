"""`trt serve`'s flags for the OpenAI front end: off unless asked, on its own port (9000 by default, as
Triton's), its restrictions and files checked before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.support import ROOT, ServerProcess, free_port, write_simple


def _serve(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trt", "serve", "--model-repository=model_repository", *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "COLUMNS": "400"},  # rich wraps the usage error to the terminal's width
    )  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (
            "--openai-restricted-api=inference,shared-memory:key=value",
            "unknown category 'shared-memory' (categories: inference, model-repository, metrics, health)",
        ),
        ("--tokenizer=/no/such/tokenizer", "--tokenizer: /no/such/tokenizer does not exist"),
        ("--allow-openai=perhaps", "--allow-openai takes true or false"),
    ],
)
def test_bad_openai_flags_stop_the_server_before_it_starts(flag: str, message: str) -> None:
    result = _serve(flag)
    assert result.returncode == 2
    assert message in result.stderr + result.stdout


def test_the_summary_lists_the_openai_endpoint_which_lists_the_models(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    port = free_port()
    proc = ServerProcess(
        [repo], ["--json", "--allow-openai=true", "--openai-address=127.0.0.1", f"--openai-port={port}"]
    ).start(tmp_path)
    try:
        summary = proc.json_summary()
        assert summary["endpoints"]["openai"] == f"127.0.0.1:{port}"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as reply:
            assert [model["id"] for model in json.loads(reply.read())["data"]] == ["simple"]
    finally:
        proc.stop()


def test_the_openai_front_end_is_off_by_default(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    proc = ServerProcess([repo], ["--json"]).start(tmp_path)
    try:
        summary = proc.json_summary()
        assert "openai" not in summary["endpoints"]
    finally:
        proc.stop()
