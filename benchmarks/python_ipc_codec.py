"""The CPU cost of encoding and decoding the messages between the server and a Python model's
process: ``trt_pb_wire`` (JSON and blobs; every message since 2026-11-28) against pickle, the floor
(the rings carried pickles until then, read by an unpickler that admitted plain data's globals).

The messages are the ones one add_sub request sends (an ``execute`` with two arena tensors, its
``result``), one streamed token of a generative model (a decoupled ``response``), a BYTES tensor of
1,000 elements inline (all of one length, and of lengths 1-64), and a spill-sized BYTES tensor of
200,000.
Each is encoded and decoded ``--repeat`` times per round, pickle and wire alternating in the same
process (so other load on the machine hits both alike); the table shows the median of the rounds
and the ratio wire / pickle.

    flock /tmp/trt-bench.lock python benchmarks/python_ipc_codec.py [--rounds 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trt.server.backends.python.stub import trt_pb_wire  # noqa: E402

CODEC = trt_pb_wire.Codec("5b1c0f7e9a2d4c6b8e0f1a3c5d7e9f1b")  # the server draws 32 hex digits

ARENA = [("shm", "INPUT0", "INT32", (16,), 64), ("shm", "INPUT1", "INT32", (16,), 192)]
OUTPUTS = [("shm", "OUTPUT0", "INT32", (16,), 64), ("shm", "OUTPUT1", "INT32", (16,), 192)]
# Text of many lengths, as tokens and sentences come: pickle cuts them in C, the codec in a loop.
MIXED_LENGTHS = [b"x" * (1 + i % 64) for i in range(1000)]
MESSAGES: dict[str, tuple[Any, int]] = {  # name: (message, repeat divisor)
    "execute (add_sub)": (("execute", 12345, 0, [("", ARENA, ("OUTPUT0", "OUTPUT1"), {}, 0, 0)]), 1),
    "result (add_sub)": (
        (
            "result",
            12345,
            {"responses": [{"error": None, "outputs": OUTPUTS, "parameters": {}}], "started_ns": 2**60},
        ),
        1,
    ),
    "response, one token (a BYTES x1 and a UINT32)": (
        (
            "response",
            7,
            0,
            {
                "error": None,
                "outputs": {
                    "text_output": np.array([b" token"], dtype=np.object_),
                    "num_output_tokens": np.array([1], dtype=np.uint32),
                },
                "parameters": {},
            },
            False,
        ),
        1,
    ),
    "BYTES x1,000 inline": (
        (
            "execute",
            1,
            None,
            [("", [("inline", "T", np.array([b"token"] * 1000, dtype=np.object_))], ("Y",), {}, 0, 0)],
        ),
        50,
    ),
    "BYTES x1,000 inline, lengths 1-64": (
        (
            "execute",
            1,
            None,
            [("", [("inline", "T", np.array(MIXED_LENGTHS, dtype=np.object_))], ("Y",), {}, 0, 0)],
        ),
        50,
    ),
    "BYTES x200,000 (a spill)": (
        ("result", 1, {"T": np.array([b"abcdefgh"] * 200_000, dtype=np.object_)}),
        5000,
    ),
}


def per_call_us(function: Callable[[], object], repeat: int) -> float:
    return timeit.timeit(function, number=repeat) / repeat * 1e6


def measure(message: Any, repeat: int) -> dict[str, float]:
    pickled = pickle.dumps(message, protocol=5)
    wired = CODEC.encode(message)
    return {
        "pickle_encode_us": per_call_us(lambda: pickle.dumps(message, protocol=5), repeat),
        "wire_encode_us": per_call_us(lambda: CODEC.encode(message), repeat),
        "pickle_decode_us": per_call_us(lambda: pickle.loads(pickled), repeat),
        "wire_decode_us": per_call_us(lambda: CODEC.decode(wired), repeat),
        "pickle_bytes": len(pickled),
        "wire_bytes": len(wired),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5000, help="calls per round for the small messages")
    parser.add_argument(
        "--json", type=Path, default=ROOT / "reports" / "benchmarks" / "python_ipc_codec.json"
    )
    args = parser.parse_args()
    results = {}
    for name, (message, divisor) in MESSAGES.items():
        rounds = [measure(message, max(1, args.repeat // divisor)) for _ in range(args.rounds)]
        results[name] = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    table = Table(title=f"Encode + decode per message, median of {args.rounds} rounds (us)")
    for column in ("message", "pickle", "wire", "wire / pickle", "bytes pickle / wire"):
        table.add_column(column, justify="left" if column == "message" else "right")
    for name, r in results.items():
        pickle_us = r["pickle_encode_us"] + r["pickle_decode_us"]
        wire_us = r["wire_encode_us"] + r["wire_decode_us"]
        r["ratio"] = wire_us / pickle_us
        table.add_row(
            name,
            f"{r['pickle_encode_us']:.1f} + {r['pickle_decode_us']:.1f}",
            f"{r['wire_encode_us']:.1f} + {r['wire_decode_us']:.1f}",
            f"{r['ratio']:.1f}x",
            f"{int(r['pickle_bytes'])} / {int(r['wire_bytes'])}",
        )
    Console().print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    Console().print(f"written {args.json}")


if __name__ == "__main__":
    main()
