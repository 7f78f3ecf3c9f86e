"""The pure parts of trt perf: ranges, percentiles, stability, gates, CSV columns, input data, framing."""

from __future__ import annotations

import base64
import csv
import itertools
import struct
from pathlib import Path

import numpy as np
import orjson
import pytest

from trt.perf.encoding import HttpFramer, http_request
from trt.perf.errors import InputDataError, OptionError
from trt.perf.input_data import load_input_data
from trt.perf.measurement import ClientUsage, LevelResult, latency_stats, percentile_index
from trt.perf.model_info import ModelInfo, TensorSpec, from_config, from_metadata
from trt.perf.options import Distribution, LoadKind
from trt.perf.ranges import concurrency_levels, parse_shapes, rate_levels
from trt.perf.report import baseline, csv_report, gates, json_report
from trt.perf.results import ProfileReport
from trt.perf.schedule import ScheduleSpec, arrivals
from trt.perf.server_stats import ServerBreakdown
from trt.perf.stability import is_stable
from trt.perf.transport.http_wire import chunked_body_end, parse_head

SIMPLE = ModelInfo(
    "simple",
    "",
    (TensorSpec("INPUT0", "INT32", (16,)), TensorSpec("INPUT1", "INT32", (16,))),
    (TensorSpec("OUTPUT0", "INT32", (16,)),),
    batching=True,
    max_batch_size=8,
)


def test_concurrency_shorthand_doubles_and_the_perf_analyzer_spelling_steps_by_one() -> None:
    assert concurrency_levels("1:64", doubling_by_default=True) == [1, 2, 4, 8, 16, 32, 64]
    assert concurrency_levels("1:20", doubling_by_default=True) == [1, 2, 4, 8, 16, 20]
    assert concurrency_levels("1:4", doubling_by_default=False) == [1, 2, 3, 4]
    assert concurrency_levels("2:10:4", doubling_by_default=True) == [2, 6, 10]
    assert concurrency_levels("8", doubling_by_default=True) == [8]
    with pytest.raises(OptionError, match="START <= END"):
        concurrency_levels("8:2", True)
    assert rate_levels("100:300:100") == [100, 200, 300]
    assert rate_levels("50") == [50]
    assert parse_shapes(["IMAGE:3,224,224"]) == {"IMAGE": (3, 224, 224)}


def test_percentiles_use_perf_analyzers_index_formula() -> None:
    latencies = np.arange(1, 11)  # 1..10 us
    stats = latency_stats(latencies, extra_percentile=75)
    # sorted[int(p/100*(n-1)+0.5)]: p50 -> index 5 (value 6), p90 -> 8 (9), p99 -> 9 (10), p75 -> 7 (8)
    assert stats.percentiles == {50: 6, 75: 8, 90: 9, 95: 10, 99: 10}
    assert percentile_index(50, 10) == 5
    assert (stats.min_us, stats.max_us, stats.avg_us) == (1, 10, 5.5)


def test_stability_needs_three_windows_within_the_percentage() -> None:
    assert not is_stable([100, 100], [10, 10], 10)
    assert is_stable([100, 105, 109], [10, 10.5, 10.9], 10)
    assert not is_stable([100, 105, 111], [10, 10, 10], 10)
    assert not is_stable([100, 100, 100], [10, 10, 12], 10)
    assert is_stable([100, 100, 100], [10, 10, 12], 10, check_latency=False)
    assert is_stable([50, 100, 101, 102], [1, 10, 10, 10], 10)  # only the last three count


