"""System shared memory: tensors handed over through POSIX regions, as Triton's shm examples do.

Most tests drive a real server with ``tritonclient``; the last few call ``SharedMemoryRegistry``
directly for what a socket cannot time precisely (a region unregistered while a view is alive).
"""

from __future__ import annotations

import base64
import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from tests.support import DTYPES, ServerProcess, int_inputs
from trt import cuda_runtime
from trt.server.core.errors import InvalidArgument, InvalidInput, NotFound
from trt.server.core.extensions.shared_memory import SharedMemoryRegistry

BYTES_PER_TENSOR = 64  # INT32 [1, 16]
CLIENTS = pytest.mark.parametrize("client_module", [httpclient, grpcclient], ids=["http", "grpc"])


def _key(tag: str) -> str:
    """A key of this test process alone, so concurrent test runs do not share regions."""
    return f"/trt_shm_test_{os.getpid()}_{tag}"


def _client(server: ServerProcess, client_module: Any) -> Any:
    url = server.http_url if client_module is httpclient else server.grpc_url
    return client_module.InferenceServerClient(url)


def _region_names(status: Any) -> set[str]:
    return {r["name"] for r in status} if isinstance(status, list) else set(status.regions)


def _bad_request(client_module: Any) -> str:
    return "400" if client_module is httpclient else "StatusCode.INVALID_ARGUMENT"


@pytest.fixture(autouse=True)
def _nothing_left_registered(server: ServerProcess) -> Iterator[None]:
    yield
    httpclient.InferenceServerClient(server.http_url).unregister_system_shared_memory()


@pytest.fixture
def regions() -> Iterator[tuple[Any, Any]]:
    """An input region holding INPUT0 then INPUT1, and an output region for OUTPUT0 then OUTPUT1."""
    inputs = shm.create_shared_memory_region("trt_test_in", _key("in"), 2 * BYTES_PER_TENSOR)
    outputs = shm.create_shared_memory_region("trt_test_out", _key("out"), 2 * BYTES_PER_TENSOR)
    try:
        shm.set_shared_memory_region(inputs, list(int_inputs()))
        yield inputs, outputs
    finally:
        shm.destroy_shared_memory_region(inputs)
        shm.destroy_shared_memory_region(outputs)


def _simple_inputs(
    client_module: Any,
    region: str = "input_data",
    sizes: tuple[int, int] = (64, 64),
    offsets: tuple[int, int] = (0, 64),
) -> list[Any]:
    inputs = [client_module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor, size, offset in zip(inputs, sizes, offsets, strict=True):
        tensor.set_shared_memory(region, size, offset=offset)
    return inputs


def _simple_outputs(client_module: Any, sizes: tuple[int, int] = (64, 64)) -> list[Any]:
    outputs = [client_module.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    outputs[0].set_shared_memory("output_data", sizes[0])
    outputs[1].set_shared_memory("output_data", sizes[1], offset=BYTES_PER_TENSOR)
    return outputs


def _check_sum_and_difference(outputs: Any) -> None:
    first, second = int_inputs()
    total = shm.get_contents_as_numpy(outputs, np.int32, [1, 16], offset=0)
    difference = shm.get_contents_as_numpy(outputs, np.int32, [1, 16], offset=BYTES_PER_TENSOR)
    np.testing.assert_array_equal(total, first + second)
    np.testing.assert_array_equal(difference, first - second)


# -- Triton's simple_{http,grpc}_shm_client flow ---------------------------------------------------


@CLIENTS
def test_inputs_and_outputs_through_shared_memory(
    server: ServerProcess, regions: tuple[Any, Any], client_module: Any
) -> None:
    client = _client(server, client_module)
    client.unregister_system_shared_memory()
    client.register_system_shared_memory("output_data", _key("out"), 2 * BYTES_PER_TENSOR)
    client.register_system_shared_memory("input_data", _key("in"), 2 * BYTES_PER_TENSOR)
    assert _region_names(client.get_system_shared_memory_status()) == {"input_data", "output_data"}
    one = client.get_system_shared_memory_status("input_data")
    if client_module is httpclient:
        assert one == [{"name": "input_data", "key": _key("in"), "offset": 0, "byte_size": 128}]
    else:
        assert (one.regions["input_data"].key, one.regions["input_data"].byte_size) == (_key("in"), 128)

    result = client.infer("simple", _simple_inputs(client_module), outputs=_simple_outputs(client_module))
    _check_sum_and_difference(regions[1])
    # As Triton: the outputs keep name, datatype and shape; the data is in the region only.
    if client_module is httpclient:
        assert result.get_response()["outputs"] == [
            {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]},
            {"name": "OUTPUT1", "datatype": "INT32", "shape": [1, 16]},
        ]
    else:
        response = result.get_response()
        assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
            ("OUTPUT0", "INT32", [1, 16]),
            ("OUTPUT1", "INT32", [1, 16]),
        ]
        assert list(response.raw_output_contents) == [b"", b""]

    client.unregister_system_shared_memory("output_data")
    assert _region_names(client.get_system_shared_memory_status()) == {"input_data"}
    client.unregister_system_shared_memory()
    assert _region_names(client.get_system_shared_memory_status()) == set()


