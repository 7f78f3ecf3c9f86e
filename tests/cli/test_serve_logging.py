"""tritonserver's --log-* flags (where the log goes, its format, what the logging API reports), and
its flags that trt takes without effect."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.support import ROOT, ServerProcess, write_simple


def _logging(server: ServerProcess) -> dict[str, object]:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/logging", timeout=10) as reply:
        return dict(json.loads(reply.read()))


def test_log_file_and_iso8601_format(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    log_file = tmp_path / "trt.log"
    server = ServerProcess([repo], [f"--log-file={log_file}", "--log-format=ISO8601"]).start(tmp_path)
    try:
        settings = _logging(server)
        assert settings["log_file"] == str(log_file)
        assert settings["log_format"] == "ISO8601"
        text = log_file.read_text()
        assert re.search(
            r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ trt\.runtime\] Started HTTPService", text, re.M
        ), text
        assert "Started HTTPService" not in server.log()  # the file took the log, not stderr
    finally:
        server.stop()


def test_level_flags_reach_the_logging_api(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    flags = ["--log-info=false", "--log-warning=false", "--log-verbose=0"]
    server = ServerProcess([repo], flags).start(tmp_path)
    try:
        settings = _logging(server)
        assert (settings["log_info"], settings["log_warning"], settings["log_error"]) == (False, False, True)
        assert "Started HTTPService" not in server.log()
    finally:
        server.stop()


def test_tritonserver_flags_without_effect_are_taken_with_a_warning(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    flags = ["--pinned-memory-pool-byte-size=268435456", "--cuda-memory-pool-byte-size", "0:67108864"]
    server = ServerProcess([repo], flags).start(tmp_path)
    try:
        log = server.log()
        assert "--pinned-memory-pool-byte-size has no effect in trt serve" in log
        assert "--cuda-memory-pool-byte-size has no effect in trt serve" in log
    finally:
        server.stop()
    command = [sys.executable, "-m", "trt", "serve", f"--model-repository={repo}", "--no-such-flag=1"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "no such option: --no-such-flag=1" in result.stdout + result.stderr
