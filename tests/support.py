"""Test support: ONNX models built on the fly, and ``trt serve`` running as a real process."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import psutil
from onnx import TensorProto, helper

if TYPE_CHECKING:
    from trt.server.core.server import InferenceServer

ROOT = Path(__file__).resolve().parents[1]

# Every dtype the identity model carries, as (wire name, ONNX type, config type).
DTYPES = [
    ("BOOL", TensorProto.BOOL, "TYPE_BOOL"),
    ("UINT8", TensorProto.UINT8, "TYPE_UINT8"),
    ("UINT16", TensorProto.UINT16, "TYPE_UINT16"),
    ("UINT32", TensorProto.UINT32, "TYPE_UINT32"),
    ("UINT64", TensorProto.UINT64, "TYPE_UINT64"),
    ("INT8", TensorProto.INT8, "TYPE_INT8"),
    ("INT16", TensorProto.INT16, "TYPE_INT16"),
    ("INT32", TensorProto.INT32, "TYPE_INT32"),
    ("INT64", TensorProto.INT64, "TYPE_INT64"),
    ("FP16", TensorProto.FLOAT16, "TYPE_FP16"),
    ("FP32", TensorProto.FLOAT, "TYPE_FP32"),
    ("FP64", TensorProto.DOUBLE, "TYPE_FP64"),
    ("BYTES", TensorProto.STRING, "TYPE_STRING"),
]


def save_onnx(model: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def add_sub_model(elem_type: int = TensorProto.INT32, width: int = 16) -> object:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, batch dimension dynamic."""
    shape = ["batch", width]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "add_sub",
        [helper.make_tensor_value_info(n, elem_type, shape) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, elem_type, shape) for n in ("OUTPUT0", "OUTPUT1")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def identity_model() -> object:
    """One Identity per dtype: IN_<DT> -> OUT_<DT>, shape [batch, n]."""
    nodes = [helper.make_node("Identity", [f"IN_{n}"], [f"OUT_{n}"]) for n, _, _ in DTYPES]
    graph = helper.make_graph(
        nodes,
        "identity_all",
        [helper.make_tensor_value_info(f"IN_{n}", t, ["batch", "n"]) for n, t, _ in DTYPES],
        [helper.make_tensor_value_info(f"OUT_{n}", t, ["batch", "n"]) for n, t, _ in DTYPES],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


SIMPLE_CONFIG = """
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] label_filename: "labels.txt" },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


def write_simple(
    repo: Path, name: str = "simple", config: str | None = SIMPLE_CONFIG, versions: tuple[int, ...] = (1,)
) -> Path:
    model_dir = repo / name
    for version in versions:
        save_onnx(add_sub_model(), model_dir / str(version) / "model.onnx")
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config.replace('name: "simple"', f'name: "{name}"'))
    (model_dir / "labels.txt").write_text("\n".join(f"label{i}" for i in range(16)) + "\n")
    return model_dir


# A Python model whose execute() never returns, and its config: one FP32 X of one element, echoed.
STUCK_PYTHON_MODEL = """
import time


class TritonPythonModel:
    def execute(self, requests):
        while True:
            time.sleep(1)
"""

ECHO_X_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def send_x_ignoring_errors(url: str, model: str) -> None:
    """One request to a model of ``ECHO_X_CONFIG``'s shape over HTTP; its answer or error (the server
    stopped or killed under it) ignored."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url, network_timeout=120)
    tensor = httpclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.ones(1, np.float32))
    try:
        client.infer(model, [tensor])
    except Exception:
        pass


def write_python_model(repo: Path, name: str, source: str, config: str) -> None:
    """A Python model in ``repo``: ``<name>/1/model.py`` and ``<name>/config.pbtxt``."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(source)
    (repo / name / "config.pbtxt").write_text(config)


def write_one_step_ensemble(repo: Path, name: str, step_model: str) -> None:
    """An ensemble ``name`` of one step: ``step_model`` (the add/sub interface) on inputs A and B,
    its OUTPUT0 as OUT."""
    (repo / name / "1").mkdir(parents=True)
    tensors = (
        '{ name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] }'
    )
    step = (
        f'model_name: "{step_model}" input_map {{ key: "INPUT0" value: "A" }} '
        'input_map { key: "INPUT1" value: "B" } output_map { key: "OUTPUT0" value: "OUT" }'
    )
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\ninput [ {tensors} ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
        f"ensemble_scheduling {{ step [ {{ {step} }} ] }}\n"
    )


def run_one_step_ensemble(client: Any, model: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """OUT of ``write_one_step_ensemble``'s ensemble ``model`` for inputs A and B (tritonclient.http)."""
    import tritonclient.http as httpclient

    inputs = [httpclient.InferInput(name, list(a.shape), "INT32") for name in ("A", "B")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer(model, inputs).as_numpy("OUT")
    assert result is not None
    return result


def collect_stream(client: Any) -> queue.Queue[tuple[Any, Any]]:
    """Open ``client``'s gRPC stream (tritonclient.grpc); every (result, error) lands in the queue."""
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: received.put((result, error)))
    return received