@CLIENTS
def test_shared_memory_inputs_with_outputs_in_the_response(
    server: ServerProcess, regions: tuple[Any, Any], client_module: Any
) -> None:
    client = _client(server, client_module)
    # A window that starts inside the object: offsets in requests count from the window's start.
    client.register_system_shared_memory("input_data", _key("in"), BYTES_PER_TENSOR, offset=BYTES_PER_TENSOR)
    inputs = _simple_inputs(client_module, sizes=(64, 64), offsets=(0, 0))
    result = client.infer("simple", inputs)
    second = int_inputs()[1]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), second + second)


@CLIENTS
def test_bytes_tensors_through_shared_memory(server: ServerProcess, client_module: Any) -> None:
    values = np.array([[b"he\x00llo", b"", "caf\u00e9".encode()]], dtype=np.object_)
    serialized = serialize_byte_tensor(values)
    size = len(serialized.item())
    region_in = shm.create_shared_memory_region("trt_test_bytes_in", _key("bytes_in"), size)
    region_out = shm.create_shared_memory_region("trt_test_bytes_out", _key("bytes_out"), size)
    try:
        shm.set_shared_memory_region(region_in, [serialized])
        client = _client(server, client_module)
        client.register_system_shared_memory("bytes_in", _key("bytes_in"), size)
        client.register_system_shared_memory("bytes_out", _key("bytes_out"), size)
        inputs = []
        for name, _, _ in DTYPES:  # identity_all needs every input: the others are empty
            tensor = client_module.InferInput(f"IN_{name}", [1, 3] if name == "BYTES" else [1, 0], name)
            if name == "BYTES":
                tensor.set_shared_memory("bytes_in", size)
            else:
                dtype = bool if name == "BOOL" else name.lower().replace("fp", "float")
                tensor.set_data_from_numpy(np.empty((1, 0), dtype=dtype))
            inputs.append(tensor)
        output = client_module.InferRequestedOutput("OUT_BYTES")
        output.set_shared_memory("bytes_out", size)
        client.infer("identity_all", inputs, outputs=[output])
        assert shm.get_contents_as_numpy(region_out, np.object_, [1, 3]).tolist() == values.tolist()
    finally:
        shm.destroy_shared_memory_region(region_in)
        shm.destroy_shared_memory_region(region_out)


# -- requests that do not fit their region ---------------------------------------------------------


@CLIENTS
@pytest.mark.parametrize(
    ("sizes", "offsets", "fragment"),
    [
        ((64, 64), (0, 100), "Invalid offset [+] byte size for shared memory region: 'input_data'"),
        ((64, 200), (0, 0), "Invalid offset [+] byte size for shared memory region: 'input_data'"),
        ((64, 64), (0, 128), "Invalid offset for shared memory region: 'input_data'"),
        (
            (64, 60),
            (0, 64),
            "input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 60",
        ),
        (
            (64, 68),
            (0, 60),
            "input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 68",
        ),
    ],
)
def test_reaching_past_a_region_is_refused_and_the_server_carries_on(
    server: ServerProcess,
    regions: tuple[Any, Any],
    client_module: Any,
    sizes: tuple[int, int],
    offsets: tuple[int, int],
    fragment: str,
) -> None:
    client = _client(server, client_module)
    client.register_system_shared_memory("input_data", _key("in"), 2 * BYTES_PER_TENSOR)
    with pytest.raises(InferenceServerException, match=fragment) as info:
        client.infer("simple", _simple_inputs(client_module, sizes=sizes, offsets=offsets))
    assert info.value.status() == _bad_request(client_module)
    result = client.infer("simple", _simple_inputs(client_module))
    first, second = int_inputs()
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)


