"""CUDA shared memory: tensors handed over in the client's GPU memory, as Triton's cudashm examples do.

Skipped where CUDA sees no GPU or tritonclient's CUDA utilities cannot load (CI has neither);
``scripts/gpu_check.sh`` runs these on a GPU host. The client and the server are separate processes,
as CUDA IPC needs: ``trt serve`` opens the handles the client (this test) made.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support import ROOT, ServerProcess, int_inputs
from trt import cuda_runtime

try:
    cuda_runtime.device_count()
    import tritonclient.utils.cuda_shared_memory as cudashm
except (cuda_runtime.CudaUnavailable, ImportError, RuntimeError) as exc:
    pytest.skip(f"needs a CUDA GPU and tritonclient's CUDA utilities ({exc})", allow_module_level=True)

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

BYTES_PER_TENSOR = 64  # INT32 [1, 16]
SIMPLE_TENSORS = ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")
CLIENTS = pytest.mark.parametrize("client_module", [httpclient, grpcclient], ids=["http", "grpc"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("cudashm_repo")
    shutil.copytree(ROOT / "model_repository" / "simple", repo / "simple")  # ONNX Runtime, on the CPU
    _write_torch_add_sub_on_gpu(repo / "add_sub_gpu")
    proc = ServerProcess([repo], ["--allow-client-shm=true", "--exit-on-error=false"])
    proc.start(tmp_path_factory.mktemp("cudashm_logs"))
    yield proc
    assert proc.alive(), f"the server died during the tests:\n{proc.log()}"
    proc.stop()


def _write_torch_add_sub_on_gpu(folder: Path) -> None:
    """A TorchScript add/sub on KIND_GPU that refuses inputs not on a CUDA device (needs torch)."""
    try:
        import torch
    except ImportError:
        return

    class AddSubOnCuda(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            if not (x.is_cuda and y.is_cuda):
                raise RuntimeError("input is not on a CUDA device")
            return x + y, x - y

    (folder / "1").mkdir(parents=True)
    torch.jit.script(AddSubOnCuda()).save(str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(
        'platform: "pytorch_libtorch"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 16 ] },'
        ' { name: "INPUT__1" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 16 ] },'
        ' { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 16 ] } ]\n'
        "instance_group [ { kind: KIND_GPU } ]\n"
    )


@pytest.fixture
def regions(server: ServerProcess) -> Iterator[tuple[Any, Any]]:
    """GPU memory holding INPUT0 then INPUT1, and GPU memory for OUTPUT0 then OUTPUT1 (poisoned)."""
    inputs = cudashm.create_shared_memory_region("input_data", 2 * BYTES_PER_TENSOR, 0)
    outputs = cudashm.create_shared_memory_region("output_data", 2 * BYTES_PER_TENSOR, 0)
    try:
        cudashm.set_shared_memory_region(inputs, list(int_inputs()))
        cudashm.set_shared_memory_region(outputs, [np.full(32, -7, dtype=np.int32)])
        yield inputs, outputs
    finally:
        httpclient.InferenceServerClient(server.http_url).unregister_cuda_shared_memory()
        cudashm.destroy_shared_memory_region(inputs)
        cudashm.destroy_shared_memory_region(outputs)


def _client(server: ServerProcess, client_module: Any) -> Any:
    url = server.http_url if client_module is httpclient else server.grpc_url
    return client_module.InferenceServerClient(url)


def _register(client: Any, regions: tuple[Any, Any]) -> None:
    for name, handle in zip(("input_data", "output_data"), regions, strict=True):
        client.register_cuda_shared_memory(name, cudashm.get_raw_handle(handle), 0, 2 * BYTES_PER_TENSOR)


def _infer_through_regions(client: Any, client_module: Any, model: str, names: tuple[str, ...]) -> Any:
    inputs = [client_module.InferInput(n, [1, 16], "INT32") for n in names[:2]]
    outputs = [client_module.InferRequestedOutput(n) for n in names[2:]]
    for index, (tensor, output) in enumerate(zip(inputs, outputs, strict=True)):
        tensor.set_shared_memory("input_data", BYTES_PER_TENSOR, offset=index * BYTES_PER_TENSOR)
        output.set_shared_memory("output_data", BYTES_PER_TENSOR, offset=index * BYTES_PER_TENSOR)
    return client.infer(model, inputs, outputs=outputs)


def _check_sum_and_difference(outputs: Any) -> None:
    first, second = int_inputs()
    got = cudashm.get_contents_as_numpy(outputs, np.int32, [2, 16])
    np.testing.assert_array_equal(got[0], (first + second)[0])
    np.testing.assert_array_equal(got[1], (first - second)[0])


# -- Triton's simple_{http,grpc}_cudashm_client flow -----------------------------------------------


@CLIENTS
def test_inputs_and_outputs_through_cuda_shared_memory(
    server: ServerProcess, regions: tuple[Any, Any], client_module: Any
) -> None:
    client = _client(server, client_module)
    _register(client, regions)
    status = client.get_cuda_shared_memory_status()
    if client_module is httpclient:
        assert sorted(status, key=lambda r: r["name"]) == [
            {"name": "input_data", "device_id": 0, "byte_size": 128},
            {"name": "output_data", "device_id": 0, "byte_size": 128},
        ]
    else:
        assert {(r.name, r.device_id, r.byte_size) for r in status.regions.values()} == {
            ("input_data", 0, 128),
            ("output_data", 0, 128),
        }
    result = _infer_through_regions(
        client, client_module, "simple", ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")
    )
    _check_sum_and_difference(regions[1])
    response = result.get_response()  # as in Triton: the outputs' data is in the region only
    if client_module is httpclient:
        assert [o.get("data") for o in response["outputs"]] == [None, None]
        assert [o.get("parameters", {}).get("binary_data_size") for o in response["outputs"]] == [None, None]
    else:
        assert list(response.raw_output_contents) == [b"", b""]


@CLIENTS
def test_a_model_on_the_gpu_reads_and_writes_cuda_regions(
    server: ServerProcess, regions: tuple[Any, Any], client_module: Any
) -> None:
    client = _client(server, client_module)
    if not client.is_model_ready("add_sub_gpu"):
        pytest.skip("the TorchScript model needs torch with CUDA")
    _register(client, regions)
    names = ("INPUT__0", "INPUT__1", "OUTPUT__0", "OUTPUT__1")
    _infer_through_regions(client, client_module, "add_sub_gpu", names)
    _check_sum_and_difference(regions[1])


def test_inputs_from_cuda_memory_beside_inputs_sent_inline(
    server: ServerProcess, regions: tuple[Any, Any]
) -> None:
    """Triton's test_mixed_raw_shm: one input in a region, the other in the request."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    _register(client, regions)
    first, second = int_inputs()
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory("input_data", BYTES_PER_TENSOR)
    inputs[1].set_data_from_numpy(second * 3)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + 3 * second)


