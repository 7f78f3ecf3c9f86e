"""Request tracing as Triton's: ``--trace-config``, the trace extension over HTTP and gRPC, and the
JSON trace file with each traced request's timestamps in order."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, simple_inputs, write_python_model, write_simple
from trt.server.core.extensions.tracing import tensor_text

CORE_POINTS = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "INFER_RESPONSE_COMPLETE",
    "REQUEST_END",
]


# `simple` twice: the sums and differences, then their sums (2 * INPUT0) and differences (2 * INPUT1).
SIMPLE_TWICE_CONFIG = """
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "TWICE_A" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "simple" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "sum" } output_map { key: "OUTPUT1" value: "difference" } },
  { model_name: "simple" model_version: -1
    input_map { key: "INPUT0" value: "sum" } input_map { key: "INPUT1" value: "difference" }
    output_map { key: "OUTPUT0" value: "TWICE_A" } }
] }
"""


# Calls `simple` twice through BLS, once passing its request's trace on: only that call is traced.
BLS_TWICE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            inputs = [pb_utils.Tensor("INPUT0", data), pb_utils.Tensor("INPUT1", data)]
            calls = [
                pb_utils.InferenceRequest(
                    model_name="simple", requested_output_names=["OUTPUT0"], inputs=inputs, **extra
                ).exec()
                for extra in ({"trace": request.trace()}, {})
            ]
            total = sum(pb_utils.get_output_tensor_by_name(call, "OUTPUT0").as_numpy() for call in calls)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", total)]))
        return responses
"""

BLS_TWICE_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""


def _serve(tmp_path: Path, *trace_config: str) -> ServerProcess:
    repo = tmp_path / "repo"
    write_simple(repo)
    write_python_model(repo, "bls_twice", BLS_TWICE, BLS_TWICE_CONFIG)
    (repo / "simple_twice" / "1").mkdir(parents=True)
    (repo / "simple_twice" / "config.pbtxt").write_text(SIMPLE_TWICE_CONFIG)
    flags = [f"--trace-config={value}" for value in trace_config]
    return ServerProcess([repo], flags).start(tmp_path)


def _traces(path: Path) -> dict[int, dict[str, object]]:
    """Each trace by id: what it describes, and its timestamps by name in file order."""
    traces: dict[int, dict[str, object]] = {}
    for entry in json.loads(path.read_text()):
        trace = traces.setdefault(entry["id"], {"stamps": []})
        if "timestamps" in entry:
            trace["stamps"] += [(t["name"], t["ns"]) for t in entry["timestamps"]]  # type: ignore[operator]
        elif "activity" not in entry:  # tensors (level TENSORS) are read on their own
            trace.update(entry)
    return traces


def test_sampled_requests_are_written_with_their_timestamps_in_order(tmp_path: Path) -> None:
    trace_file = tmp_path / "trace.json"
    server = _serve(tmp_path, f"triton,file={trace_file}", "level=TIMESTAMPS", "rate=2")
    data = np.ones((1, 16), dtype=np.int32)
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        assert http.get_trace_settings() == {
            "trace_level": ["TIMESTAMPS"],
            "trace_rate": "2",
            "trace_count": "-1",
            "log_frequency": "0",
            "trace_file": str(trace_file),
            "trace_mode": "triton",
        }
        for number in range(4):
            http.infer("simple", simple_inputs(httpclient, data), request_id=f"http-{number}")
        for number in range(4):
            grpc.infer("simple", simple_inputs(grpcclient, data), request_id=f"grpc-{number}")
    finally:
        server.stop()
    traces = _traces(trace_file)
    assert len(traces) == 4  # one request in two
    by_request = {str(t["request_id"]): t for t in traces.values()}
    assert set(by_request) == {"http-1", "http-3", "grpc-1", "grpc-3"}
    for request_id, trace in by_request.items():
        assert trace["model_name"] == "simple" and trace["model_version"] == 1
        stamps: list[tuple[str, int]] = trace["stamps"]  # type: ignore[assignment]
        names = [name for name, _ in stamps]
        times = [ns for _, ns in stamps]
        assert times == sorted(times), stamps
        if request_id.startswith("http"):
            assert names[:2] == ["HTTP_RECV_START", "HTTP_RECV_END"]
            assert names[-2:] == ["HTTP_SEND_START", "HTTP_SEND_END"]
        else:
            assert names[:2] == ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"]
            assert names[-2:] == ["GRPC_SEND_START", "GRPC_SEND_END"]
        assert [name for name in names if name in CORE_POINTS] == CORE_POINTS