@CLIENTS
def test_output_regions_that_do_not_fit_are_refused(
    server: ServerProcess, regions: tuple[Any, Any], client_module: Any
) -> None:
    client = _client(server, client_module)
    client.register_system_shared_memory("input_data", _key("in"), 2 * BYTES_PER_TENSOR)
    client.register_system_shared_memory("output_data", _key("out"), 2 * BYTES_PER_TENSOR)
    with pytest.raises(InferenceServerException, match="should be at least 64 bytes") as info:
        client.infer(
            "simple", _simple_inputs(client_module), outputs=_simple_outputs(client_module, (32, 64))
        )
    assert info.value.status() == _bad_request(client_module)
    with pytest.raises(InferenceServerException, match=r"Invalid offset [+] byte size") as info:
        client.infer(
            "simple", _simple_inputs(client_module), outputs=_simple_outputs(client_module, (64, 65))
        )
    assert info.value.status() == _bad_request(client_module)


@CLIENTS
def test_an_unregistered_region_is_not_found(server: ServerProcess, client_module: Any) -> None:
    client = _client(server, client_module)
    with pytest.raises(
        InferenceServerException, match="Unable to find shared memory region: 'ghost'"
    ) as info:
        client.infer("simple", _simple_inputs(client_module, region="ghost"))
    assert info.value.status() in ("404", "StatusCode.NOT_FOUND")
    assert info.value.message().startswith("Unable to find shared memory region: 'ghost'")  # Triton's text


def test_classification_cannot_go_to_shared_memory(server: ServerProcess, regions: tuple[Any, Any]) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    client.register_system_shared_memory("input_data", _key("in"), 2 * BYTES_PER_TENSOR)
    client.register_system_shared_memory("output_data", _key("out"), 2 * BYTES_PER_TENSOR)
    window = {"shared_memory_region": "output_data", "shared_memory_byte_size": 64}
    body = {  # by hand: tritonclient refuses to send this itself
        "inputs": [
            {
                "name": name,
                "datatype": "INT32",
                "shape": [1, 16],
                "parameters": {
                    **window,
                    "shared_memory_region": "input_data",
                    "shared_memory_offset": offset,
                },
            }
            for name, offset in (("INPUT0", 0), ("INPUT1", 64))
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {**window, "classification": 2}}],
    }
    status, error = _post(server, "/v2/models/simple/infer", json.dumps(body).encode())
    assert status == 400 and "'classification'" in error["error"]
    body["outputs"] = [{"name": "OUTPUT0", "parameters": {**window, "binary_data": True}}]
    status, error = _post(server, "/v2/models/simple/infer", json.dumps(body).encode())
    assert status == 400 and "'binary_data'" in error["error"]
    body["outputs"] = [{"name": "OUTPUT0", "parameters": window}]
    assert _post(server, "/v2/models/simple/infer", json.dumps(body).encode())[0] == 200
    first, second = int_inputs()
    np.testing.assert_array_equal(shm.get_contents_as_numpy(regions[1], np.int32, [1, 16]), first + second)


@CLIENTS
def test_a_region_unlinked_then_truncated_is_refused_not_a_sigbus(
    server: ServerProcess, client_module: Any
) -> None:
    """The client unlinks the object and shrinks it through the descriptor it kept: no name is left to
    check, and a mapping of it would raise SIGBUS in the server at the first read (Triton dies too)."""
    path = f"/dev/shm/{_key('vanishing').lstrip('/')}"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.write(fd, np.concatenate(int_inputs()).astype(np.int32).tobytes())
        client = _client(server, client_module)
        client.register_system_shared_memory("input_data", _key("vanishing"), 2 * BYTES_PER_TENSOR)
        os.unlink(path)
        os.ftruncate(fd, 16)
        with pytest.raises(InferenceServerException, match="shrank to 16 bytes") as info:
            client.infer("simple", _simple_inputs(client_module))
        assert info.value.status() == _bad_request(client_module)
        os.ftruncate(fd, 2 * BYTES_PER_TENSOR)  # a region the client fixes serves again
        os.pwrite(fd, np.concatenate(int_inputs()).astype(np.int32).tobytes(), 0)
        result = client.infer("simple", _simple_inputs(client_module))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), sum(int_inputs()))
    finally:
        os.close(fd)
        if os.path.exists(path):
            os.unlink(path)
    assert server.alive()


