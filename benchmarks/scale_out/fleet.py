"""The drill's fleet, every part a real process on 127.0.0.1: moto's S3 server holding one model
repository, N ``trt serve`` replicas reading it, nginx balancing HTTP (``proxy_pass``) and gRPC
(``grpc_pass``) over them, and Prometheus scraping them with deploy/prometheus/trt-rules.yml."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from _common import free_port

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "trt-rules.yml"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "drill",
    "AWS_SECRET_ACCESS_KEY": "drill",
    "AWS_DEFAULT_REGION": "us-east-1",
}
BUCKET = "drill-models"

# A model whose requests queue: one instance, 10 ms per execution, no batching. Under load the time a
# request waits for the instance grows with the clients per replica, which is the autoscaling signal.
SLOW_MODEL = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            time.sleep(0.010)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""
SLOW_CONFIG = """
name: "slow"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


def wait_until(check: object, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up in {timeout:.0f} s")


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@dataclass
class ObjectStore:
    """moto's S3 server, with the repository uploaded: the example ``simple`` model and ``slow``."""

    work: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = (self.work / "moto.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=log,
        )
        wait_until(lambda: http_status(self.endpoint) < 500, "moto", 60)
        import boto3

        s3 = boto3.client("s3", endpoint_url=self.endpoint, **_boto_credentials())
        s3.create_bucket(Bucket=BUCKET)
        simple = ROOT / "model_repository" / "simple"
        for path in sorted(p for p in simple.rglob("*") if p.is_file()):
            s3.upload_file(str(path), BUCKET, f"repo/simple/{path.relative_to(simple)}")
        s3.put_object(Bucket=BUCKET, Key="repo/slow/config.pbtxt", Body=SLOW_CONFIG.encode())
        s3.put_object(Bucket=BUCKET, Key="repo/slow/1/model.py", Body=SLOW_MODEL.encode())

    def stop(self) -> None:
        _stop(self.process)


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }


@dataclass
class Replica:
    """One ``trt serve`` on its own loopback ports and its own cache of the S3 repository (as a pod)."""

    index: int
    work: Path
    s3_endpoint: str
    http_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def name(self) -> str:
        return f"trt-{self.index}"

    def start(self) -> None:
        self.starts += 1
        cache = self.work / f"{self.name}-cache-{self.starts}"  # a new pod starts with an empty cache
        log = (self.work / f"{self.name}-{self.starts}.log").open("wb")
        env = {**os.environ, **CREDENTIALS, "AWS_ENDPOINT_URL": self.s3_endpoint, "TRT_CACHE_DIR": str(cache)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trt", "serve", f"--model-repository=s3://{BUCKET}/repo",
             "--http-address=127.0.0.1", f"--http-port={self.http_port}", "--grpc-address=127.0.0.1",
             f"--grpc-port={self.grpc_port}", f"--metrics-port={self.metrics_port}", "--exit-timeout-secs=15",
             "--log-verbose=0"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def wait_ready(self, timeout: float = 120) -> None:
        def ready() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}")
            return http_status(f"http://127.0.0.1:{self.http_port}/v2/health/ready") == 200

        wait_until(ready, self.name, timeout)

    def terminate(self, timeout: float = 30) -> float:
        """SIGTERM, as Kubernetes stops a pod: trt drains, then exits. Returns the seconds it took."""
        started = time.monotonic()
        _stop(self.process, timeout)
        return time.monotonic() - started

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


