"""Reloads under continuous load: client threads send requests the whole time while the model's config
changes on disk (poll mode) or is pushed through explicit loads; not one request may fail, and the new
config must become the one serving."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.support import SIMPLE_CONFIG, ServerProcess, simple_inputs, write_simple

CLIENT_THREADS = 4


class Traffic:
    """Threads that infer on ``model`` until stopped, counting successes and keeping every failure."""

    def __init__(self, url: str, model: str) -> None:
        self.url, self.model = url, model
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(CLIENT_THREADS)]

    def _run(self) -> None:
        client = httpclient.InferenceServerClient(self.url)
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = simple_inputs(httpclient, data)
        while not self._stop.is_set():
            try:
                result = client.infer(self.model, inputs).as_numpy("OUTPUT0")
                assert result is not None and (result == 2 * data).all(), result
                with self._lock:
                    self.ok += 1
            except Exception as exc:  # every failure is what this test is about
                with self._lock:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
        client.close()  # here: the client's gevent pool cannot be closed from another thread later

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


def _config_with(instances: int, batching: bool) -> str:
    text = SIMPLE_CONFIG.replace("count: 1", f"count: {instances}")
    return text + ("dynamic_batching { max_queue_delay_microseconds: 100 }\n" if batching else "")


def test_poll_mode_reloads_changed_configs_without_failing_a_request(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    model_dir = write_simple(repo)
    server = ServerProcess([repo], ["--model-control-mode=poll", "--repository-poll-secs=0.5"])
    server.start(tmp_path)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        with Traffic(server.http_url, "simple") as traffic:
            for instances, batching in ((2, True), (1, False), (3, True)):
                time.sleep(0.8)
                (model_dir / "config.pbtxt").write_text(_config_with(instances, batching))
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    config = client.get_model_config("simple")
                    if config["instance_group"][0]["count"] == instances:
                        break
                    time.sleep(0.1)
                assert config["instance_group"][0]["count"] == instances, config
                assert ("dynamic_batching" in config) == batching
            time.sleep(0.5)
        assert traffic.failures == [], traffic.failures[:5]
        assert traffic.ok > 100
    finally:
        server.stop()
    assert "loaded 'simple'" in server.log()


def test_explicit_loads_with_new_configs_under_load_fail_no_request(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo)
    server = ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=simple"]).start(tmp_path)
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        with Traffic(server.http_url, "simple") as traffic:
            for instances in (2, 1, 2, 3):
                config = client.get_model_config("simple")
                config["instance_group"] = [{"kind": "KIND_CPU", "count": instances}]
                client.load_model("simple", config=json.dumps(config))
                assert client.get_model_config("simple")["instance_group"][0]["count"] == instances
                time.sleep(0.3)
        assert traffic.failures == [], traffic.failures[:5]
        assert traffic.ok > 100
    finally:
        server.stop()
