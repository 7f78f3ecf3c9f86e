"""Large shared-memory tensors are copied on a thread: the event loop goes on answering everyone else.
On the loop, a 256 MB input and output held every other request for 0.3-0.4 s (the input's buffer
zeroed under the GIL, then read; the output written); now a few milliseconds. A region unregistered
while such a copy runs is closed when the copy ends, never under it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from onnx import TensorProto, helper

from tests.support import ServerProcess, longest_health_wait_while, save_onnx
from trt.server.core.extensions.shared_memory import OFF_LOOP_BYTES, SharedMemoryRegistry
from trt.server.core.types import InferenceRequest, InputTensor

ELEMENTS = 32_000_000  # 128 MB of FP32 each way
IDENTITY_CONFIG = """
platform: "onnxruntime_onnx"
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def _key(tag: str) -> str:
    return f"/trt_shm_off_loop_{os.getpid()}_{tag}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("off_loop_repo")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])], "identity",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [-1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [-1])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    save_onnx(model, repo / "identity" / "1" / "model.onnx")
    (repo / "identity" / "config.pbtxt").write_text(IDENTITY_CONFIG)
    proc = ServerProcess([repo], ["--allow-client-shm=true"]).start(tmp_path_factory.mktemp("off_loop_logs"))
    yield proc
    proc.stop()


def test_a_large_tensor_in_and_out_of_shared_memory_leaves_the_loop_free(server: ServerProcess) -> None:
    size = ELEMENTS * 4
    data = np.random.default_rng(3).random(ELEMENTS, dtype=np.float32)
    inputs = shm.create_shared_memory_region("in", _key("in"), size)
    outputs = shm.create_shared_memory_region("out", _key("out"), size)
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    try:
        shm.set_shared_memory_region(inputs, [data])
        client.register_system_shared_memory("in", _key("in"), size)
        client.register_system_shared_memory("out", _key("out"), size)

        def infer() -> None:
            tensor = httpclient.InferInput("X", [ELEMENTS], "FP32")
            tensor.set_shared_memory("in", size)
            output = httpclient.InferRequestedOutput("Y")
            output.set_shared_memory("out", size)
            client.infer("identity", [tensor], outputs=[output])

        infer()  # the first run of a model allocates: measure the second
        took, worst = longest_health_wait_while(server, infer)
        assert np.array_equal(shm.get_contents_as_numpy(outputs, np.float32, [ELEMENTS]), data)
        assert worst < max(0.2 * took, 0.03), f"a health check waited {worst:.3f} s of a {took:.3f} s request"
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(inputs)
        shm.destroy_shared_memory_region(outputs)


def _request(elements: int) -> InferenceRequest:
    tensor = InputTensor("X", "FP32", (elements,), None, parameters={
        "shared_memory_region": "big", "shared_memory_byte_size": elements * 4,
    })  # fmt: skip
    return InferenceRequest(model_name="m", inputs=[tensor])


def test_a_region_unregistered_during_a_copy_is_closed_when_the_copy_ends() -> None:
    elements = OFF_LOOP_BYTES // 4 + 1  # past the threshold: on a thread
    data = np.arange(elements, dtype=np.float32)
    region = shm.create_shared_memory_region("big", _key("big"), data.nbytes)
    try:
        shm.set_shared_memory_region(region, [data])

        async def unregister_while_copying() -> tuple[InferenceRequest, InferenceRequest, bool]:
            registry = SharedMemoryRegistry(allow_client_shm=True)
            registry.register("big", _key("big"), 0, data.nbytes)
            memory = registry._regions["big"].memory
            read, cancelled = _request(elements), _request(elements)
            reading = asyncio.ensure_future(registry.resolve_inputs(read))
            abandoning = asyncio.ensure_future(registry.resolve_inputs(cancelled))
            await asyncio.sleep(0)  # both copies handed to threads
            registry.unregister("big")  # out of the namespace now; closed when both copies end
            assert registry.status() == []
            abandoning.cancel()  # its client went away: its copy still runs to the end
            await reading
            while not _closed(memory._fd):  # type: ignore[attr-defined]
                await asyncio.sleep(0.01)
            return read, cancelled, abandoning.cancelled()

        read, _, was_cancelled = asyncio.run(asyncio.wait_for(unregister_while_copying(), 30))
        assert was_cancelled
        assert read.inputs[0].data is not None
        np.testing.assert_array_equal(read.inputs[0].data, data)
    finally:
        shm.destroy_shared_memory_region(region)


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False
