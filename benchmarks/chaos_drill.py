"""Chaos drill: one `trt serve`, and every kind of client that misbehaves, at once, for a while.

Real clients in threads, each checking what it gets back (`_chaos_models.py` has the models):

- gRPC streams (tritonclient) of 1-4 requests to ``burst`` or the ``pipeline`` ensemble, up to 2,000
  answers of up to 256 KiB each; the reader pauses (1 ms to 1 s) on some answers, a quarter of the
  streams are cancelled early; every answer's index and bytes are checked, in order;
- gRPC unary calls with deadlines shorter than the model takes, and async calls cancelled in flight;
- HTTP clients (tritonclient) with JSON and binary tensors, some with a 50 ms network timeout;
- a client that makes ``crashy`` exit its process or raise, between ordinary requests;
- ``generate_stream`` readers that leave after a few bytes, and raw sockets sending half a request,
  random bytes or a bare HTTP/2 preface, then closing;
- sequences (tritonclient sequence ids), a tenth of them abandoned before their end;
- system shared memory: regions registered, used for inputs and outputs, unregistered;
- NVIDIA's perf_analyzer over HTTP and gRPC (``--perf-analyzer``), the OpenAI routes (``openai``,
  streams left early) when the generative extras are installed;
- with ``--churn``, explicit model control, and a client unloading and loading the others' models,
  some loads with a config override;
- a health check every 100 ms, whose latency is reported.

With ``--tls`` the server is started with HTTPS and gRPC over TLS, under certificates made for this run,
and every client above speaks TLS (the metrics port has no TLS to speak); half
of the raw sockets do too, the other half send their bytes in the clear at the TLS ports.

Afterwards: every model must answer again, no request may be pending and no byte held against
``--max-queued-bytes``, the client threads must have finished, and the server must stop on SIGTERM.
Any of that failing, or an answer that is wrong, or an error a client should not get, is a problem:
listed, and the exit status is 1. Found this way (and
fixed, each with a test): a gRPC stream whose requests waited together for the client to read hung;
an ensemble failed mid-stream when a step's model was unloaded.

    python benchmarks/chaos_drill.py [--seconds 90] [--seed 1] [--churn] [--frontend-workers 2]
        [--perf-analyzer /tmp/trt-peers/perf/perf_analyzer] [--serve-arg=--rate-limit=execution_count]
        [--tls] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from tritonclient.utils import InferenceServerException

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _chaos_models import build_repository  # noqa: E402
from _common import free_port  # noqa: E402

from tests.certificates import issue_certificates  # noqa: E402

# What a client is told while the model it asked for is unloaded (--churn): not a problem.
AWAY = (
    "unknown model", "not found", "unavailable", "not ready", "no available version", "unload",
    "failed to find the requested model",
)  # fmt: skip
CHURNED = ["simple", "slow_add", "burst", "seq", "copy"]


def away(error: object) -> bool:
    return any(text in str(error).lower() for text in AWAY)


@dataclass
class Drill:
    """What every client shares: the server's ports, the stop signal, and the tally."""

    http_port: int
    grpc_port: int
    metrics_port: int
    openai_port: int
    churn: bool = False  # models are unloaded and loaded again under the clients
    ca: str | None = None  # --tls: the CA file that signed the server's certificate
    stop: threading.Event = field(default_factory=threading.Event)
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    health_s: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _contexts: dict[int, ssl.SSLContext] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.ca is not None:  # one context per port: the gRPC one must offer h2, as gRPC clients do
            for port, alpn in ((self.http_port, "http/1.1"), (self.grpc_port, "h2")):
                self._contexts[port] = ssl.create_default_context(cafile=self.ca)
                self._contexts[port].set_alpn_protocols([alpn])

    @property
    def tls(self) -> bool:
        return self.ca is not None

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    # Every client reaches the server through these, so that --tls is decided here alone.

    def grpc_client(self) -> grpcclient.InferenceServerClient:
        if self.ca is None:
            return grpcclient.InferenceServerClient(self.grpc_url)
        return grpcclient.InferenceServerClient(self.grpc_url, ssl=True, root_certificates=self.ca)

    def http_client(self, **options: Any) -> httpclient.InferenceServerClient:
        if self.ca is not None:
            options |= {"ssl": True, "ssl_options": {"ca_certs": self.ca}}
        return httpclient.InferenceServerClient(self.http_url, **options)

    def urlopen(self, path: str, timeout: float) -> Any:
        """A GET on the HTTP port (HTTPS with --tls)."""
        url = f"{'https' if self.tls else 'http'}://{self.http_url}{path}"
        return urllib.request.urlopen(url, timeout=timeout, context=self._contexts.get(self.http_port))

    def connect(self, port: int, timeout: float, tls: bool = True) -> socket.socket:
        """A socket to ``port``, its TLS handshake done with --tls (``tls=False``: in the clear)."""
        sock = socket.create_connection(("127.0.0.1", port), timeout)
        if self.ca is None or not tls:
            return sock
        try:
            return self._contexts[port].wrap_socket(sock, server_hostname="127.0.0.1")
        except BaseException:
            sock.close()
            raise

    def perf_analyzer_flags(self, protocol: str) -> list[str]:
        """perf_analyzer's URL for ``protocol`` and, with --tls, its flags to trust our CA."""
        if self.ca is None:
            return ["-u", self.grpc_url if protocol == "grpc" else self.http_url]
        if protocol == "grpc":
            return ["-u", self.grpc_url, "--ssl-grpc-use-ssl", "true",
                    "--ssl-grpc-root-certifications-file", self.ca]  # fmt: skip
        return ["-u", f"https://{self.http_url}", "--ssl-https-verify-peer", "1",
                "--ssl-https-verify-host", "2", "--ssl-https-ca-certificates-file", self.ca]  # fmt: skip

    def ok(self, client: str, outcome: str) -> None:
        with self._lock:
            self.counts[client, outcome] += 1

    def problem(self, client: str, what: str) -> None:
        with self._lock:
            self.counts[client, "PROBLEM"] += 1
            if len(self.problems) < 100:
                self.problems.append(f"{client}: {what}"[:800])