def _stop(process: subprocess.Popen[bytes] | None, timeout: float = 30) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class Balancer:
    """nginx in front of the replicas: HTTP/1.1 with upstream keep-alive, gRPC over HTTP/2 with
    ``grpc_pass``. Each answer names the replica that served it (``X-Upstream``).

    ``retry`` lets nginx pass an inference (a POST, which nginx does not retry by default) to the next
    replica when the one it picked failed at the connection: refused, or closed before any answer."""

    work: Path
    http_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def configure(self, replicas: list[Replica], retry: bool, down: frozenset[int] = frozenset()) -> None:
        def servers(port_of: str) -> str:
            return "\n".join(
                f"    server 127.0.0.1:{getattr(r, port_of)} max_fails=1 fail_timeout=5s"
                + (" down;" if r.index in down else ";")
                for r in replicas
            )

        retries = "error timeout non_idempotent" if retry else "error timeout"

        temp = self.work / "nginx-temp"
        temp.mkdir(exist_ok=True)
        (self.work / "nginx.conf").write_text(f"""
worker_processes 1;
pid {self.work / "nginx.pid"};
error_log {self.work / "nginx-error.log"} warn;
events {{ worker_connections 2048; }}
http {{
  access_log off;
  client_body_temp_path {temp}/body;
  proxy_temp_path {temp}/proxy;
  fastcgi_temp_path {temp}/fastcgi;
  uwsgi_temp_path {temp}/uwsgi;
  scgi_temp_path {temp}/scgi;
  upstream trt_http {{
{servers("http_port")}
    keepalive 64;
  }}
  upstream trt_grpc {{
{servers("grpc_port")}
    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{self.http_port};
    location / {{
      proxy_pass http://trt_http;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      add_header X-Upstream $upstream_addr always;
      proxy_next_upstream {retries};
    }}
  }}
  server {{
    listen 127.0.0.1:{self.grpc_port} http2;
    location / {{
      grpc_pass grpc://trt_grpc;
      grpc_next_upstream {retries};
    }}
  }}
}}
""")

    def start(self, replicas: list[Replica]) -> None:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.configure(replicas, retry=False)
        log = (self.work / "nginx.log").open("wb")
        self.process = subprocess.Popen(
            [nginx, "-p", str(self.work), "-c", str(self.work / "nginx.conf"), "-g", "daemon off;"],
            stdout=log, stderr=log,
        )  # fmt: skip
        wait_until(
            lambda: http_status(f"http://127.0.0.1:{self.http_port}/v2/health/ready") == 200, "nginx", 30
        )

    def reload(self, replicas: list[Replica], retry: bool, down: frozenset[int] = frozenset()) -> None:
        """New configuration. New workers take the new connections; the old ones finish the requests
        they hold, then close (idle keep-alive connections of clients too)."""
        self.configure(replicas, retry, down)
        assert self.process is not None
        self.process.send_signal(signal.SIGHUP)
        time.sleep(1.0)  # the new workers take over

    def stop(self) -> None:
        _stop(self.process)


@dataclass
class Prometheus:
    """A real Prometheus scraping every replica each second, evaluating the autoscaler's rule file.

    Each target carries the labels a ServiceMonitor gives a pod (``namespace``, ``pod``), so the rule
    is the one the cluster runs, unchanged."""

    work: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def start(self, replicas: list[Replica]) -> None:
        shutil.copy(RULES, self.work / "trt-rules.yml")
        targets = "\n".join(
            f"      - targets: ['127.0.0.1:{r.metrics_port}']\n"
            f"        labels: {{namespace: drill, pod: {r.name}}}"
            for r in replicas
        )
        (self.work / "prometheus.yml").write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 5s
rule_files: [trt-rules.yml]
scrape_configs:
  - job_name: trt
    static_configs:
{targets}
""")
        log = (self.work / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [shutil.which("prometheus") or "/usr/bin/prometheus",
             f"--config.file={self.work / 'prometheus.yml'}", f"--storage.tsdb.path={self.work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=log, stderr=log,
        )  # fmt: skip
        wait_until(lambda: http_status(f"http://127.0.0.1:{self.port}/-/ready") == 200, "prometheus", 60)

    def query(self, expression: str) -> list[tuple[dict[str, str], float]]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        with urllib.request.urlopen(url, timeout=5) as reply:
            data = json.loads(reply.read())["data"]["result"]
        return [(item["metric"], float(item["value"][1])) for item in data]

    def stop(self) -> None:
        _stop(self.process)