def test_a_region_shrunk_after_registration_is_refused_not_a_crash(
    server: ServerProcess, regions: tuple[Any, Any]
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    client.register_system_shared_memory("input_data", _key("in"), 2 * BYTES_PER_TENSOR)
    os.truncate(f"/dev/shm/{_key('in').lstrip('/')}", 16)  # reading past the end would be SIGBUS
    with pytest.raises(InferenceServerException, match="shrank to 16 bytes") as info:
        client.infer("simple", _simple_inputs(httpclient))
    assert info.value.status() == "400"
    assert client.is_server_live()


# -- registration ----------------------------------------------------------------------------------


@CLIENTS
def test_registration_errors(server: ServerProcess, regions: tuple[Any, Any], client_module: Any) -> None:
    client = _client(server, client_module)
    client.register_system_shared_memory("input_data", _key("in"), 2 * BYTES_PER_TENSOR)
    with pytest.raises(InferenceServerException, match="'input_data' already in manager") as info:
        client.register_system_shared_memory("input_data", _key("in"), 2 * BYTES_PER_TENSOR)
    assert info.value.status() in ("400", "StatusCode.ALREADY_EXISTS")
    ghost = _key("no_such_key")
    with pytest.raises(
        InferenceServerException, match=f"Unable to open shared memory region: '{ghost}'"
    ) as info:
        client.register_system_shared_memory("ghost", ghost, 64)
    assert info.value.status() in ("500", "StatusCode.INTERNAL")  # Triton's (its L0_grpc tests match on it)
    with pytest.raises(InferenceServerException, match="exceeds the 128 bytes"):
        client.register_system_shared_memory("too_big", _key("out"), 4096)
    with pytest.raises(InferenceServerException, match="exceeds the 128 bytes"):
        client.register_system_shared_memory("too_far", _key("out"), 64, offset=100)
    with pytest.raises(InferenceServerException, match="Unable to find system shared memory region") as info:
        client.get_system_shared_memory_status("ghost")
    assert info.value.status() in ("404", "StatusCode.NOT_FOUND")
    assert _region_names(client.get_system_shared_memory_status()) == {"input_data"}  # failures left none
    client.unregister_system_shared_memory("ghost")  # unknown names are fine, as in Triton
    assert "system_shared_memory" in _server_extensions(client)


def _server_extensions(client: Any) -> list[str]:
    metadata = client.get_server_metadata()
    return list(metadata["extensions"] if isinstance(metadata, dict) else metadata.extensions)


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("/../../etc/passwd", "invalid shm key"),
        ("/", "invalid shm key"),
        ("/triton_python_backend_shm_region_1", "reserved prefix"),
        ("/in\x00put", "invalid shm key"),  # was a 500: os.open raised ValueError on the NUL
    ],
)
def test_keys_outside_client_shared_memory_are_refused(
    server: ServerProcess, key: str, fragment: str
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException, match=fragment) as info:
        client.register_system_shared_memory("sneaky", key, 64)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    status, error = _post(
        server,
        "/v2/systemsharedmemory/region/sneaky/register",
        json.dumps({"key": key, "byte_size": 64}).encode(),
    )
    assert status == 400 and fragment in error["error"]
    assert client.is_server_live()


def test_the_servers_own_python_backend_arenas_are_refused(server: ServerProcess) -> None:
    assert server.process is not None
    key = f"/trt_{server.process.pid}_test_in"  # how the Python backend names its arenas
    region = shm.create_shared_memory_region("trt_test_arena", key, 64)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        with pytest.raises(InferenceServerException, match="reserved prefix"):
            client.register_system_shared_memory("arena", key, 64)
    finally:
        shm.destroy_shared_memory_region(region)