# -- clients -----------------------------------------------------------------------------------------


def grpc_streams(drill: Drill, rng: random.Random) -> None:
    while not drill.stop.is_set():
        _one_stream(drill, rng)


def _one_stream(drill: Drill, rng: random.Random) -> None:
    """One stream of 1-4 requests; a quarter of the streams cancelled early."""
    name = "grpc stream"
    client = drill.grpc_client()
    model = rng.choice(["burst", "pipeline"])
    pause = rng.choice([0, 0, 0, 0.001, 0.2, 1.0])
    plan = {f"r{n}": (rng.choice([1, 10, 200, 2000]), rng.choice([4, 100, 16384, 262144]),
                      rng.choice([0, 0, 100, 2000])) for n in range(rng.randint(1, 4))}  # fmt: skip
    answers: dict[str, list[int]] = {rid: [] for rid in plan}
    ended: list[str] = []
    errors: list[str] = []
    done = threading.Event()

    def callback(result: Any, error: Any) -> None:
        if error is not None:  # the request it belongs to is not said: it ends one of them
            errors.append(str(error))
            ended.append("error")
        else:
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param:
                ended.append(response.id)
            else:
                out = result.as_numpy("OUT")
                index = int(np.frombuffer(out[:4].tobytes(), np.int32)[0])
                answers[response.id].append(index)
                if out.size > 4 and not (out[4:] == index % 251).all():
                    errors.append(f"{response.id}: the bytes of answer {index} differ")
                if pause and rng.random() < 0.02:
                    time.sleep(pause)
        if len(ended) == len(plan):
            done.set()

    client.start_stream(callback)
    try:
        for rid, (count, size, gap) in plan.items():
            inputs = [
                _int32(grpcclient, n, v) for n, v in (("COUNT", count), ("SIZE", size), ("GAP_US", gap))
            ]
            client.async_stream_infer(model, inputs, request_id=rid, enable_empty_final_response=True)
        if rng.random() < 0.25:
            time.sleep(rng.random() * 0.3)
            client.stop_stream(cancel_requests=True)
            drill.ok(name, "cancelled")
            return
        if not done.wait(120):
            drill.problem(
                name,
                f"{model}: requests ended {len(ended)}/{len(plan)} after 120 s; answers "
                f"{ {rid: len(got) for rid, got in answers.items()} } of {plan}, pause {pause} s",
            )
        client.stop_stream()
        # The unread-answer bounds may cancel a request whose reader lags (its error says which).
        bounds = ("--max-unread-response-bytes", "--max-queued-bytes")
        expected = [e for e in errors if not any(bound in e for bound in bounds) and not away(e)]
        if expected:
            drill.problem(name, f"{model}: {expected[:2]}")
        for rid, (count, _, _) in plan.items():
            got = answers[rid]
            if got != list(range(len(got))) or (len(got) != count and not errors):
                drill.problem(
                    name, f"{model} {rid}: {len(got)} of {count} answers, in order: {got == sorted(got)}"
                )
        drill.ok(name, "whole" if not errors else "ended by a bound or an unload")
    except InferenceServerException as error:
        drill.problem(name, str(error))
    finally:
        client.close()


