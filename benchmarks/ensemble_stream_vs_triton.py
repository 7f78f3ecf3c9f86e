"""An ensemble over a decoupled model (the pre-process -> LLM -> post-process shape), streamed by trt
and by NVIDIA Triton 2.51.

The repository (written here, the same folder for both servers) holds ``tokens``, a decoupled Python
model that sends ``--answers`` token ids at once from ``execute()``, ``detok``, a Python model that
spends ``--post-ms`` of CPU on each (a detokenizer's work) with ``--post-instances`` instances, and
``pipeline``, the ensemble of the two. One request at a time over tritonclient's gRPC stream; per run:
answers per second, the time to the last answer, the server's CPU time per answer (its process and
its model processes) and how many answers came out of the order ``tokens`` sent them in. Rounds
alternate the servers' order; the table gives each round's trt / Triton ratio and their median. One
run on one machine: compare the ratios.

    flock /tmp/trt-bench.lock python benchmarks/ensemble_stream_vs_triton.py --peers /tmp/trt-peers
        [--answers 32] [--post-ms 2] [--post-instances 2] [--requests 10] [--rounds 5]
"""

from __future__ import annotations

import argparse
import itertools
import queue
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import process_tree_cpu  # noqa: E402
from _side_by_side import add_options, ratio_table, rounds_in_turn, triton_and_trt, write_results  # noqa: E402

TOKENS_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "TOKEN" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
TOKENS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            for token in range(count):
                answer = pb_utils.Tensor("TOKEN", np.array([token], np.int32))
                sender.send(pb_utils.InferenceResponse([answer]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
DETOK_CONFIG = """
backend: "python"
max_batch_size: 0
input [ {{ name: "TOKEN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "TOKEN_OUT" data_type: TYPE_INT32 dims: [ 1 ] }}
]
instance_group [ {{ kind: KIND_CPU count: {instances} }} ]
"""
DETOK_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            token = pb_utils.get_input_tensor_by_name(request, "TOKEN").as_numpy()
            busy_until = time.thread_time() + {seconds}
            while time.thread_time() < busy_until:  # a detokenizer's CPU, not a sleep
                pass
            text = np.array([f" t{{int(token[0])}}".encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("TEXT", text), pb_utils.Tensor("TOKEN_OUT", token)
            ]))
        return responses
"""
PIPELINE_CONFIG = """
platform: "ensemble"
max_batch_size: 0
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }, { name: "TOKEN" data_type: TYPE_INT32 dims: [ 1 ] }
]
ensemble_scheduling { step [
  { model_name: "tokens" model_version: -1 input_map { key: "COUNT" value: "COUNT" }
    output_map { key: "TOKEN" value: "token" } },
  { model_name: "detok" model_version: -1 input_map { key: "TOKEN" value: "token" }
    output_map { key: "TEXT" value: "TEXT" } output_map { key: "TOKEN_OUT" value: "TOKEN" } }
] }
"""


def write_models(repository: Path, post_ms: float, post_instances: int) -> None:
    models = {
        "tokens": (TOKENS_CONFIG, TOKENS_PY),
        "detok": (DETOK_CONFIG.format(instances=post_instances), DETOK_PY.format(seconds=post_ms / 1e3)),
        "pipeline": (PIPELINE_CONFIG, None),
    }
    for name, (config, source) in models.items():
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(config)
        if source is not None:
            (repository / name / "1" / "model.py").write_text(source)


class Stream:
    """One tritonclient gRPC stream, kept open across runs."""

    def __init__(self, url: str, answers: int) -> None:
        import tritonclient.grpc as grpcclient

        self.results: queue.Queue[tuple[object, object]] = queue.Queue()
        self.client = grpcclient.InferenceServerClient(url)
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))
        self.count = grpcclient.InferInput("COUNT", [1], "INT32")
        self.count.set_data_from_numpy(np.array([answers], dtype=np.int32))
        self.answers = answers

    def request(self) -> tuple[float, int]:
        """Seconds to the last answer, and how many answers came before one sent earlier."""
        started = time.perf_counter()
        self.client.async_stream_infer("pipeline", [self.count])
        tokens = []
        for _ in range(self.answers):
            result, error = self.results.get(timeout=60)
            if error is not None:
                raise RuntimeError(f"stream: {error}")
            tokens.append(int(result.as_numpy("TOKEN")[0]))  # type: ignore[attr-defined]
        seconds = time.perf_counter() - started
        if sorted(tokens) != list(range(self.answers)):
            raise RuntimeError(f"answers missing or repeated: {tokens}")
        return seconds, sum(1 for a, b in itertools.pairwise(tokens) if b < a)

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def measure(stream: Stream, pid: int, requests: int) -> dict[str, float]:
    cpu, started = process_tree_cpu(pid), time.perf_counter()
    lasts, reordered = [], 0
    for _ in range(requests):
        seconds, out_of_order = stream.request()
        lasts.append(seconds)
        reordered += out_of_order
    wall = time.perf_counter() - started
    answers = stream.answers * requests
    return {
        "answers_per_s": answers / wall,
        "last_answer_ms": statistics.median(lasts) * 1e3,
        "server_cpu_us_per_answer": (process_tree_cpu(pid) - cpu) / answers * 1e6,
        "out_of_order_answers": float(reordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--answers", type=int, default=32, help="answers of the decoupled step per request")
    parser.add_argument("--post-ms", type=float, default=2.0, help="CPU the step after it spends per answer")
    parser.add_argument("--post-instances", type=int, default=2, help="instances of the step after it")
    add_options(parser, "ensemble_stream_vs_triton", requests=10)
    args = parser.parse_args()
    console = Console()
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repo"
        write_models(repository, args.post_ms, args.post_instances)
        with triton_and_trt(args.peers, args.venv, repository, "pipeline") as servers:
            streams = {name: Stream(f"127.0.0.1:{s.grpc_port}", args.answers) for name, s in servers.items()}
            try:
                for name, stream in streams.items():
                    measure(stream, servers[name].process.pid, 2)  # warm-up
                for round_index, order in rounds_in_turn(args.rounds):
                    for name in order:
                        console.log(f"round {round_index + 1}/{args.rounds} {name}")
                        result = measure(streams[name], servers[name].process.pid, args.requests)
                        rows.append({"round": round_index, "server": name, **result})
            finally:
                for stream in streams.values():
                    stream.close()
    title = (
        f"pipeline: {args.answers} answers per request, {args.post_ms:g} ms of CPU each after them on "
        f"{args.post_instances} instances, one request at a time: trt / Triton 2.51 per round"
    )
    measures = ["answers_per_s", "last_answer_ms", "server_cpu_us_per_answer"]
    table, summary = ratio_table(title, rows, {"": measures})
    console.print(table)
    for name in ("triton", "trt"):
        reordered = sum(float(r["out_of_order_answers"]) for r in rows if r["server"] == name)  # type: ignore[arg-type]
        console.print(f"{name}: {reordered:.0f} answers came before one sent earlier")
    write_results(args.output, rows, summary, console)


if __name__ == "__main__":
    main()
