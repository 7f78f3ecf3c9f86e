"""Business logic scripting, trt against NVIDIA Triton 2.51: a Python model that calls another
Python model ``--calls`` times per request (``pb_utils.InferenceRequest(...).exec()``, each call's
output the next call's input), one request at a time over HTTP.

Per run: BLS calls per second and CPU time per call, for the server's own process and for each
model process (the caller and the called), so that where each server spends a call shows. Rounds
alternate the servers' order; the table gives each round's trt / Triton ratio and their median.
One run on one machine: compare the ratios.

    flock /tmp/trt-bench.lock python benchmarks/bls_vs_triton.py --peers /tmp/trt-peers
        [--calls 50] [--requests 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import tritonclient.http as httpclient
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _side_by_side import add_options, ratio_table, rounds_in_turn, triton_and_trt, write_results  # noqa: E402

CALLED_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
CALLED_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(request, "X").as_numpy() + 1)]
            )
            for request in requests
        ]
"""
CALLER_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "CALLS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
CALLER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            calls = int(pb_utils.get_input_tensor_by_name(request, "CALLS").as_numpy()[0])
            x = np.zeros(4, np.int32)
            for _ in range(calls):
                answer = pb_utils.InferenceRequest(
                    model_name="called", inputs=[pb_utils.Tensor("X", x)], requested_output_names=["Y"]
                ).exec()
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                x = pb_utils.get_output_tensor_by_name(answer, "Y").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
"""


def write_models(repository: Path) -> None:
    for name, config, source in (("called", CALLED_CONFIG, CALLED_PY), ("caller", CALLER_CONFIG, CALLER_PY)):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(config)
        (repository / name / "1" / "model.py").write_text(source)


def cpu_by_process(pid: int) -> dict[int, float]:
    root = psutil.Process(pid)
    seconds = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
            seconds[process.pid] = times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return seconds


def measure(
    client: httpclient.InferenceServerClient, pid: int, calls: int, requests: int
) -> dict[str, float]:
    tensor = httpclient.InferInput("CALLS", [1], "INT32")
    tensor.set_data_from_numpy(np.array([calls], np.int32))
    before, started = cpu_by_process(pid), time.perf_counter()
    for _ in range(requests):
        result = client.infer("caller", [tensor])
    wall = time.perf_counter() - started
    after = cpu_by_process(pid)
    if result.as_numpy("Y").tolist() != [calls] * 4:
        raise RuntimeError(f"caller answered {result.as_numpy('Y')}")
    total = calls * requests
    server = (after[pid] - before[pid]) / total * 1e6
    models = sorted((after[p] - before.get(p, 0.0)) / total * 1e6 for p in after if p != pid)
    busy = [us for us in models if us > 1.0]  # the caller's and the called model's processes
    return {
        "calls_per_s": total / wall,
        "cpu_us_per_call": server + sum(busy),
        "server_us_per_call": server,
        "model_processes_us_per_call": sum(busy),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=50, help="BLS calls per request")
    add_options(parser, "bls_vs_triton", requests=20)
    args = parser.parse_args()
    console = Console()
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repo"
        write_models(repository)
        with triton_and_trt(args.peers, args.venv, repository, "caller") as servers:
            clients = {
                name: httpclient.InferenceServerClient(f"127.0.0.1:{served.http_port}")
                for name, served in servers.items()
            }
            for name, served in servers.items():
                measure(clients[name], served.process.pid, args.calls, 2)  # warm-up
            for round_index, order in rounds_in_turn(args.rounds):
                for name in order:
                    console.log(f"round {round_index + 1}/{args.rounds} {name}")
                    result = measure(clients[name], servers[name].process.pid, args.calls, args.requests)
                    rows.append({"round": round_index, "server": name, **result})
    measures = ["calls_per_s", "cpu_us_per_call", "server_us_per_call", "model_processes_us_per_call"]
    title = f"BLS, {args.calls} calls per request, one request at a time: trt / Triton 2.51 per round"
    table, summary = ratio_table(title, rows, {"BLS": measures})
    console.print(table)
    write_results(args.output, rows, summary, console)


if __name__ == "__main__":
    main()