def grpc_unary(drill: Drill, rng: random.Random) -> None:
    name = "grpc unary"
    client = drill.grpc_client()
    while not drill.stop.is_set():
        delay = rng.choice([0, 0, 0, 5, 50, 300])
        inputs, expected = _add_inputs(grpcclient, delay)
        if rng.random() < 0.1:
            answered = threading.Event()
            call = client.async_infer(
                "slow_add", inputs, callback=lambda result, error, done=answered: done.set()
            )
            time.sleep(rng.random() * 0.05)
            call.cancel()
            if answered.wait(30):
                drill.ok(name, "async, cancelled")
            else:
                drill.problem(name, "a cancelled async call's callback never ran")
            continue
        deadline = rng.choice([None, None, 0.1, 0.02])
        try:
            result = client.infer("slow_add", inputs, client_timeout=deadline)
            if np.array_equal(result.as_numpy("OUTPUT0"), expected):
                drill.ok(name, "answered")
            else:
                drill.problem(name, "a wrong answer")
        except InferenceServerException as error:
            if deadline is not None and "deadline" in str(error).lower():
                drill.ok(name, "deadline passed")
            elif away(error):
                drill.ok(name, "model away")
            else:
                drill.problem(name, f"deadline {deadline}, model delay {delay} ms: {error}")
    client.close()


def http_clients(drill: Drill, rng: random.Random) -> None:
    name = "http"
    while not drill.stop.is_set():
        timeout = rng.choice([60.0, 60.0, 0.05])
        client = drill.http_client(network_timeout=timeout, connection_timeout=10)
        try:
            for _ in range(rng.randint(1, 30)):
                if rng.random() < 0.5:
                    inputs, expected = _add_inputs(httpclient, rng.choice([0, 0, 5, 200]))
                    got = client.infer("slow_add", inputs).as_numpy("OUTPUT0")
                else:
                    x = np.arange(16, dtype=np.int32).reshape(1, 16) * rng.randint(1, 5)
                    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                              httpclient.InferInput("INPUT1", [1, 16], "INT32")]  # fmt: skip
                    inputs[0].set_data_from_numpy(x, binary_data=rng.random() < 0.5)
                    inputs[1].set_data_from_numpy(np.ones_like(x), binary_data=rng.random() < 0.5)
                    expected = x + 1
                    got = client.infer("simple", inputs).as_numpy("OUTPUT0")
                if np.array_equal(got, expected):
                    drill.ok(name, "answered")
                else:
                    drill.problem(name, "a wrong answer")
        except InferenceServerException as error:
            if away(error):
                drill.ok(name, "model away")
            else:
                drill.problem(name, str(error))
        except Exception as error:  # gevent's timeouts and socket errors
            if timeout < 1:
                drill.ok(name, "client timed out")
            else:
                drill.problem(name, f"{type(error).__name__}: {error}")
        finally:
            client.close()


