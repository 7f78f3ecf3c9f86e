"""System shared memory: tensors handed over through POSIX regions, as Triton's shm examples do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from tests.support import DTYPES, ServerProcess, int_inputs

BYTES_PER_TENSOR = 64  # INT32 [1, 16]


@pytest.fixture
def regions(server: ServerProcess) -> Iterator[tuple[Any, Any]]:
    """An input region holding INPUT0 then INPUT1, and an output region for OUTPUT0 then OUTPUT1."""
    first, second = int_inputs()
    inputs = shm.create_shared_memory_region("trt_test_in", "/trt_test_in", 2 * BYTES_PER_TENSOR)
    outputs = shm.create_shared_memory_region("trt_test_out", "/trt_test_out", 2 * BYTES_PER_TENSOR)
    shm.set_shared_memory_region(inputs, [first, second])
    yield inputs, outputs
    httpclient.InferenceServerClient(server.http_url).unregister_system_shared_memory()
    shm.destroy_shared_memory_region(inputs)
    shm.destroy_shared_memory_region(outputs)


def _check_outputs(outputs: Any) -> None:
    first, second = int_inputs()
    total = shm.get_contents_as_numpy(outputs, np.int32, [1, 16], offset=0)
    difference = shm.get_contents_as_numpy(outputs, np.int32, [1, 16], offset=BYTES_PER_TENSOR)
    np.testing.assert_array_equal(total, first + second)
    np.testing.assert_array_equal(difference, first - second)


@pytest.mark.parametrize("client_module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_inputs_and_outputs_through_shared_memory(
    server: ServerProcess, regions: tuple[Any, Any], client_module: Any
) -> None:
    url = server.http_url if client_module is httpclient else server.grpc_url
    client = client_module.InferenceServerClient(url)
    client.register_system_shared_memory("output_data", "/trt_test_out", 2 * BYTES_PER_TENSOR)
    client.register_system_shared_memory("input_data", "/trt_test_in", 2 * BYTES_PER_TENSOR)
    status = client.get_system_shared_memory_status()
    names = {r["name"] for r in status} if client_module is httpclient else set(status.regions)
    assert names == {"input_data", "output_data"}

    inputs = [client_module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory("input_data", BYTES_PER_TENSOR)
    inputs[1].set_shared_memory("input_data", BYTES_PER_TENSOR, offset=BYTES_PER_TENSOR)
    outputs = [client_module.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    outputs[0].set_shared_memory("output_data", BYTES_PER_TENSOR)
    outputs[1].set_shared_memory("output_data", BYTES_PER_TENSOR, offset=BYTES_PER_TENSOR)
    result = client.infer("simple", inputs, outputs=outputs)
    output = result.get_output("OUTPUT0")
    if client_module is httpclient:  # the data went to the region, not the response
        assert output["shape"] == [1, 16] and "data" not in output
        assert output["parameters"]["shared_memory_region"] == "output_data"
    else:
        assert list(output.shape) == [1, 16] and result.get_response().raw_output_contents[0] == b""
    _check_outputs(regions[1])

    client.unregister_system_shared_memory("output_data")
    status = client.get_system_shared_memory_status()
    names = {r["name"] for r in status} if client_module is httpclient else set(status.regions)
    assert names == {"input_data"}


def test_bytes_tensors_through_shared_memory(server: ServerProcess) -> None:
    values = np.array([[b"he\x00llo", b"", "caf\u00e9".encode()]], dtype=np.object_)
    serialized = serialize_byte_tensor(values)
    size = len(serialized.item())
    region = shm.create_shared_memory_region("trt_test_bytes", "/trt_test_bytes", size)
    try:
        shm.set_shared_memory_region(region, [serialized])
        client = httpclient.InferenceServerClient(server.http_url)
        client.register_system_shared_memory("bytes_in", "/trt_test_bytes", size)
        inputs = []
        for name, _, _ in DTYPES:
            tensor = httpclient.InferInput(f"IN_{name}", [1, 3] if name == "BYTES" else [1, 0], name)
            if name == "BYTES":
                tensor.set_shared_memory("bytes_in", size)
            else:
                tensor.set_data_from_numpy(
                    np.empty((1, 0), dtype=bool if name == "BOOL" else name.lower().replace("fp", "float"))
                )
            inputs.append(tensor)
        result = client.infer("identity_all", inputs, outputs=[httpclient.InferRequestedOutput("OUT_BYTES")])
        assert result.as_numpy("OUT_BYTES").tolist() == values.tolist()
    finally:
        httpclient.InferenceServerClient(server.http_url).unregister_system_shared_memory()
        shm.destroy_shared_memory_region(region)


def _simple_inputs_in(
    region: str, sizes: tuple[int, int], offsets: tuple[int, int]
) -> list[httpclient.InferInput]:
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor, size, offset in zip(inputs, sizes, offsets, strict=True):
        tensor.set_shared_memory(region, size, offset=offset)
    return inputs


@pytest.mark.parametrize(
    ("sizes", "offsets", "fragment"),
    [
        ((64, 64), (0, 100), "reaches past"),  # offset + size beyond the registered window
        ((64, 200), (0, 0), "reaches past"),  # byte size beyond the window
        ((64, 60), (0, 64), "expected 64 bytes"),  # size that does not fit the shape
    ],
)
def test_reaching_past_a_region_is_refused_and_the_server_carries_on(
    server: ServerProcess,
    regions: tuple[Any, Any],
    sizes: tuple[int, int],
    offsets: tuple[int, int],
    fragment: str,
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    client.register_system_shared_memory("input_data", "/trt_test_in", 2 * BYTES_PER_TENSOR)
    with pytest.raises(InferenceServerException, match=fragment) as info:
        client.infer("simple", _simple_inputs_in("input_data", sizes, offsets))
    assert info.value.status() == "400"
    result = client.infer("simple", _simple_inputs_in("input_data", (64, 64), (0, 64)))
    first, second = int_inputs()
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)


def test_output_region_too_small_is_refused(server: ServerProcess, regions: tuple[Any, Any]) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    client.register_system_shared_memory("input_data", "/trt_test_in", 2 * BYTES_PER_TENSOR)
    client.register_system_shared_memory("output_data", "/trt_test_out", 2 * BYTES_PER_TENSOR)
    output = httpclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("output_data", 32)
    with pytest.raises(InferenceServerException, match="needs 64 bytes"):
        client.infer("simple", _simple_inputs_in("input_data", (64, 64), (0, 64)), outputs=[output])


def test_registration_errors(server: ServerProcess, regions: tuple[Any, Any]) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.register_system_shared_memory("input_data", "/trt_test_in", 2 * BYTES_PER_TENSOR)
    with pytest.raises(InferenceServerException, match="already registered") as info:
        client.register_system_shared_memory("input_data", "/trt_test_in", 2 * BYTES_PER_TENSOR)
    assert info.value.status() == "StatusCode.ALREADY_EXISTS"
    with pytest.raises(InferenceServerException, match="unable to open"):
        client.register_system_shared_memory("ghost", "/trt_no_such_key", 64)
    with pytest.raises(InferenceServerException, match="exceeds"):
        client.register_system_shared_memory("too_big", "/trt_test_out", 4096)
    with pytest.raises(InferenceServerException, match="Unable to find"):
        client.get_system_shared_memory_status("ghost")
    client.unregister_system_shared_memory()  # all
    assert len(client.get_system_shared_memory_status().regions) == 0
    assert "system_shared_memory" in client.get_server_metadata().extensions
