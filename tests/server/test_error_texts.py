"""A request whose tensors do not fit the model is refused in Triton's words, over both protocols.

Clients, and test suites written against Triton, match on these texts: the first case is the assertion of
Triton's own test of wrong shapes (``L0_infer``), sent with tritonclient as that test sends it. Triton
names the last input of a request first when several are wrong (its inputs live in a hash map), so the
shape case expects INPUT1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess

Inputs = Callable[[Any], list[Any]]


def _simple(
    module: Any, shape: list[int], datatype: str = "INT32", names: tuple[str, ...] = ("INPUT0", "INPUT1")
) -> list[Any]:
    data = np.arange(int(np.prod(shape)), dtype=np.int32 if datatype == "INT32" else np.float32).reshape(
        shape
    )
    tensors = []
    for name in names:
        tensor = module.InferInput(name, shape, datatype)
        tensor.set_data_from_numpy(data)
        tensors.append(tensor)
    return tensors


def _bf16(module: Any, shape: list[int]) -> list[Any]:
    """BF16 inputs as tritonclient sends them: binary over HTTP, raw over gRPC. Its current releases
    take them as ``ml_dtypes.bfloat16`` arrays (installed with it), older ones as float32."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    tensors = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, shape, "BF16")
        tensor.set_data_from_numpy(np.ones(shape, ml_dtypes.bfloat16))
        tensors.append(tensor)
    return tensors


def _reshaped(module: Any) -> list[Any]:
    """Triton's test: the right element count in the wrong shape, which only the server can refuse."""
    tensors = _simple(module, [1, 16])
    for tensor in tensors:
        tensor.set_shape([2, 8])
    return tensors


CASES: dict[str, tuple[Inputs, str]] = {
    "wrong shape (Triton's own assertion)": (
        _reshaped,
        # Triton 2.51's whole text, seen side by side with the peers' tritonserver
        "[request id: <id_unknown>] unexpected shape for input 'INPUT1' for model 'simple'. Expected "
        "[-1,16], got [2,8]. NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
        "dimension to be prepended to each input shape. If you want to specify the full shape including "
        "the batch dim in your input dims config, try setting max_batch_size to zero. See the model "
        "configuration docs for more info on max_batch_size.",
    ),
    "missing input": (
        lambda module: _simple(module, [1, 16], names=("INPUT0",)),
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) "
        "['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s).",
    ),
    "batch over max_batch_size": (
        lambda module: _simple(module, [9, 16]),
        "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'simple'",
    ),
    "wrong datatype": (
        lambda module: _simple(module, [1, 16], "FP32"),
        "[request id: <id_unknown>] inference input 'INPUT1' data-type is 'FP32', but model 'simple' "
        "expects 'INT32'",
    ),
    "BF16, which the model does not take (this server takes it nowhere)": (
        lambda module: _bf16(module, [1, 16]),
        "[request id: <id_unknown>] inference input 'INPUT1' data-type is 'BF16', but model 'simple' "
        "expects 'INT32'",
    ),
    "unknown input": (
        lambda module: _simple(module, [1, 16], names=("INPUT0", "INPUT9")),
        "unexpected inference input 'INPUT9' for model 'simple'",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tritonclient_reads_tritons_error_text(server: ServerProcess, protocol: str, case: str) -> None:
    make_inputs, text = CASES[case]
    if protocol == "http":
        module: Any = httpclient
        client: Any = httpclient.InferenceServerClient(server.http_url)
    else:
        module, client = grpcclient, grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", make_inputs(module))
    assert text in str(error.value), str(error.value)
    assert error.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


def test_a_request_id_names_the_request(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", _reshaped(httpclient), request_id="order-42")
    assert error.value.message().startswith("[request id: order-42] unexpected shape for input 'INPUT1'")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bf16_sent_again_is_refused_the_same_way(server: ServerProcess, protocol: str) -> None:
    """A request sent again is decoded from what was kept of the first (HTTP's remembered header,
    gRPC's template), and refused the same way; the server goes on serving."""
    module: Any = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    text = CASES["BF16, which the model does not take (this server takes it nowhere)"][1]
    for _ in range(3):
        with pytest.raises(InferenceServerException) as error:
            client.infer("simple", _bf16(module, [1, 16]))
        assert text in str(error.value), str(error.value)
    answer = client.infer("simple", _simple(module, [1, 16]))
    assert answer.as_numpy("OUTPUT0").tolist() == [list(range(0, 32, 2))]