def crashing_model(drill: Drill, rng: random.Random) -> None:
    name = "crashy"
    client = drill.grpc_client()
    while not drill.stop.is_set():
        mode = rng.choice([0, 0, 0, 0, 2, 1])  # 1: the model process exits; 2: execute() raises
        started = time.monotonic()
        try:
            result = client.infer("crashy", [_int32(grpcclient, "MODE", mode)], client_timeout=60)
            if mode == 0 and int(result.as_numpy("OUT")[0]) == 0:
                drill.ok(name, "answered")
            else:
                drill.problem(name, f"mode {mode} answered {result.as_numpy('OUT')}")
        except InferenceServerException as error:
            if "deadline" in str(error).lower():
                drill.problem(name, f"mode {mode} hung: {error}")
            elif mode == 0 and not away(error):  # a restart in progress may refuse it
                drill.problem(name, f"mode 0 failed: {error}")
            else:
                drill.ok(name, {0: "refused while restarting", 1: "process exited", 2: "raised"}[mode])
        if time.monotonic() - started > 20:
            drill.problem(name, f"mode {mode} took {time.monotonic() - started:.0f} s")
        time.sleep(rng.random() * 0.5)
    client.close()


def generate_stream_readers(drill: Drill, rng: random.Random) -> None:
    name = "generate_stream"
    while not drill.stop.is_set():
        count, size, gap = rng.choice([5, 100, 1000]), rng.choice([4, 1000]), rng.choice([0, 500])
        body = json.dumps({"COUNT": [count], "SIZE": [size], "GAP_US": [gap]})
        leave_after = rng.choice([None, 1, 4096, 100000])
        got, tail = 0, b""
        try:
            with drill.connect(drill.http_port, timeout=120) as sock:
                sock.sendall(
                    "POST /v2/models/burst/generate_stream HTTP/1.1\r\nHost: x\r\n"
                    f"Content-Type: application/json"
                    f"\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
                )
                while chunk := sock.recv(65536):
                    if got == 0 and not chunk.startswith(b"HTTP/1.1 200"):
                        if away(chunk) or chunk[9:12] in (b"404", b"503"):
                            drill.ok(name, "model away")
                        else:
                            drill.problem(name, f"answered {chunk[:200]!r}")
                        break
                    got += len(chunk)
                    tail = (tail + chunk)[-16:]
                    if (leave_after is not None and got >= leave_after) or tail.endswith(b"0\r\n\r\n"):
                        drill.ok(name, "left early" if leave_after is not None else "read whole")
                        break
        except OSError as error:
            drill.problem(name, f"{type(error).__name__}: {error} after {got} bytes of {count} x {size}")