def test_settings_change_at_run_time_globally_and_per_model(tmp_path: Path) -> None:
    trace_file = tmp_path / "trace.json"
    server = _serve(tmp_path, f"triton,file={trace_file}", "triton,log-frequency=2", "rate=1", "count=3")
    data = np.ones((1, 16), dtype=np.int32)
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        assert http.get_trace_settings()["trace_level"] == ["OFF"]  # nothing traced until a level is set
        http.infer("simple", simple_inputs(httpclient, data))
        assert http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})["trace_level"] == [
            "TIMESTAMPS"
        ]
        model = grpc.update_trace_settings(model_name="simple", settings={"trace_rate": "1"}, as_json=True)
        assert model["settings"]["trace_rate"]["value"] == ["1"]
        for _ in range(5):
            http.infer("simple", simple_inputs(httpclient, data))
        # count=3: three traces, then the count is spent and tracing stops. A model with settings of
        # its own counts in them, as Triton's per-model settings do; the global count is untouched.
        assert http.get_trace_settings(model_name="simple")["trace_count"] == "0"
        assert http.get_trace_settings()["trace_count"] == "3"
        cleared = http.update_trace_settings(model_name="simple", settings={"trace_rate": None})
        assert cleared["trace_rate"] == "1"  # the global value again
        for settings, message in (
            ({"trace_level": ["TENSOR"]}, "OFF, TIMESTAMPS or TENSORS"),
            ({"trace_rate": "0"}, "at least 1"),
            ({"trace_file": "/tmp/elsewhere.json"}, "can't be changed"),
            ({"trace_colour": "red"}, "unknown trace setting"),
        ):
            with pytest.raises(InferenceServerException, match=message):
                http.update_trace_settings(settings=settings)
        for client in (http, grpc):  # Triton's code and words, on both protocols
            with pytest.raises(InferenceServerException, match="Request for unknown model : nope") as refused:
                client.get_trace_settings(model_name="nope")
            assert refused.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    finally:
        server.stop()
    # log-frequency=2: the first two traces in trace.json.0, the third when the server stopped.
    assert len(_traces(Path(f"{trace_file}.0"))) == 2
    assert len(_traces(Path(f"{trace_file}.1"))) == 1


def test_level_tensors_writes_what_the_model_was_given_and_gave_back(tmp_path: Path) -> None:
    trace_file = tmp_path / "trace.json"
    server = _serve(tmp_path, f"triton,file={trace_file}", "level=TENSORS", "rate=1")
    data = np.arange(-3, 13, dtype=np.int32).reshape(1, 16)
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        http.infer("simple", simple_inputs(httpclient, data), request_id="tensors")
    finally:
        server.stop()
    entries = json.loads(trace_file.read_text())
    assert not any("timestamps" in entry for entry in entries)  # TENSORS only
    [about] = [entry for entry in entries if "model_name" in entry]
    assert about["request_id"] == "tensors"
    tensors = {(e["activity"], e["tensor"]["name"]): e["tensor"] for e in entries if "activity" in e}
    assert all(e["id"] == about["id"] for e in entries)
    values = ",".join(str(v) for v in range(-3, 13))
    for name in ("INPUT0", "INPUT1"):
        assert tensors["TENSOR_QUEUE_INPUT", name] == {
            "name": name,
            "data": values,
            "shape": "1,16",
            "dtype": "INT32",
        }
    assert tensors["TENSOR_BACKEND_OUTPUT", "OUTPUT0"]["data"] == ",".join(str(2 * v) for v in range(-3, 13))
    assert tensors["TENSOR_BACKEND_OUTPUT", "OUTPUT1"]["data"] == ",".join("0" for _ in range(16))