def test_a_link_in_dev_shm_is_not_followed(server: ServerProcess, tmp_path: Path) -> None:
    target = tmp_path / "not_shared_memory"
    target.write_bytes(b"\0" * 64)
    link = Path("/dev/shm") / _key("link").lstrip("/")
    link.symlink_to(target)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        with pytest.raises(InferenceServerException, match="Unable to open shared memory region"):
            client.register_system_shared_memory("linked", _key("link"), 64)
    finally:
        link.unlink()


def _post(server: ServerProcess, path: str, body: bytes, method: str = "POST") -> tuple[int, Any]:
    request = urllib.request.Request(f"http://{server.http_url}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_http_register_bodies_are_checked(server: ServerProcess, regions: tuple[Any, Any]) -> None:
    route = "/v2/systemsharedmemory/region/r/register"
    assert _post(server, route, b'{"byte_size": 64}') == (
        400,
        {"error": "Shared memory register request has no 'key' field (a string)"},
    )
    body = json.dumps({"key": _key("in")}).encode()
    assert _post(server, route, body)[1] == {
        "error": "Shared memory register request has no 'byte_size' field"
    }
    body = json.dumps({"key": _key("in"), "byte_size": -1}).encode()
    assert _post(server, route, body)[0] == 400
    body = json.dumps({"key": _key("in"), "byte_size": 64}).encode()
    assert _post(server, "/v2/systemsharedmemory/register", body)[0] == 400  # no region name
    assert _post(server, "/v2/systemsharedmemory/status", b"")[0] == 405
    assert _post(server, route, body) == (200, b"")  # offset is optional
    status = httpclient.InferenceServerClient(server.http_url).get_system_shared_memory_status("r")
    assert status == [{"name": "r", "key": _key("in"), "offset": 0, "byte_size": 64}]


def test_unregister_with_nothing_registered(server: ServerProcess) -> None:
    for client_module in (httpclient, grpcclient):
        client = _client(server, client_module)
        client.unregister_system_shared_memory()
        client.unregister_system_shared_memory("never_registered")
        assert _region_names(client.get_system_shared_memory_status()) == set()


@CLIENTS
def test_cuda_shared_memory_without_a_gpu_is_refused_as_a_triton_without_gpus_refuses_it(
    server: ServerProcess, client_module: Any
) -> None:
    if _has_a_gpu():
        pytest.skip("this machine has a GPU: test_cuda_shared_memory_gpu.py covers it")
    client = _client(server, client_module)
    handle = base64.b64encode(bytes(range(64)))  # well formed, as cuda_shared_memory.get_raw_handle gives
    with pytest.raises(InferenceServerException) as refused:
        client.register_cuda_shared_memory("gpu", handle, 0, 64)
    assert refused.value.status() == _bad_request(client_module)
    try:
        cuda_runtime.runtime()
    except cuda_runtime.CudaUnavailable:  # as a Triton built without GPUs
        assert refused.value.message().startswith(
            "failed to register CUDA shared memory region: 'gpu', GPUs not supported (cuda-python is not"
        )
    else:  # as a Triton built with GPUs, on a machine without one (checked against Triton 2.51)
        assert refused.value.message().startswith("failed to register shared memory region: invalid args (")
    status = client.get_cuda_shared_memory_status()
    assert (status if client_module is httpclient else list(status.regions)) == []
    with pytest.raises(InferenceServerException, match="Unable to find cuda shared memory region: 'gpu'"):
        client.get_cuda_shared_memory_status("gpu")
    client.unregister_cuda_shared_memory("gpu")
    client.unregister_cuda_shared_memory()


@CLIENTS
def test_a_cuda_handle_that_is_not_one_is_refused_before_cuda_is_asked(
    server: ServerProcess, client_module: Any
) -> None:
    client = _client(server, client_module)
    not_base64 = b"\x00" * 64  # the HTTP client sends raw_handle as text: this is no base64
    for handle in (base64.b64encode(b"short"), not_base64 if client_module is httpclient else b""):
        with pytest.raises(InferenceServerException) as refused:
            client.register_cuda_shared_memory("gpu", handle, 0, 64)
        assert refused.value.status() == _bad_request(client_module)
        assert refused.value.message() == "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"


def test_region_names_are_one_namespace_across_system_and_cuda(
    server: ServerProcess, regions: tuple[Any, Any]
) -> None:
    """As Triton: a system region's name is taken for CUDA too, and each kind's calls see only their own."""
    client = httpclient.InferenceServerClient(server.http_url)
    client.register_system_shared_memory("input_data", _key("in"), 2 * BYTES_PER_TENSOR)
    with pytest.raises(
        InferenceServerException, match="shared memory region 'input_data' already in manager"
    ):
        client.register_cuda_shared_memory("input_data", base64.b64encode(bytes(64)), 0, 64)
    with pytest.raises(InferenceServerException) as other_kind:
        client.get_cuda_shared_memory_status("input_data")
    assert other_kind.value.message() == (
        "The region named 'input_data' is registered as system shared memory, not CUDA shared memory"
    )
    assert client.get_cuda_shared_memory_status() == []
    client.unregister_cuda_shared_memory("input_data")  # another kind's region: left alone, as Triton
    client.unregister_cuda_shared_memory()
    assert _region_names(client.get_system_shared_memory_status()) == {"input_data"}


def test_cuda_register_bodies_are_checked_field_by_field(server: ServerProcess) -> None:
    """Triton's words for what its HTTP handler checks, in its order."""
    url = f"http://{server.http_url}/v2/cudasharedmemory/region/gpu/register"
    handle = base64.b64encode(bytes(64)).decode()
    known: dict[str, Any] = {"raw_handle": {"b64": handle}}
    cases = [
        ({"device_id": 0, "byte_size": 64}, "Shared memory register request has no 'raw_handle' field"),
        ({"raw_handle": handle, "device_id": 0, "byte_size": 64}, "'raw_handle' must be {\"b64\": <string>}"),
        (known | {"device_id": 0}, "has no 'byte_size' field"),
        (known | {"byte_size": 64}, "has no 'device_id' field"),
        (known | {"device_id": -1, "byte_size": 64}, "'device_id' must be a non-negative integer"),
        (known | {"device_id": 0, "byte_size": True}, "'byte_size' must be a non-negative integer"),
        ({"raw_handle": {"b64": "&&&"}, "device_id": 0, "byte_size": 64}, "must be a valid base64 encoded"),
    ]
    for body, words in cases:
        request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 400, body
        assert words in json.loads(refused.value.read())["error"], body


def _has_a_gpu() -> bool:
    try:
        cuda_runtime.device_count()
    except cuda_runtime.CudaUnavailable:
        return False
    return True


def test_unregistering_during_requests_never_takes_the_server_down(
    server: ServerProcess, regions: tuple[Any, Any]
) -> None:
    """Requests race the region being unregistered and registered again: each one either works or
    is refused cleanly, and the server keeps serving."""
    control = httpclient.InferenceServerClient(server.http_url)
    control.register_system_shared_memory("input_data", _key("in"), 2 * BYTES_PER_TENSOR)
    control.register_system_shared_memory("output_data", _key("out"), 2 * BYTES_PER_TENSOR)
    first, second = int_inputs()
    stop = threading.Event()
    outcomes: list[str] = []

    def requests() -> None:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        while not stop.is_set():
            try:
                result = client.infer("simple", _simple_inputs(grpcclient))
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
                outcomes.append("ok")
            except InferenceServerException as exc:
                assert exc.status() == "StatusCode.NOT_FOUND", exc
                outcomes.append("not found")

    workers = [threading.Thread(target=requests) for _ in range(4)]
    for worker in workers:
        worker.start()
    try:
        for _ in range(200):
            control.unregister_system_shared_memory("input_data")
            control.register_system_shared_memory("input_data", _key("in"), 2 * BYTES_PER_TENSOR)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert "ok" in outcomes
    assert control.is_server_live()
    result = control.infer("simple", _simple_inputs(httpclient))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)