def _result(level: float, throughput: float, p99: int, errors: int = 0) -> LevelResult:
    stats = latency_stats(np.array([p99 // 2] * 98 + [p99] * 2))
    server = ServerBreakdown(100, 100, 100, 300.0, 20.0, 10.0, 50.0, 5.0, 0, 0.0, 0, 0.0, {1: 100}, 0)
    return LevelResult(
        level=level,
        batch_size=1,
        throughput=throughput,
        request_throughput=throughput,
        response_throughput=throughput,
        request_count=100,
        error_count=errors,
        latency=stats,
        stabilizing_latency_us=stats.avg_us,
        client_send_us=7.0,
        client_recv_us=3.0,
        server=server,
        client=ClientUsage(0.2, 0.2, 50.0, 80.0),
        delayed_requests=0,
        sequences_completed=0,
        stable=True,
        trials=3,
    )


def _report(results: list[LevelResult], mode: LoadKind = LoadKind.CONCURRENCY) -> ProfileReport:
    return ProfileReport(
        model="simple",
        model_version="",
        url="localhost:8000",
        protocol="http",
        mode=mode,
        batch_size=1,
        async_mode=False,
        streaming=False,
        input_format="binary",
        output_format="binary",
        model_source="config",
        sequence_model=False,
        decoupled=False,
        response_cache=False,
        percentile=None,
        stability_percentage=10,
        measurement_interval_ms=5000,
        processes=1,
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
        results=tuple(results),
    )


def test_csv_has_perf_analyzers_columns_sorted_by_throughput(tmp_path: Path) -> None:
    path = tmp_path / "out.csv"
    csv_report.write_csv(_report([_result(1, 900.5, 2000), _result(2, 800.25, 3000)]), path)
    lines = path.read_text().splitlines()
    assert lines[0] == (
        "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
        "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
        "p50 latency,p90 latency,p95 latency,p99 latency"
    )
    assert [line.split(",")[0] for line in lines[1:]] == ["2", "1"]  # increasing Inferences/Second
    row = dict(zip(lines[0].split(","), lines[2].split(","), strict=True))
    # avg 1020 us - send 7 - recv 3 - (queue 20 + compute 65) = 925
    assert row["Network+Server Send/Recv"] == "925"
    assert row["Inferences/Second"] == "900.5" and row["p99 latency"] == "2000"
    verbose = tmp_path / "verbose.csv"
    csv_report.write_csv(_report([_result(1, 900.5, 2000)]), verbose, verbose=True)
    assert next(csv.reader(verbose.open()))[-3:] == ["Avg latency", "request/response", "response wait"]


def test_gates_parse_units_and_judge_the_sweep() -> None:
    report = _report([_result(1, 900, 2000), _result(8, 1500, 9000, errors=3)])
    outcomes = gates.evaluate(
        [
            gates.parse_gate(g)
            for g in (
                "p99<10ms",
                "p99@1<=2ms",
                "throughput>1000",
                "throughput@1>1000",
                "errors==3",
                "error_rate<2%",
                "avg < 5000us",
            )
        ],
        report,
    )
    assert [o.passed for o in outcomes] == [True, True, True, False, True, True, True]
    assert "throughput at concurrency 1 is 900.0 infer/s" in outcomes[3].message
    for bad, message in (("p99<20", "unit"), ("latency<2ms", "unknown metric"), ("p99 is small", "expected")):
        with pytest.raises(OptionError, match=message):
            gates.parse_gate(bad)


def test_baseline_comparison_flags_regressions_only_beyond_the_limit() -> None:
    # Levels without per-window figures: the point change decides, as a plain percentage gate would.
    old = json_report.report_dict(_report([_result(1, 1000, 2000)]))
    new = _report([_result(1, 950, 2100)])
    assert all(o.passed for o in baseline.compare_baseline(old, new, 10))
    worse = baseline.compare_baseline(old, _report([_result(1, 800, 3000)]), 10)
    assert [o.passed for o in worse] == [False, False]
    assert "REGRESSED" in worse[0].message
    assert not baseline.compare_baseline(old, _report([_result(4, 1000, 2000)]), 10)[0].passed


def test_json_input_data_with_shapes_b64_and_streams(tmp_path: Path) -> None:
    data = {
        "data": [
            {
                "INPUT0": list(range(16)),
                "INPUT1": {"b64": base64.b64encode(np.ones(16, "<i4").tobytes()).decode()},
            },
            {"INPUT0": {"content": [1] * 16, "shape": [16]}, "INPUT1": [[2] * 8, [2] * 8]},
        ]
    }
    path = tmp_path / "data.json"
    path.write_bytes(orjson.dumps(data))
    loaded = load_input_data(SIMPLE, (str(path),), {}, batch_size=2)
    (request,) = loaded.streams[0]
    assert request.arrays["INPUT0"].shape == (2, 16)
    assert request.arrays["INPUT1"][1].tolist() == [2] * 16
    path.write_bytes(orjson.dumps({"data": [{"INPUT0": [1] * 15, "INPUT1": [1] * 16}]}))
    with pytest.raises(InputDataError, match="expects 16 values"):
        load_input_data(SIMPLE, (str(path),), {}, batch_size=1)
    with pytest.raises(InputDataError, match="max_batch_size 8"):
        load_input_data(SIMPLE, ("random",), {}, batch_size=9)
    variable = ModelInfo("v", "", (TensorSpec("X", "FP32", (-1, 3)),), (), batching=True, max_batch_size=4)
    with pytest.raises(InputDataError, match="pass --shape X:4,3"):
        load_input_data(variable, ("zero",), {}, 1)
    assert load_input_data(variable, ("zero",), {"X": (5, 3)}, 1).streams[0][0].arrays["X"].shape == (1, 5, 3)


def test_bytes_inputs_go_out_length_prefixed() -> None:
    strings = ModelInfo("s", "", (TensorSpec("IN", "BYTES", (2,)),), (), batching=False, max_batch_size=0)
    data = load_input_data(strings, ("random",), {}, 1, string_length=3)
    encoded = http_request(strings, data.streams[0][0], binary_inputs=True, binary_outputs=True)
    assert len(encoded.body) == 2 * (4 + 3) and struct.unpack_from("<I", encoded.body)[0] == 3
    framed = HttpFramer("h", 1, "/v2/models/s/infer").frame(
        encoded, {"sequence_id": 7, "sequence_start": True}
    )
    head, _, body = framed.partition(b"\r\n\r\n")
    header_length = int(head.split(b"Inference-Header-Content-Length: ")[1].split(b"\r\n")[0])
    header = orjson.loads(body[:header_length])
    assert header["parameters"] == {"sequence_id": 7, "sequence_start": True}
    assert header["inputs"][0]["parameters"]["binary_data_size"] == 14


def test_model_info_from_config_and_from_metadata_alone() -> None:
    config = {
        "name": "seq",
        "max_batch_size": 4,
        "sequence_batching": {},
        "input": [{"name": "IN", "data_type": "TYPE_STRING", "dims": ["1"]}],
        "output": [],
    }
    info = from_config(config, "")
    assert (info.sequence, info.batching, info.inputs[0].datatype, info.inputs[0].dims) == (
        True,
        True,
        "BYTES",
        (1,),
    )
    meta = from_metadata(
        {"name": "m", "inputs": [{"name": "X", "datatype": "FP32", "shape": [-1, 4]}], "outputs": []}, ""
    )
    assert (meta.batching, meta.inputs[0].dims, meta.source, meta.max_batch_size) == (
        True,
        (4,),
        "metadata",
        None,
    )


def test_arrival_schedules_split_across_workers() -> None:
    spec = ScheduleSpec(rate=100.0)
    assert list(itertools.islice(arrivals(spec), 3)) == [0.0, 0.01, 0.02]
    second = ScheduleSpec(rate=100.0, worker_index=1, worker_count=2)
    assert list(itertools.islice(arrivals(second), 2)) == [0.01, 0.03]
    poisson = list(itertools.islice(arrivals(ScheduleSpec(1000.0, Distribution.POISSON)), 5000))
    assert 4.5 < poisson[-1] < 5.5  # 5000 arrivals at 1000/s
    intervals = ScheduleSpec(0.0, intervals_us=(1000, 3000))
    assert list(itertools.islice(arrivals(intervals), 3)) == [0.001, 0.004, 0.005]


def test_http_response_framing() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
    parsed = parse_head(head, head.find(b"\r\n\r\n"))
    assert (parsed.status, parsed.length, parsed.keep_alive, parsed.head_size) == (
        200,
        5,
        False,
        len(head) - 5,
    )
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    parsed = parse_head(chunked, chunked.find(b"\r\n\r\n"))
    assert parsed.length == -1
    assert chunked_body_end(chunked, parsed.head_size) == (len(chunked), b"abcde")
    assert chunked_body_end(chunked[:-3], parsed.head_size)[0] == -1
