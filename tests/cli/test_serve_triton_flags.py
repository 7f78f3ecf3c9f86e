"""tritonserver flags a launch script may carry beyond trt's own options: its deprecated ones (taken as
the flags that replaced them), --model-config-name, --reuse-http-port, and those without effect here."""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path

import pytest
import typer

from tests.support import ServerProcess, write_simple
from trt.cli.flags import parse_model_config_name, triton_only_flags


def _get(server: ServerProcess, path: str) -> dict:
    with urllib.request.urlopen(f"http://{server.http_url}{path}", timeout=10) as reply:
        return dict(json.loads(reply.read()))


def test_deprecated_flags_become_the_flags_that_replaced_them() -> None:
    flags = triton_only_flags(
        ["--trace-rate", "5", "--trace-level=TIMESTAMPS", "--trace-file=/tmp/t.json",
         "--response-cache-byte-size=1024", "--host-policy", "gpu_0,numa-node=0"]
    )  # fmt: skip
    assert flags.values_of("--trace-config") == ["rate=5", "level=TIMESTAMPS", "triton,file=/tmp/t.json"]
    assert flags.values_of("--cache-config") == ["local,size=1024"]
    assert [flag for flag, _ in flags.ignored] == ["--host-policy"]
    with pytest.raises(typer.BadParameter, match="no such option: --trace-sideways=1"):
        triton_only_flags(["--trace-sideways=1"])


@pytest.mark.parametrize("name", ["", "h100", "a100_80gb", "v1.2"])
def test_a_config_name_is_a_file_name(name: str) -> None:
    assert parse_model_config_name(name) == name


@pytest.mark.parametrize("name", ["h 100", "../config", "configs/h100", "..", "a\\b"])
def test_a_config_name_with_spaces_or_a_way_out_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="--model-config-name"):
        parse_model_config_name(name)


def test_a_launch_script_of_tritonserver_flags_serves_as_it_says(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "tuned")
    (repo / "tuned" / "configs").mkdir()
    # the config for this hardware: a smaller batch, picked by --model-config-name=small
    tuned = (repo / "tuned" / "config.pbtxt").read_text().replace("max_batch_size: 8", "max_batch_size: 2")
    (repo / "tuned" / "configs" / "small.pbtxt").write_text(tuned)
    write_simple(repo, "plain")  # no configs/small.pbtxt: its config.pbtxt
    flags = [
        "--model-config-name=small", "--reuse-http-port=true",
        "--trace-file", str(tmp_path / "trace.json"), "--trace-level=TIMESTAMPS", "--trace-rate=7",
        "--trace-config=rate=3", "--trace-count=11", "--response-cache-byte-size=4096",
        "--buffer-manager-thread-count=2", "--host-policy=gpu_0,numa-node=0",
        "--metrics-config=summary_latencies=true",
    ]  # fmt: skip
    server = ServerProcess([repo], flags).start(tmp_path)
    try:
        assert _get(server, "/v2/models/tuned/config")["max_batch_size"] == 2
        assert _get(server, "/v2/models/plain/config")["max_batch_size"] == 8
        trace = _get(server, "/v2/trace/setting")
        # --trace-config's rate wins over the deprecated --trace-rate, as in Triton
        assert (trace["trace_rate"], trace["trace_count"], trace["trace_level"]) == (
            "3",
            "11",
            ["TIMESTAMPS"],
        )
        assert trace["trace_file"] == str(tmp_path / "trace.json")
        log = server.log()
        assert "--trace-rate is deprecated in tritonserver: taken as --trace-config=rate=7" in log
        assert "--response-cache-byte-size is deprecated in tritonserver: taken as --cache-config" in log
        for flag in ("--buffer-manager-thread-count", "--host-policy"):
            assert f"{flag} has no effect in trt serve" in log
        # SO_REUSEPORT on the HTTP socket: another listener may bind the port beside it
        with socket.socket() as beside:
            beside.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            beside.bind(("127.0.0.1", server.http_port))
    finally:
        server.stop()