# -- the registry itself ---------------------------------------------------------------------------


@pytest.fixture
def registry(regions: tuple[Any, Any]) -> Iterator[SharedMemoryRegistry]:
    registry = SharedMemoryRegistry(allow_client_shm=True)
    registry.register("input_data", _key("in"), 0, 2 * BYTES_PER_TENSOR)
    yield registry
    registry.close()


def _mappings_of(key: str) -> int:
    return Path("/proc/self/maps").read_text().count(key.lstrip("/") + "\n")


def test_reads_are_copies_and_the_server_maps_nothing(regions: tuple[Any, Any]) -> None:
    """A client may truncate its object at any time; the server never maps it, so it cannot fault."""
    client_mappings = _mappings_of(_key("in"))  # tritonclient's own, in this process
    registry = SharedMemoryRegistry(allow_client_shm=True)
    registry.register("input_data", _key("in"), 0, 2 * BYTES_PER_TENSOR)
    assert _mappings_of(_key("in")) == client_mappings
    view = registry.read("input_data", BYTES_PER_TENSOR, BYTES_PER_TENSOR)
    tensor = np.frombuffer(view, dtype=np.int32)
    registry.unregister("input_data")
    assert registry.status() == []
    np.testing.assert_array_equal(tensor, int_inputs()[1].reshape(-1))  # the copy outlives the region