def test_an_ensemble_s_steps_are_traced_under_its_trace(tmp_path: Path) -> None:
    trace_file = tmp_path / "trace.json"
    server = _serve(tmp_path, f"triton,file={trace_file}", "level=TIMESTAMPS", "level=TENSORS", "rate=1")
    a, b = np.arange(16, dtype=np.int32).reshape(1, 16), np.ones((1, 16), dtype=np.int32)
    try:
        inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("A", "B")]
        for tensor, data in zip(inputs, (a, b), strict=True):
            tensor.set_data_from_numpy(data)
        client = httpclient.InferenceServerClient(server.http_url)
        result = client.infer("simple_twice", inputs, request_id="e")
        np.testing.assert_array_equal(result.as_numpy("TWICE_A"), 2 * a)
    finally:
        server.stop()
    traces = _traces(trace_file)
    [ensemble] = [t for t in traces.values() if t["model_name"] == "simple_twice"]
    steps = [t for t in traces.values() if t["model_name"] == "simple"]
    assert "parent_id" not in ensemble and len(steps) == 2
    assert all(step["parent_id"] == ensemble["id"] and step["request_id"] == "e" for step in steps)
    for step in steps:
        names = [name for name, _ in step["stamps"]]  # type: ignore[attr-defined]
        assert [name for name in names if name in CORE_POINTS] == CORE_POINTS
    # The second step was given the first's outputs: its TENSOR_QUEUE_INPUT INPUT0 holds A + B.
    entries = json.loads(trace_file.read_text())
    inputs_seen = [
        entry["tensor"]["data"]
        for entry in entries
        if entry.get("activity") == "TENSOR_QUEUE_INPUT" and entry["tensor"]["name"] == "INPUT0"
    ]
    assert ",".join(str(v) for v in (a + b).reshape(-1)) in inputs_seen


def test_a_bls_call_given_the_request_s_trace_is_traced_under_it(tmp_path: Path) -> None:
    trace_file = tmp_path / "trace.json"
    server = _serve(tmp_path, f"triton,file={trace_file}", "level=TIMESTAMPS", "rate=1")
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    try:
        tensor = httpclient.InferInput("INPUT0", [1, 16], "INT32")
        tensor.set_data_from_numpy(data)
        client = httpclient.InferenceServerClient(server.http_url)
        result = client.infer("bls_twice", [tensor], request_id="bls")
        np.testing.assert_array_equal(result.as_numpy("OUT"), 4 * data)
    finally:
        server.stop()
    traces = _traces(trace_file)
    [parent] = [t for t in traces.values() if t["model_name"] == "bls_twice"]
    [child] = [t for t in traces.values() if t["model_name"] == "simple"]  # the call without it: none
    assert child["parent_id"] == parent["id"] and "request_id" not in child  # the call set none
    names = [name for name, _ in child["stamps"]]  # type: ignore[attr-defined]
    assert [name for name in names if name in CORE_POINTS] == CORE_POINTS


def test_tensor_values_are_written_as_triton_writes_them() -> None:
    floats = np.array([[0.1, 1.23456789], [2.0, -1e-7]], np.float32)
    assert tensor_text(floats, "FP32") == "0.1,1.23457,2,-1e-07"  # six significant digits
    assert tensor_text(np.array([True, False]), "BOOL") == "1,0"
    assert tensor_text(np.array([b"a", b"caf\xc3\xa9"], dtype=np.object_), "BYTES") == '"a","caf\u00e9"'