def raw_sockets(drill: Drill, rng: random.Random) -> None:
    name = "raw socket"
    garbage = [
        lambda: b'POST /v2/models/slow_add/infer HTTP/1.1\r\nContent-Length: 100000\r\n\r\n{"inp',
        lambda: os.urandom(rng.randint(1, 5000)),
        lambda: b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(rng.randint(0, 300)),
        lambda: b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    while not drill.stop.is_set():
        port = rng.choice([drill.http_port, drill.grpc_port])
        # --tls: half of them send their bytes after a handshake, half in the clear at the TLS
        # ports (a handshake that never happens).
        tls = drill.tls and rng.random() < 0.5
        how = (" over TLS" if tls else " in the clear") if drill.tls else ""
        try:
            sock = drill.connect(port, 5, tls)
        except ssl.SSLError as error:  # the server offers a certificate our CA signed: it must work
            drill.problem(name, f"the TLS handshake with port {port} failed: {error}")
            continue
        except OSError:
            drill.ok(name, "refused or reset" + how)
            continue
        try:
            with sock:
                sock.sendall(rng.choice(garbage)())
                time.sleep(rng.random() * 0.2)
            drill.ok(name, "sent and closed" + how)
        except OSError:
            drill.ok(name, "refused or reset" + how)


def sequences(drill: Drill, rng: random.Random) -> None:
    name = "sequence"
    client = drill.grpc_client()
    while not drill.stop.is_set():
        sequence = rng.randrange(1, 2**63)
        values = [rng.randint(-100, 100) for _ in range(rng.randint(1, 12))]
        abandon = rng.random() < 0.1  # its end never comes: the idle timeout frees its slot
        total, i = 0, 0
        try:
            for i, value in enumerate(values):
                if abandon and i == len(values) - 1:
                    drill.ok(name, "abandoned")
                    break
                tensor = grpcclient.InferInput("VALUE", [1, 1], "INT32")
                tensor.set_data_from_numpy(np.array([[value]], np.int32))
                result = client.infer("seq", [tensor], sequence_id=sequence, sequence_start=i == 0,
                                      sequence_end=i == len(values) - 1, client_timeout=30)  # fmt: skip
                total += value
                if int(result.as_numpy("TOTAL")[0][0]) != total:
                    drill.problem(name, f"step {i}: total {result.as_numpy('TOTAL')}, expected {total}")
                    break
            else:
                drill.ok(name, "whole")
        except InferenceServerException as error:
            if away(error):
                drill.ok(name, "model away")
            elif drill.churn and i > 0 and "must specify the start flag" in str(error).lower():
                drill.ok(name, "model reloaded mid-sequence")  # its state went with the old copy
            else:
                drill.problem(name, str(error))
    client.close()


def shared_memory(drill: Drill, rng: random.Random) -> None:
    name = "shared memory"
    client = drill.http_client()
    for n in range(1_000_000):
        if drill.stop.is_set():
            break
        region_name, key = f"chaos_{os.getpid()}_{n}", f"/chaos_{os.getpid()}_{n}"
        region = shm.create_shared_memory_region(region_name, key, 192)
        try:
            x = np.arange(16, dtype=np.int32) * n
            shm.set_shared_memory_region(region, [x, np.ones(16, np.int32)])
            client.register_system_shared_memory(region_name, key, 192)
            for _ in range(rng.randint(1, 20)):
                inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                          httpclient.InferInput("INPUT1", [1, 16], "INT32")]  # fmt: skip
                inputs[0].set_shared_memory(region_name, 64, offset=0)
                inputs[1].set_shared_memory(region_name, 64, offset=64)
                output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
                output.set_shared_memory(region_name, 64, offset=128)
                try:
                    client.infer("simple", inputs, outputs=[output])
                except InferenceServerException as error:
                    if not away(error):
                        raise
                    drill.ok(name, "model away")
                    continue
                if np.array_equal(shm.get_contents_as_numpy(region, np.int32, [16], offset=128), x + 1):
                    drill.ok(name, "answered")
                else:
                    drill.problem(name, "a wrong answer in the output region")
            client.unregister_system_shared_memory(region_name)
        except InferenceServerException as error:
            drill.problem(name, str(error))
        finally:
            shm.destroy_shared_memory_region(region)
    client.close()


def perf_analyzer(binary: str) -> Callable[[Drill, random.Random], None]:
    def run(drill: Drill, rng: random.Random) -> None:
        while not drill.stop.is_set():
            protocol = rng.choice(["http", "grpc"])
            concurrency = str(rng.choice([1, 8, 32]))
            command = [binary, "-m", "simple", *drill.perf_analyzer_flags(protocol), "-i", protocol, "-p",
                       "1500", "-s", "10000", "-r", "3", "--concurrency-range", concurrency]  # fmt: skip
            result = subprocess.run(command + (["--async"] if rng.random() < 0.5 else []),
                                    capture_output=True, text=True, timeout=120)  # fmt: skip
            text = result.stdout[-600:] + result.stderr[-600:]
            if result.returncode == 0:
                drill.ok("perf_analyzer", protocol)
            elif away(text):
                drill.ok("perf_analyzer", "model away")
            else:
                drill.problem("perf_analyzer", f"{protocol}: {text}")

    return run