def test_reads_and_writes_stay_inside_the_region(registry: SharedMemoryRegistry) -> None:
    assert registry.read("input_data", 0, 4).readonly
    with pytest.raises(InvalidInput, match=r"Invalid offset [+] byte size for shared memory region"):
        registry.read("input_data", 100, 64)
    with pytest.raises(InvalidInput, match=r"Invalid offset [+] byte size for shared memory region"):
        registry.write("input_data", 120, b"\1" * 16)
    with pytest.raises(InvalidInput, match="Invalid offset for shared memory region"):
        registry.read("input_data", -4, 4)
    with pytest.raises(InvalidInput, match="Invalid offset for shared memory region"):
        registry.read("input_data", 128, 0)  # an empty tensor at the end: Triton refuses it too
    with pytest.raises(NotFound):
        registry.read("ghost", 0, 4)
    registry.write("input_data", 124, b"\7\0\0\0")
    assert bytes(registry.read("input_data", 124, 4)) == b"\7\0\0\0"


def test_a_window_starts_at_its_offset(regions: tuple[Any, Any]) -> None:
    registry = SharedMemoryRegistry(allow_client_shm=True)
    try:
        registry.register("second", _key("in"), BYTES_PER_TENSOR, BYTES_PER_TENSOR)
        second = np.frombuffer(registry.read("second", 0, BYTES_PER_TENSOR), dtype=np.int32)
        np.testing.assert_array_equal(second, int_inputs()[1].reshape(-1))
        with pytest.raises(InvalidInput):
            registry.read("second", 1, BYTES_PER_TENSOR)
        with pytest.raises(InvalidArgument, match="byte_size > 0"):
            registry.register("empty", _key("in"), 0, 0)
    finally:
        registry.close()


@pytest.fixture(scope="module")
def default_server(model_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server started without --allow-client-shm."""
    proc = ServerProcess([model_repo], ["--exit-on-error=false", "--strict-readiness=false"])
    proc.start(tmp_path_factory.mktemp("default_logs"))
    yield proc
    proc.stop()


@CLIENTS
def test_without_allow_client_shm_clients_cannot_register_regions_as_in_current_triton(
    default_server: ServerProcess, client_module: Any, regions: tuple[Any, Any]
) -> None:
    """Current Triton's default and words (its L0_cuda_shared_memory test matches them): a region is
    any object in /dev/shm the server's user can open, other programs' included."""
    client = _client(default_server, client_module)
    unsupported = "501" if client_module is httpclient else "StatusCode.UNIMPLEMENTED"
    calls = [
        lambda: client.register_system_shared_memory("in", _key("in"), 2 * BYTES_PER_TENSOR),
        lambda: client.unregister_system_shared_memory("in"),
        lambda: client.unregister_system_shared_memory(),
        lambda: client.register_cuda_shared_memory("gpu", b"aGFuZGxl", 0, 8),
        lambda: client.unregister_cuda_shared_memory(),
    ]
    for call in calls:
        with pytest.raises(InferenceServerException) as refused:
            call()
        assert refused.value.status() == unsupported
        assert refused.value.message() == (
            "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
        )
    assert not _region_names(client.get_system_shared_memory_status())  # status still answers
    assert not _region_names(client.get_cuda_shared_memory_status())