def write_identity(repo: Path) -> Path:
    model_dir = repo / "identity_all"
    save_onnx(identity_model(), model_dir / "1" / "model.onnx")
    tensors = lambda prefix: ",\n".join(  # noqa: E731
        f'  {{ name: "{prefix}_{n}" data_type: {c} dims: [ -1 ] }}' for n, _, c in DTYPES
    )
    (model_dir / "config.pbtxt").write_text(
        f'name: "identity_all"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        f"input [\n{tensors('IN')}\n]\noutput [\n{tensors('OUT')}\n]\n"
    )
    return model_dir


def write_autocomplete(repo: Path) -> Path:
    """An add/sub FP32 model with no config.pbtxt at all: everything comes from auto-complete."""
    model_dir = repo / "autocomplete_fp32"
    save_onnx(add_sub_model(TensorProto.FLOAT, 4), model_dir / "1" / "model.onnx")
    return model_dir


def write_broken(repo: Path) -> None:
    """Models that must fail to load, each in its own way, without stopping the others."""
    bad_config = repo / "broken_config"
    save_onnx(add_sub_model(), bad_config / "1" / "model.onnx")
    (bad_config / "config.pbtxt").write_text(
        'name: "broken_config"\nplatform: "onnxruntime_onnx"\nmax_batch_size: oops\n'
    )
    no_file = repo / "missing_file"
    (no_file / "1").mkdir(parents=True)
    (no_file / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')


def still_running(processes: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of ``processes`` still running after ``timeout`` seconds (a zombie has ended: only its
    parent has yet to read its status), each killed so that a failing test leaves nothing behind."""
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    running = []
    for process in alive:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            process.kill()
        except psutil.NoSuchProcess:
            continue
        running.append(process)
    return running


_PORTS_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port free now and never handed out before in this test run.

    The kernel may give the same ephemeral port to two binds in a row once the first socket is closed, so
    a server's HTTP and gRPC ports could otherwise coincide.
    """
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _PORTS_HANDED_OUT:
            _PORTS_HANDED_OUT.add(port)
            return port


@dataclass
class ServerProcess:
    """``trt serve`` in a subprocess on free loopback ports."""

    repositories: list[Path | str]  # folders or s3:// paths
    extra_args: list[str] = field(default_factory=list)
    http_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    env: dict[str, str] = field(default_factory=dict)  # added to this process' environment
    # How to run trt: this checkout's by default, or an installed ``trt`` script from another folder.
    command_prefix: list[str] = field(default_factory=lambda: [sys.executable, "-m", "trt"])
    cwd: Path = ROOT
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def command(self) -> list[str]:
        args = [*self.command_prefix, "serve"]
        args += [f"--model-repository={repo}" for repo in self.repositories]
        args += [
            "--http-address=127.0.0.1",
            f"--http-port={self.http_port}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--exit-timeout-secs=5",
        ]
        return args + self.extra_args

    def start(self, log_dir: Path, wait: bool = True) -> ServerProcess:
        for attempt in range(3):
            self.log_path = log_dir / f"server-{self.http_port}.log"
            env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
            self.process = subprocess.Popen(
                self.command(),
                cwd=self.cwd,
                stdout=self.log_path.open("wb"),
                stderr=subprocess.STDOUT,
                env=env,
            )
            if not wait:
                return self
            try:
                self.wait_live()
                return self
            except RuntimeError:
                # Another process may take a port between free_port() and the server's bind; only that
                # failure is retried, on fresh ports.
                if "Address already in use" not in self.log() or attempt == 2:
                    raise
                self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        return self

    def wait_live(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"trt serve exited with {self.process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"http://{self.http_url}/v2/health/live", timeout=1) as reply:
                    if reply.status == 200 and self._listens_on_http():
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"trt serve did not become live in {timeout}s:\n{self.log()}")

    def _listens_on_http(self) -> bool:
        """Whether the live answer came from this server: another process may have taken the port
        between free_port() and this one's bind (it then exits, and start() retries on new ports)."""
        assert self.process is not None
        try:
            ours = psutil.Process(self.process.pid)
            processes = [ours, *ours.children(recursive=True)]  # --frontend-workers listen in children
            return any(
                c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == self.http_port
                for process in processes
                for c in process.net_connections(kind="tcp")
            )
        except psutil.Error:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def json_summary(self, timeout: float = 10) -> dict[str, Any]:
        """The start-up summary a server started with ``--json`` prints (its first line that is JSON)."""
        deadline = time.monotonic() + timeout
        while '"endpoints"' not in self.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        first = next(line for line in self.log().splitlines() if line.startswith("{"))
        summary: dict[str, Any] = json.loads(first)
        return summary

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 20) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def wait_until(condition: Callable[[], bool], timeout: float = 20) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not in {timeout} s"
        time.sleep(0.1)


def int_inputs(batch: int = 1) -> tuple[np.ndarray, np.ndarray]:
    first = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    second = np.ones((batch, 16), dtype=np.int32)
    return first, second


def simple_inputs(client_module: Any, data: np.ndarray) -> list[Any]:
    """INPUT0 and INPUT1 of the add/sub model, both ``data``, for tritonclient.http or .grpc."""
    inputs = [client_module.InferInput(name, list(data.shape), "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    return inputs


@asynccontextmanager
async def running_core(repository: Path, *models: str) -> AsyncIterator[InferenceServer]:
    """An in-process ``InferenceServer`` with ``models`` of ``repository`` loaded (explicit mode),
    stopped on the way out. The core is imported here, not with this module."""
    from trt.server.core.options import CoreOptions, ModelControlMode
    from trt.server.core.server import InferenceServer

    options = CoreOptions(
        model_repositories=(repository,),
        model_control_mode=ModelControlMode.EXPLICIT,
        load_models=models,
        allow_client_shm=True,  # as the protocol tests' server: their requests may name regions
    )
    core = InferenceServer(options)
    await core.start()
    try:
        yield core
    finally:
        await core.stop()


def longest_health_wait_while(server: ServerProcess, action: Callable[[], None]) -> tuple[float, float]:
    """(how long ``action`` took, the longest a health check of ``server`` waited meanwhile), in
    seconds: whether the server's event loop went on answering while it did ``action``'s work."""

    @contextmanager
    def health_checks() -> Iterator[Callable[[], object]]:
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(server.http_url)
        try:
            yield client.is_server_live
        finally:
            client.close()

    return longest_wait_while(health_checks, action)


def longest_metrics_wait_while(server: ServerProcess, action: Callable[[], None]) -> tuple[float, float]:
    """As ``longest_health_wait_while``, probing the metrics port, which the core process serves
    itself even with front-end workers: whether the core's event loop went on answering."""
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"

    def scrape() -> bytes:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return bytes(answer.read())

    return longest_wait_while(lambda: nullcontext(scrape), action)


def read_http_response(sock: socket.socket, buffer: bytearray) -> tuple[int, dict[str, str], bytes]:
    """(status, headers by lower-case name, body) of the next HTTP/1.1 answer on ``sock``, framed by
    its Content-Length; what was read past it stays in ``buffer`` for the next call."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed before a full response")
        buffer += chunk
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    body = bytearray(rest)
    while len(body) < length:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed mid-body")
        body += chunk
    buffer[:] = body[length:]
    return status, headers, bytes(body[:length])


async def longest_loop_gap_while(work: asyncio.Future[Any]) -> float:
    """The longest the running event loop went without coming back to a 1 ms ticker until ``work``
    ended, in seconds (``work`` is awaited: its exception, if any, is raised)."""
    longest, last = 0.0, time.perf_counter()
    while not work.done():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    await work
    return longest


def longest_wait_while(
    probes: Callable[[], AbstractContextManager[Callable[[], object]]], action: Callable[[], None]
) -> tuple[float, float]:
    """(how long ``action`` took, the longest a probe took meanwhile): the probe comes from ``probes``
    on a thread of its own (a client is used and closed where it was made), called every 5 ms."""
    worst, stop = [0.0], threading.Event()

    def keep_probing() -> None:
        with probes() as probe:
            while not stop.is_set():
                began = time.perf_counter()
                assert probe()
                worst[0] = max(worst[0], time.perf_counter() - began)
                time.sleep(0.005)

    prober = threading.Thread(target=keep_probing, daemon=True)
    prober.start()
    time.sleep(0.3)
    began = time.perf_counter()
    action()
    took = time.perf_counter() - began
    stop.set()
    prober.join(10)
    return took, worst[0]