def openai_routes(drill: Drill, rng: random.Random) -> None:
    import openai

    name = "openai"
    # With --tls its port serves HTTPS under the HTTP port's certificates.
    url, transport = f"http://127.0.0.1:{drill.openai_port}/v1", None
    if drill.ca is not None:
        url = url.replace("http:", "https:", 1)
        transport = openai.DefaultHttpx2Client(verify=ssl.create_default_context(cafile=drill.ca))
    client = openai.OpenAI(base_url=url, api_key="-", max_retries=0, http_client=transport)
    while not drill.stop.is_set():
        tokens = rng.choice([1, 8, 64])
        try:
            if rng.random() < 0.5:
                reply = client.completions.create(model="tiny_llm", prompt="chaos " * rng.randint(1, 50),
                                                  max_tokens=tokens)  # fmt: skip
                if reply.choices and reply.choices[0].finish_reason in ("length", "stop"):
                    drill.ok(name, "completion")
                else:
                    drill.problem(name, f"completion without a finish reason: {reply}")
                continue
            messages: Any = [{"role": "user", "content": "hi " * rng.randint(1, 30)}]
            stream = client.chat.completions.create(model="tiny_llm", stream=True, max_tokens=tokens,
                                                    messages=messages)  # fmt: skip
            leave = rng.random() < 0.4
            finish = None
            for n, chunk in enumerate(stream):
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
                if leave and n >= 1:
                    stream.close()
                    break
            if leave:
                drill.ok(name, "stream left early")
            elif finish in ("length", "stop"):
                drill.ok(name, "stream whole")
            else:
                drill.problem(name, "a stream ended without a finish reason")
        except openai.APIStatusError as error:
            if away(error.message) or error.status_code in (404, 503):
                drill.ok(name, "model away")
            else:
                drill.problem(name, f"{error.status_code}: {error.message}")
        except openai.APIError as error:
            drill.problem(name, f"{type(error).__name__}: {error}")


def churn(drill: Drill, rng: random.Random) -> None:
    """Unload and load again the models the others use; some loads override the config."""
    name = "churn"
    client = drill.grpc_client()
    while not drill.stop.is_set():
        model = rng.choice(CHURNED)
        try:
            client.unload_model(model)
            time.sleep(rng.random() * 0.5)
            if model == "simple" and rng.random() < 0.5:
                override = {
                    "max_batch_size": 8,
                    "instance_group": [{"kind": "KIND_CPU", "count": rng.randint(1, 2)}],
                    "dynamic_batching": {"max_queue_delay_microseconds": rng.choice([0, 500, 5000])},
                }
                client.load_model(model, config=json.dumps(override))
            else:
                client.load_model(model)
            if client.is_model_ready(model):
                drill.ok(name, "reloaded")
            else:
                drill.problem(name, f"{model} not ready after its load")
        except InferenceServerException as error:
            drill.problem(name, f"{model}: {error}")
        time.sleep(rng.random() * 2)
    for model in CHURNED:  # all back for the checks after
        client.load_model(model)
    client.close()


def health(drill: Drill, rng: random.Random) -> None:
    while not drill.stop.is_set():
        started = time.monotonic()
        try:
            with drill.urlopen("/v2/health/live", timeout=30) as reply:
                reply.read()
        except OSError as error:
            drill.problem("health", str(error))
        drill.health_s.append(time.monotonic() - started)
        time.sleep(0.1)


