"""Servers that are not trt: one without the model-config call, statistics or binary tensors (as MLServer
and KServe), and what trt perf sends, recorded: sequence flags, shared-memory parameters."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tests.perf.perf_support import FAST, RecordingServer, run_perf

ECHO = {
    "name": "echo",
    "platform": "mlserver",
    "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 4]}],
}
SEQ = {
    "name": "seq",
    "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [-1, 1]}],
    "outputs": [{"name": "OUTPUT", "datatype": "INT32", "shape": [-1, 1]}],
}
SEQ_CONFIG = {
    "name": "seq",
    "max_batch_size": 4,
    "sequence_batching": {"max_sequence_idle_microseconds": 1000000},
    "input": [{"name": "INPUT", "data_type": "TYPE_INT32", "dims": [1]}],
    "output": [{"name": "OUTPUT", "data_type": "TYPE_INT32", "dims": [1]}],
}


def test_a_server_without_model_config_is_measured_from_metadata() -> None:
    with RecordingServer({"echo": ECHO}) as server:
        run = run_perf("-m", "echo", "-u", server.url, "--concurrency", "2", "-b", "2", "--json", *FAST)
    assert run.returncode == 0, run
    report = run.report
    assert report["model_source"] == "metadata" and report["input_format"] == "json"
    assert report["server_stats"] is False and report["results"][0]["server"] is None
    assert report["results"][0]["error_count"] == 0
    assert any("no model-config call" in w for w in report["warnings"])
    request = server.received[-1]
    assert not request["_binary"]
    assert request["inputs"][0]["shape"] == [2, 4] and len(request["inputs"][0]["data"]) == 8


def _sequences(received: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    by_id: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for request in received:
        parameters = request["parameters"]
        by_id[parameters["sequence_id"]].append(parameters)
    return by_id


def test_sequence_requests_carry_ids_and_start_end_flags() -> None:
    with RecordingServer({"seq": SEQ}, {"seq": SEQ_CONFIG}) as server:
        run = run_perf(
            "-m",
            "seq",
            "-u",
            server.url,
            "--concurrency",
            "3",
            "--sequence-length",
            "5",
            "--sequence-id-range",
            "100:10000",
            "--json",
            *FAST,
        )
    assert run.returncode == 0, run
    assert run.report["async"] is True  # perf_analyzer's default for sequence models
    sequences = _sequences(server.received)
    assert len(sequences) > 10 and all(100 <= i < 10000 for i in sequences)
    for steps in sequences.values():
        # Ids are not reused within a run this short: each id is one sequence, start first, end last.
        assert steps[0]["sequence_start"] and steps[-1]["sequence_end"]
        assert not any(s["sequence_start"] for s in steps[1:]) and not any(
            s["sequence_end"] for s in steps[:-1]
        )
        assert len(steps) <= 6  # 5 +- 20%
    full = [len(s) for s in sequences.values()]
    assert sum(4 <= n <= 6 for n in full) >= len(full) - 3  # the level's end cuts at most one per slot short
    # At most three sequences (the concurrency) are open at any time.
    open_now: set[int] = set()
    for request in server.received:
        parameters = request["parameters"]
        if parameters["sequence_start"]:
            open_now.add(parameters["sequence_id"])
            assert len(open_now) <= 3
        if parameters["sequence_end"]:
            open_now.discard(parameters["sequence_id"])


def test_shared_memory_regions_are_registered_used_and_released() -> None:
    with RecordingServer({"echo": ECHO}) as server:
        run = run_perf(
            "-m",
            "echo",
            "-u",
            server.url,
            "--shared-memory",
            "system",
            "--output-shared-memory-size",
            "4096",
            "--concurrency",
            "1",
            "--json",
            *FAST,
        )
    assert run.returncode == 0, run
    actions = [(action, body.get("byte_size")) for action, _, body in server.shm_calls]
    assert actions == [("register", 16), ("register", 4096), ("unregister", None), ("unregister", None)]
    inputs, outputs = server.received[-1]["inputs"], server.received[-1]["outputs"]
    assert inputs[0]["parameters"]["shared_memory_region"].endswith("_in")
    assert inputs[0]["parameters"]["shared_memory_byte_size"] == 16 and "data" not in inputs[0]
    assert outputs[0]["parameters"]["shared_memory_region"].endswith("_out")