# -- what is refused ---------------------------------------------------------------------------------


@CLIENTS
def test_registering_more_than_the_allocation_is_refused(
    server: ServerProcess, regions: tuple[Any, Any], client_module: Any
) -> None:
    """Triton's test_register_out_of_bound: the registered size may not exceed what the client allocated."""
    client = _client(server, client_module)
    with pytest.raises(
        InferenceServerException, match=r"failed to register shared memory region.*invalid args"
    ):
        client.register_cuda_shared_memory(
            "too_big", cudashm.get_raw_handle(regions[0]), 0, 2 * BYTES_PER_TENSOR + 1
        )
    assert not _names(client.get_cuda_shared_memory_status())


@CLIENTS
def test_handles_that_open_nothing_are_refused_and_the_server_carries_on(
    server: ServerProcess, regions: tuple[Any, Any], client_module: Any
) -> None:
    client = _client(server, client_module)
    bad_request = "400" if client_module is httpclient else "StatusCode.INVALID_ARGUMENT"
    made_up = base64.b64encode(os.urandom(64))
    with pytest.raises(InferenceServerException) as refused:
        client.register_cuda_shared_memory("made_up", made_up, 0, 64)
    assert (refused.value.status(), refused.value.message()) == (
        bad_request,
        "failed to register shared memory region: invalid args",
    )
    with pytest.raises(InferenceServerException, match=r"invalid args [(]device_id 99") as refused:
        client.register_cuda_shared_memory("elsewhere", cudashm.get_raw_handle(regions[0]), 99, 64)
    assert refused.value.status() == bad_request
    _register(client, regions)  # the real handles still open
    with pytest.raises(InferenceServerException, match="region 'input_data' already in manager"):
        client.register_cuda_shared_memory("input_data", cudashm.get_raw_handle(regions[0]), 0, 64)
    _infer_through_regions(client, client_module, "simple", SIMPLE_TENSORS)
    _check_sum_and_difference(regions[1])


@CLIENTS
def test_windows_past_a_region_are_refused_in_tritons_words(
    server: ServerProcess, regions: tuple[Any, Any], client_module: Any
) -> None:
    client = _client(server, client_module)
    _register(client, regions)
    for offset, words in (
        (128, "Invalid offset for shared memory region"),
        (100, "Invalid offset [+] byte size"),
    ):
        inputs = [client_module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_shared_memory("input_data", BYTES_PER_TENSOR)
        inputs[1].set_shared_memory("input_data", BYTES_PER_TENSOR, offset=offset)
        with pytest.raises(InferenceServerException, match=words):
            client.infer("simple", inputs)


@CLIENTS
def test_unregistered_regions_are_gone_for_status_and_inference(
    server: ServerProcess, regions: tuple[Any, Any], client_module: Any
) -> None:
    client = _client(server, client_module)
    _register(client, regions)
    client.unregister_cuda_shared_memory("input_data")
    assert _names(client.get_cuda_shared_memory_status()) == {"output_data"}
    with pytest.raises(InferenceServerException, match="Unable to find shared memory region: 'input_data'"):
        _infer_through_regions(client, client_module, "simple", SIMPLE_TENSORS)
    client.unregister_cuda_shared_memory()
    assert not _names(client.get_cuda_shared_memory_status())
    _register(client, regions)  # the same handles register again after unregistering
    _infer_through_regions(client, client_module, "simple", SIMPLE_TENSORS)
    _check_sum_and_difference(regions[1])


def _names(status: Any) -> set[str]:
    return {r["name"] for r in status} if isinstance(status, list) else set(status.regions)
