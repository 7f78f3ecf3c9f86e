"""The example generative model (tiny_llm) served by trt and by NVIDIA Triton 2.51, streamed.

The same model folder (model.py written to the vLLM backend's contract) is loaded by both servers at
once; the targets are then measured in turn, round after round (interleaved, so that the noise of
this shared machine falls on all of them alike):

- ``triton generate_stream``: Triton's ``/v2/models/tiny_llm/generate_stream`` (the peer);
- ``trt generate_stream``: the same route on trt;
- ``trt /v1/completions``: trt's OpenAI-compatible front end, streamed (``stream_options.include_usage``).

Each run sends greedy requests of ``--tokens`` tokens from ``--concurrency`` client threads and
records, per request, the time to the first event with text (TTFT), the mean gap between tokens
after it (ITL), and the tokens the server reports; per run, output tokens per second and the server's
CPU time (its process and model processes) per token. It also checks that the first greedy answer is
the same text from every target. One run on one machine: compare the ratios.

Triton's Python backend runs model.py in an interpreter of its own; tiny_llm needs torch, tokenizers
and safetensors there, so Triton is given a private virtual environment that sees this Python's
packages, with Triton's own numpy (1.x) in front (``--venv``, made once).

    flock /tmp/trt-bench.lock python benchmarks/generative_vs_triton.py --peers /tmp/trt-peers
        [--concurrency 1,8] [--tokens 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import csv
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import free_port, process_tree_cpu, wait_model_ready  # noqa: E402

MODEL = "tiny_llm"
PROMPT = "trt serve speaks Triton's protocol"


@dataclass(frozen=True)
class Target:
    name: str
    port: int
    path: str
    openai: bool  # an OpenAI stream (else Triton's generate_stream)
    pid: int  # the server, for its CPU time


@dataclass(frozen=True)
class Sample:
    ttft_s: float
    itl_s: float | None
    tokens: int
    text: str


def request_body(target: Target, tokens: int) -> bytes:
    if target.openai:
        body: dict[str, object] = {
            "model": MODEL, "prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True},
        }  # fmt: skip
    else:
        sampling = {"max_tokens": tokens, "temperature": 0, "ignore_eos": True}
        body = {
            "text_input": PROMPT, "stream": True, "exclude_input_in_output": True,
            "sampling_parameters": json.dumps(sampling), "return_num_output_tokens": True,
        }  # fmt: skip
    return json.dumps(body).encode()


def stream_once(target: Target, body: bytes) -> Sample:
    """One streamed request: when each event with text arrived, and the tokens the server counted."""
    connection = http.client.HTTPConnection("127.0.0.1", target.port, timeout=120)
    try:
        started = time.perf_counter()
        connection.request("POST", target.path, body, {"content-type": "application/json"})
        reply = connection.getresponse()
        if reply.status != 200:
            raise RuntimeError(f"{target.name}: HTTP {reply.status}: {reply.read()[:500]!r}")
        arrivals, pieces, tokens = [], [], 0
        for line in reply:
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                break
            event = json.loads(payload)
            if "error" in event:
                raise RuntimeError(f"{target.name}: {event['error']}")
            if target.openai:
                text = event["choices"][0]["text"] if event["choices"] else ""
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
            else:
                text = event["text_output"]
                tokens += int(event.get("num_output_tokens", 0))
            if text:
                arrivals.append(time.perf_counter())
                pieces.append(text)
    finally:
        connection.close()
    if not arrivals:
        raise RuntimeError(f"{target.name}: the stream carried no text")
    itl = (arrivals[-1] - arrivals[0]) / (tokens - 1) if tokens > 1 else None
    return Sample(arrivals[0] - started, itl, tokens, "".join(pieces))


def run(target: Target, concurrency: int, per_client: int, tokens: int) -> tuple[dict[str, object], str]:
    body = request_body(target, tokens)
    samples: list[Sample] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def client() -> None:
        try:
            for _ in range(per_client):
                sample = stream_once(target, body)
                with lock:
                    samples.append(sample)
        except BaseException as exc:
            failures.append(exc)

    cpu_before, started = process_tree_cpu(target.pid), time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall, cpu = time.perf_counter() - started, process_tree_cpu(target.pid) - cpu_before
    if failures:
        raise failures[0]
    total = sum(s.tokens for s in samples)
    itls = [s.itl_s for s in samples if s.itl_s is not None]
    row = {
        "target": target.name,
        "concurrency": concurrency,
        "requests": len(samples),
        "output_tokens_per_s": total / wall,
        "ttft_ms": statistics.fmean(s.ttft_s for s in samples) * 1e3,
        "itl_ms": statistics.fmean(itls) * 1e3 if itls else float("nan"),
        "server_cpu_ms_per_100_tokens": cpu / max(total, 1) * 1e5,
    }
    return row, samples[0].text


def genai_venv(peers: Path, path: Path) -> Path:
    """A virtual environment for Triton's Python backend: this Python's packages (torch, tokenizers,
    safetensors), with the numpy Triton's stub was built for in front."""
    if not (path / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(path)], check=True)
        triton_numpy = subprocess.run(
            [str(peers / "venv-triton" / "bin" / "python"), "-c", "import numpy; print(numpy.__version__)"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        subprocess.run([str(path / "bin" / "pip"), "install", "-q", f"numpy=={triton_numpy}"], check=True)
    return path


def start_triton(
    peers: Path, venv: Path, repo: Path, ports: tuple[int, int, int], log: Path
) -> subprocess.Popen[bytes]:
    site = (peers / "triton" / "site-packages.path").read_text().strip()
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": f"{site}/nvidia_pytriton.libs",
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",  # the Python the backend's stub runs
    }
    http_port, grpc_port, metrics_port = ports
    command = [
        str(peers / "triton" / "bin" / "tritonserver"), f"--model-repository={repo}",
        f"--backend-directory={peers / 'triton' / 'backends'}",
        f"--cache-directory={peers / 'triton' / 'caches'}",
        "--http-address=127.0.0.1", f"--http-port={http_port}", "--grpc-address=127.0.0.1",
        f"--grpc-port={grpc_port}", "--allow-metrics=false", f"--metrics-port={metrics_port}",
        "--allow-sagemaker=false", "--allow-vertex-ai=false", "--log-info=false",
    ]  # fmt: skip
    return subprocess.Popen(command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def start_trt(
    repo: Path, ports: tuple[int, int, int], openai_port: int, flags: list[str], log: Path
) -> subprocess.Popen[bytes]:
    http_port, grpc_port, metrics_port = ports
    command = [
        sys.executable, "-m", "trt", "serve", f"--model-repository={repo}", "--log-info=false",
        "--http-address=127.0.0.1", f"--http-port={http_port}", "--grpc-address=127.0.0.1",
        f"--grpc-port={grpc_port}", f"--metrics-port={metrics_port}", "--allow-openai=true",
        "--openai-address=127.0.0.1", f"--openai-port={openai_port}", *flags,
    ]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def distinct_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--peers", type=Path, default=Path("/tmp/trt-peers"))
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "trt-triton-genai-venv")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--requests", type=int, default=4, help="per client thread and run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trt-flag", action="append", default=[], help="more flags for trt serve")
    parser.add_argument(
        "--output", type=Path, default=ROOT / "reports" / "benchmarks" / "generative_vs_triton"
    )
    args = parser.parse_args()
    if not (args.peers / "triton" / "bin" / "tritonserver").exists():
        raise SystemExit(f"Triton not found under {args.peers}: run ../shared/peers/setup.sh first")
    levels = [int(c) for c in args.concurrency.split(",")]
    venv = genai_venv(args.peers, args.venv)
    console = Console()
    rows: list[dict[str, object]] = []
    texts: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(ROOT / "model_repository" / MODEL, repo / MODEL)
        ports = distinct_ports(7)  # the kernel may hand out a port twice in a row once it is closed
        triton_ports, trt_ports, openai_port = (
            (ports[0], ports[1], ports[2]),
            (ports[3], ports[4], ports[5]),
            ports[6],
        )
        logs = Path(tmp) / "triton.log", Path(tmp) / "trt.log"
        triton, trt = (
            start_triton(args.peers, venv, repo, triton_ports, logs[0]),
            start_trt(repo, trt_ports, openai_port, args.trt_flag, logs[1]),
        )
        try:
            wait_model_ready(triton_ports[0], triton, MODEL, 180)
            wait_model_ready(trt_ports[0], trt, MODEL, 180)
            stream_path = f"/v2/models/{MODEL}/generate_stream"
            targets = [
                Target("triton generate_stream", triton_ports[0], stream_path, False, triton.pid),
                Target("trt generate_stream", trt_ports[0], stream_path, False, trt.pid),
                Target("trt /v1/completions", openai_port, "/v1/completions", True, trt.pid),
            ]
            for target in targets:  # warm-up: first requests pay for lazy imports and caches
                run(target, 1, 2, args.tokens)
            for round_index in range(args.rounds):
                for concurrency in levels:
                    for target in targets:
                        row, text = run(target, concurrency, args.requests, args.tokens)
                        rows.append({**row, "round": round_index})
                        texts.setdefault(target.name, text)
                        console.log(f"round {round_index + 1}/{args.rounds} c={concurrency} {target.name}")
        except Exception:
            for log in logs:  # what the servers said, to tell a server's failure from the client's
                console.print(
                    f"--- {log.name}, last lines:\n"
                    + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                )
            raise
        finally:
            for process in (triton, trt):
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
    report(console, rows, levels, list(dict.fromkeys(str(r["target"]) for r in rows)), texts, args.output)


def report(
    console: Console,
    rows: list[dict[str, object]],
    levels: list[int],
    names: list[str],
    texts: dict[str, str],
    output: Path,
) -> None:
    metrics = ("output_tokens_per_s", "ttft_ms", "itl_ms", "server_cpu_ms_per_100_tokens")
    summary = []
    for concurrency in levels:
        for name in names:
            runs = [r for r in rows if r["target"] == name and r["concurrency"] == concurrency]
            medians = {m: statistics.median(float(r[m]) for r in runs) for m in metrics}  # type: ignore[arg-type]
            summary.append({"target": name, "concurrency": concurrency, "runs": len(runs), **medians})
    table = Table(title=f"tiny_llm streamed, medians of interleaved runs (greedy, {MODEL})")
    for column in ("target", "concurrency", "tokens/s", "TTFT ms", "ITL ms", "server CPU ms/100 tok",
                   "tokens/s vs Triton", "CPU/token vs Triton"):  # fmt: skip
        table.add_column(column, justify="right")
    for row in summary:
        peer = next(r for r in summary if r["concurrency"] == row["concurrency"] and r["target"] == names[0])
        table.add_row(
            str(row["target"]), str(row["concurrency"]), f"{row['output_tokens_per_s']:,.0f}",
            f"{row['ttft_ms']:.1f}", f"{row['itl_ms']:.2f}", f"{row['server_cpu_ms_per_100_tokens']:.1f}",
            f"{row['output_tokens_per_s'] / peer['output_tokens_per_s']:.2f}",
            f"{row['server_cpu_ms_per_100_tokens'] / peer['server_cpu_ms_per_100_tokens']:.2f}",
        )  # fmt: skip
    console.print(table)
    same = len(set(texts.values())) == 1
    console.print(f"first greedy answer identical on every target: {'yes' if same else 'NO'}")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".json").write_text(
        json.dumps({"summary": summary, "runs": rows, "same_greedy_text": same, "texts": texts}, indent=2)
    )
    with output.with_suffix(".csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(summary[0]))
        writer.writeheader()
        writer.writerows(summary)
    console.print(f"wrote {output.with_suffix('.json')} and {output.with_suffix('.csv')}")


if __name__ == "__main__":
    main()
