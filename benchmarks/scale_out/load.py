"""Clients of the drill: threads sending inference requests through the balancer, over HTTP (plain
keep-alive connections, so each answer's ``X-Upstream`` names the replica) and gRPC (tritonclient),
recording every request's start, end, outcome and replica. Bounded by a stop event and a request cap."""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass

import numpy as np
import orjson
import tritonclient.grpc as grpcclient

SIMPLE_BODY = orjson.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
)
SLOW_BODY = orjson.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
)


@dataclass(frozen=True, slots=True)
class Outcome:
    protocol: str
    started: float  # time.monotonic()
    ended: float
    ok: bool
    error: str = ""
    upstream: str = ""  # the replica nginx sent it to (HTTP only)


class Load:
    """``http_clients`` + ``grpc_clients`` threads, each with one request in flight at a time.

    ``keep_alive=False`` opens an HTTP connection per request: when the balancer itself is reloaded, a
    client's idle keep-alive connection can be closed under a request it is sending (nginx's reload, not
    the replicas), which would blur what the drill measures."""

    def __init__(
        self,
        http_port: int,
        grpc_port: int,
        model: str,
        http_clients: int,
        grpc_clients: int,
        keep_alive: bool = True,
        cap: int = 500_000,
    ) -> None:
        self.http_port, self.grpc_port, self.model = http_port, grpc_port, model
        self.keep_alive = keep_alive
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._cap = cap
        self._threads = [threading.Thread(target=self._http_client, daemon=True) for _ in range(http_clients)]
        self._threads += [
            threading.Thread(target=self._grpc_client, daemon=True) for _ in range(grpc_clients)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _record(self, outcome: Outcome) -> bool:
        with self._lock:
            self.outcomes.append(outcome)
            return len(self.outcomes) < self._cap and not self._stop.is_set()

    def _http_client(self) -> None:
        body = SIMPLE_BODY if self.model == "simple" else SLOW_BODY
        path = f"/v2/models/{self.model}/infer"
        connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        going = True
        while going:
            started = time.monotonic()
            try:
                connection.request("POST", path, body, {"Content-Type": "application/json"})
                reply = connection.getresponse()
                payload = reply.read()
                upstream = reply.getheader("X-Upstream", "")
                if not self.keep_alive:
                    connection.close()
                ok = reply.status == 200
                error = "" if ok else f"HTTP {reply.status}: {payload[:120]!r}"
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
                ok, error, upstream = False, f"{type(exc).__name__}: {exc}", ""
            going = self._record(Outcome("http", started, time.monotonic(), ok, error, upstream))
        connection.close()

    def _grpc_client(self) -> None:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")
        inputs = [grpcclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        inputs[1].set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        going = True
        while going:
            started = time.monotonic()
            try:
                client.infer("simple", inputs, client_timeout=30)
                ok, error = True, ""
            except Exception as exc:  # tritonclient raises InferenceServerException for every failure
                ok, error = False, f"{type(exc).__name__}: {str(exc)[:160]}"
            going = self._record(Outcome("grpc", started, time.monotonic(), ok, error))
        client.close()


def failures(outcomes: list[Outcome]) -> list[Outcome]:
    return [outcome for outcome in outcomes if not outcome.ok]
