"""A decoupled Python model's answers streamed by trt and by NVIDIA Triton 2.51, per answer.

The model (written here, the same folder for both servers) sends ``--answers`` answers from
``execute()``, each one short BYTES tensor, then the final flag: the shape of a generative model's
stream with the model's own work taken out, so what is left is each server's cost of carrying an
answer. Two clients, one request at a time:

- ``grpc stream``: tritonclient's ``ModelStreamInfer`` stream (``enable_empty_final_response``), as
  genai-perf and Triton's LLM clients use it;
- ``generate_stream``: the generate extension's server-sent events over one kept-alive HTTP
  connection.

Per run: answers per second, the server's CPU time (its process and its model processes) per
answer, and (``generate_stream``) the time to the first answer. Rounds alternate the servers' order;
the table gives each round's trt / Triton ratio and their median. One run on one machine: compare
the ratios.

    flock /tmp/trt-bench.lock python benchmarks/decoupled_vs_triton.py --peers /tmp/trt-peers
        [--answers 64] [--requests 60] [--rounds 5]
"""

from __future__ import annotations

import argparse
import http.client
import json
import queue
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import process_tree_cpu  # noqa: E402
from _side_by_side import Served, add_options, ratio_table, rounds_in_turn, triton_and_trt, write_results  # noqa: E402

MODEL = "burst"
CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy().reshape(-1)[0])
            sender = request.get_response_sender()
            token = pb_utils.Tensor("text_output", np.array([b" token"], dtype=np.object_))
            for _ in range(count):
                sender.send(pb_utils.InferenceResponse(output_tensors=[token]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def write_model(repository: Path) -> None:
    (repository / MODEL / "1").mkdir(parents=True)
    (repository / MODEL / "config.pbtxt").write_text(CONFIG)
    (repository / MODEL / "1" / "model.py").write_text(MODEL_PY)


class GrpcStream:
    """One tritonclient stream, kept open across runs."""

    def __init__(self, url: str, answers: int) -> None:
        import tritonclient.grpc as grpcclient

        self.results: queue.Queue[tuple[object, object]] = queue.Queue()
        self.client = grpcclient.InferenceServerClient(url)
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))
        self.inputs = [
            grpcclient.InferInput("text_input", [1], "BYTES"),
            grpcclient.InferInput("COUNT", [1], "INT32"),
        ]
        self.inputs[0].set_data_from_numpy(np.array([b"go"], dtype=np.object_))
        self.inputs[1].set_data_from_numpy(np.array([answers], dtype=np.int32))

    def request(self) -> tuple[int, float]:
        """Answers received (the empty final one aside), and seconds to the first."""
        started = time.perf_counter()
        self.client.async_stream_infer(MODEL, self.inputs, enable_empty_final_response=True)
        received, first = 0, 0.0
        while True:
            result, error = self.results.get(timeout=60)
            if error is not None:
                raise RuntimeError(f"grpc stream: {error}")
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param:
                return received, first
            if not received:
                first = time.perf_counter() - started
            received += 1

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


class GenerateStream:
    """``generate_stream`` requests on one kept-alive HTTP connection."""

    def __init__(self, port: int, answers: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.body = json.dumps({"text_input": "go", "COUNT": answers}).encode()

    def request(self) -> tuple[int, float]:
        started = time.perf_counter()
        self.connection.request(
            "POST", f"/v2/models/{MODEL}/generate_stream", self.body, {"content-type": "application/json"}
        )
        reply = self.connection.getresponse()
        if reply.status != 200:
            raise RuntimeError(f"generate_stream: HTTP {reply.status}: {reply.read()[:300]!r}")
        received, first = 0, 0.0
        for line in reply:
            if line.startswith(b"data: "):
                if not received:
                    first = time.perf_counter() - started
                received += 1
        reply.read()
        return received, first

    def close(self) -> None:
        self.connection.close()


def measure(client: GrpcStream | GenerateStream, pid: int, requests: int) -> dict[str, float]:
    cpu, started = process_tree_cpu(pid), time.perf_counter()
    answers, firsts = 0, []
    for _ in range(requests):
        received, first = client.request()
        answers += received
        firsts.append(first)
    wall = time.perf_counter() - started
    used = process_tree_cpu(pid) - cpu
    return {
        "answers_per_s": answers / wall,
        "server_cpu_us_per_answer": used / max(answers, 1) * 1e6,
        "first_answer_ms": statistics.median(firsts) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--answers", type=int, default=64, help="answers per request")
    add_options(parser, "decoupled_vs_triton", requests=60)
    args = parser.parse_args()
    console = Console()
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repo"
        write_model(repository)
        with triton_and_trt(args.peers, args.venv, repository, MODEL) as servers:
            makers: dict[str, Callable[[Served], GrpcStream | GenerateStream]] = {
                "grpc stream": lambda served: GrpcStream(f"127.0.0.1:{served.grpc_port}", args.answers),
                "generate_stream": lambda served: GenerateStream(served.http_port, args.answers),
            }
            clients = {
                (route, name): make(served)
                for route, make in makers.items()
                for name, served in servers.items()
            }
            try:
                for (_, name), client in clients.items():
                    measure(client, servers[name].process.pid, 5)  # warm-up
                for round_index, order in rounds_in_turn(args.rounds):
                    for route in makers:
                        for name in order:
                            console.log(f"round {round_index + 1}/{args.rounds} {route} {name}")
                            result = measure(clients[route, name], servers[name].process.pid, args.requests)
                            rows.append({"round": round_index, "route": route, "server": name, **result})
            finally:
                for client in clients.values():
                    client.close()
    title = f"{args.answers} answers per request, one request at a time: trt / Triton 2.51 per round"
    groups = {
        "grpc stream": ["answers_per_s", "server_cpu_us_per_answer"],
        "generate_stream": ["answers_per_s", "server_cpu_us_per_answer", "first_answer_ms"],
    }
    table, summary = ratio_table(title, rows, groups, group_key="route")
    console.print(table)
    write_results(args.output, rows, summary, console)


if __name__ == "__main__":
    main()