def _int32(module: Any, name: str, value: int) -> Any:
    tensor = module.InferInput(name, [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return tensor


def _add_inputs(module: Any, delay_ms: int) -> tuple[list[Any], np.ndarray]:
    x = np.arange(16, dtype=np.float32)
    tensor = module.InferInput("INPUT0", [16], "FP32")
    tensor.set_data_from_numpy(x)
    return [tensor, _int32(module, "DELAY_MS", delay_ms)], x + 1


# -- the drill -----------------------------------------------------------------------------------------


def _clients(
    args: argparse.Namespace, with_llm: bool
) -> list[tuple[Callable[[Drill, random.Random], None], int]]:
    clients: list[tuple[Callable[[Drill, random.Random], None], int]] = [
        (grpc_streams, 3), (grpc_unary, 3), (http_clients, 3), (crashing_model, 1),
        (generate_stream_readers, 2), (raw_sockets, 1), (sequences, 3), (shared_memory, 1), (health, 1),
    ]  # fmt: skip
    if args.perf_analyzer:
        clients.append((perf_analyzer(args.perf_analyzer), 1))
    if with_llm:
        clients.append((openai_routes, 2))
    if args.churn:
        clients.append((churn, 1))
    return clients


def _wait_ready(drill: Drill, process: subprocess.Popen[bytes], model: str, timeout: float = 120) -> None:
    """_common.wait_model_ready, over HTTPS with --tls."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"a server exited with {process.returncode} before it was ready")
        try:
            with drill.urlopen(f"/v2/models/{model}/ready", timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"a server did not have {model} ready within {timeout:g} s")


def _tree_rss(pid: int) -> int:
    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])


def _metric(drill: Drill, family: str) -> float:
    """The sum of a family's samples (a family without labels: its one sample)."""
    url = f"http://127.0.0.1:{drill.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        lines = reply.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.split("{")[0].split(" ")[0] == family)


def _check_after(drill: Drill, models: list[str]) -> None:
    """Every model answers again, and nothing is left pending or held."""
    client = drill.grpc_client()
    try:  # the HTTP port (HTTPS with --tls) too
        with drill.urlopen("/v2/health/ready", timeout=30):
            pass
    except OSError as error:
        drill.problem("after", f"/v2/health/ready: {error}")
    inputs, expected = _add_inputs(grpcclient, 0)
    if not np.array_equal(client.infer("slow_add", inputs).as_numpy("OUTPUT0"), expected):
        drill.problem("after", "slow_add answers wrongly")
    if int(client.infer("crashy", [_int32(grpcclient, "MODE", 0)]).as_numpy("OUT")[0]) != 0:
        drill.problem("after", "crashy answers wrongly")
    for model in models:
        if not client.is_model_ready(model):
            drill.problem("after", f"{model} is not ready")
    time.sleep(3)  # requests cancelled at the end finish being counted
    if (pending := _metric(drill, "nv_inference_pending_request_count")) != 0:
        drill.problem("after", f"{pending:.0f} requests still pending")
    if (held := _metric(drill, "trt_queued_bytes")) != 0:
        drill.problem("after", f"{held:.0f} bytes still counted against --max-queued-bytes")
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--churn", action="store_true", help="explicit model control; unload and load models")
    parser.add_argument("--frontend-workers", type=int, default=0)
    parser.add_argument("--perf-analyzer", help="path to NVIDIA's perf_analyzer, to run it among the clients")
    parser.add_argument("--serve-arg", action="append", default=[], help="a `trt serve` flag to add (repeat)")
    parser.add_argument("--tls", action="store_true", help="HTTPS and gRPC over TLS, for every client")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args()
    console = Console(stderr=args.json)
    try:
        import openai  # noqa: F401
        import tokenizers  # noqa: F401
        import torch  # noqa: F401

        with_llm = True
    except ImportError:
        with_llm = False
    with tempfile.TemporaryDirectory() as tmp:
        models = build_repository(Path(tmp) / "repo", with_llm)
        certificates = issue_certificates(Path(tmp)) if args.tls else {}
        drill = Drill(
            free_port(), free_port(), free_port(), free_port(), churn=args.churn, ca=certificates.get("ca")
        )
        cert, key = certificates.get("server_cert"), certificates.get("server_key")
        tls_flags = [f"--{endpoint}-{flag}" for endpoint in ("http", "grpc")
                     for flag in ("use-ssl=true", f"server-cert={cert}", f"server-key={key}")]  # fmt: skip
        command = [
            sys.executable, "-m", "trt", "serve", "--model-repository", str(Path(tmp) / "repo"),
            "--allow-client-shm=true",  # the drill's clients hand tensors over in shared memory
            "--http-port", str(drill.http_port), "--grpc-port", str(drill.grpc_port),
            "--metrics-port", str(drill.metrics_port),
            "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
            "--frontend-workers", str(args.frontend_workers),
            *(["--allow-openai", "true", "--openai-port", str(drill.openai_port)] if with_llm else []),
            *(["--model-control-mode", "explicit", "--load-model", "*"] if args.churn else []),
            *(tls_flags if args.tls else []),
            *args.serve_arg,
        ]  # fmt: skip
        log = Path(tmp) / "server.log"
        with log.open("w") as log_file:
            server = subprocess.Popen(command, cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            for model in models:
                _wait_ready(drill, server, model)
            rss_before = _tree_rss(server.pid)
            seeds = random.Random(args.seed)
            threads = [
                threading.Thread(target=client, args=(drill, random.Random(seeds.random())), daemon=True)
                for client, copies in _clients(args, with_llm) for _ in range(copies)
            ]  # fmt: skip
            for thread in threads:
                thread.start()
            columns = (TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn())
            with Progress(*columns, console=console, transient=True) as progress:
                task = progress.add_task("clients at work", total=args.seconds)
                started = time.monotonic()
                while (elapsed := time.monotonic() - started) < args.seconds:
                    problems = sum(n for (_, outcome), n in drill.counts.items() if outcome == "PROBLEM")
                    answered = sum(drill.counts.values())
                    progress.update(
                        task, completed=elapsed, description=f"{answered:,} outcomes, {problems} problems"
                    )
                    time.sleep(0.5)
            drill.stop.set()
            for thread in threads:
                thread.join(timeout=150)
                if thread.is_alive():
                    drill.problem(thread.name, "still running 150 s after the drill ended")
            rss_after = 0
            if server.poll() is not None:
                drill.problem("server", f"exited with {server.returncode} during the drill")
            else:
                _check_after(drill, models)
                rss_after = _tree_rss(server.pid)
        finally:
            stopping = time.monotonic()
            server.terminate()
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                drill.problem("server", "did not stop within 60 s of SIGTERM")
                server.kill()
            stop_s = time.monotonic() - stopping
            log_tail = log.read_text(errors="replace").splitlines()[-15:]
    health_ms = sorted(s * 1000 for s in drill.health_s) or [0.0]
    summary = {
        "seconds": args.seconds, "seed": args.seed, "churn": args.churn, "tls": args.tls,
        "frontend_workers": args.frontend_workers, "serve_args": args.serve_arg,
        "outcomes": {f"{client}: {outcome}": n for (client, outcome), n in sorted(drill.counts.items())},
        "problems": drill.problems, "health_p99_ms": round(health_ms[int(len(health_ms) * 0.99)], 1),
        "health_worst_ms": round(health_ms[-1], 1), "rss_mib_before": round(rss_before / 2**20),
        "rss_mib_after": round(rss_after / 2**20), "stop_s": round(stop_s, 1),
    }  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    else:
        tls = ", TLS" if args.tls else ""
        table = Table(title=f"chaos drill, {args.seconds:.0f} s, seed {args.seed}{tls}")
        for column in ("client", "outcome", "count"):
            table.add_column(column, justify="right" if column == "count" else "left")
        for (client, outcome), n in sorted(drill.counts.items()):
            table.add_row(client, outcome, f"{n:,}", style="red" if outcome == "PROBLEM" else None)
        console.print(table)
        console.print(
            f"health check p99 {summary['health_p99_ms']} ms (worst {summary['health_worst_ms']}); "
            f"server memory {summary['rss_mib_before']} -> {summary['rss_mib_after']} MiB; "
            f"stopped {summary['stop_s']} s after SIGTERM"
        )
        for problem in drill.problems:
            console.print(f"[red]problem[/red] {problem}", markup=True, highlight=False)
        if drill.problems:
            console.print("the server's log ended:", *log_tail, sep="\n", markup=False, highlight=False)
    sys.exit(1 if drill.problems else 0)


if __name__ == "__main__":
    main()
