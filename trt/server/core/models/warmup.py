"""Triton's ``model_warmup``: requests run on every instance before a version goes ready, so the first
client request does not pay for lazy initialization. A warm-up that fails fails the load, as in Triton.

Tensor backends (ONNX Runtime, PyTorch, TensorRT) are warmed instance by instance in the loading
thread (``run_warmup``). Request-level instances (Python models, ensembles) run on the event loop, so
the lifecycle warms them there (``warm_request_level``) after the threaded load and before the new
version is swapped in: a reload still serves only warmed versions. Decoupled models answer through a
response sender, not a return value, and are not warmed (a warning says so)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np

from trt.protos import model_config_pb2
from trt.server.core.backends.base import BackendRequest, RequestLevelInstance
from trt.server.core.datatypes import (
    BF16_DTYPE,
    config_to_wire,
    deserialize_bytes_tensor,
    element_count,
    wire_to_numpy,
)
from trt.server.core.errors import ModelConfigError, ModelLoadError, ServerError
from trt.server.core.models.data_files import check_config_tensor_size, read_data_file

logger = logging.getLogger("trt.loader")

WARMUP_FOLDER = "warmup"  # where input_data_file names a file, as in Triton


def _input(
    name: str,
    spec: model_config_pb2.ModelWarmup.Input,
    batch_size: int,
    batched: bool,
    model_dir: Path,
    rng: np.random.Generator,
) -> np.ndarray:
    datatype = config_to_wire(model_config_pb2.DataType.Name(spec.data_type))
    if datatype == "INVALID":
        raise ModelConfigError(f"model_warmup input '{name}': data_type {datatype} cannot be warmed up")
    shape = ((max(1, batch_size),) if batched else ()) + tuple(int(d) for d in spec.dims)
    if any(d < 0 for d in shape):
        raise ModelConfigError(f"model_warmup input '{name}': dims must be fixed, got {list(spec.dims)}")
    check_config_tensor_size(f"model_warmup input '{name}'", shape, datatype)
    kind = spec.WhichOneof("input_data_type")
    if datatype == "BYTES":
        if kind == "input_data_file":
            raw = _read_file(name, spec.input_data_file, model_dir)
            return deserialize_bytes_tensor(raw, element_count(shape), name).reshape(shape)
        return np.full(shape, b"", dtype=object)  # zero and random data alike: empty strings
    dtype = wire_to_numpy(datatype)
    if kind == "input_data_file":
        raw = _read_file(name, spec.input_data_file, model_dir)
        expected = element_count(shape) * dtype.itemsize
        if len(raw) != expected:
            raise ModelConfigError(
                f"model_warmup input '{name}': {spec.input_data_file} holds {len(raw)} bytes, "
                f"shape {list(shape)} of {datatype} needs {expected}"
            )
        return np.frombuffer(raw, dtype=dtype).reshape(shape)
    if kind == "random_data":
        if dtype == np.bool_:
            return rng.integers(0, 2, shape).astype(np.bool_)
        if dtype == BF16_DTYPE or np.issubdtype(dtype, np.floating):
            return rng.standard_normal(shape).astype(dtype)
        return rng.integers(0, 16, shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)


def _read_file(name: str, relative: str, model_dir: Path) -> bytes:
    return read_data_file(model_dir, WARMUP_FOLDER, relative, f"model_warmup input '{name}': input_data_file")


def warmup_samples(
    config: model_config_pb2.ModelConfig, model_dir: Path
) -> list[tuple[model_config_pb2.ModelWarmup, dict[str, np.ndarray]]]:
    """Each configured warm-up with the inputs it sends (files read and checked, nothing run)."""
    rng = np.random.default_rng(0)
    samples = []
    for index, warmup in enumerate(config.model_warmup):
        try:
            inputs = {
                name: _input(name, spec, warmup.batch_size, config.max_batch_size > 0, model_dir, rng)
                for name, spec in warmup.inputs.items()
            }
        except ModelConfigError as exc:
            raise ModelConfigError(exc.message, f"model_warmup[{warmup.name or index}]") from None
        samples.append((warmup, inputs))
    return samples


def run_warmup(
    config: model_config_pb2.ModelConfig, instances: list[object], model_dir: Path, version: int
) -> None:
    """Run each configured warm-up ``count`` times on every tensor-backend instance."""
    if not config.model_warmup:
        return
    tensor_instances = [i for i in instances if hasattr(i, "execute")]
    if not tensor_instances:
        return  # request-level instances: warm_request_level, on the event loop
    outputs = [output.name for output in config.output]
    for warmup, inputs in warmup_samples(config, model_dir):
        for instance in tensor_instances:
            for _ in range(max(1, warmup.count)):
                try:
                    instance.execute(inputs, outputs)
                except Exception as exc:
                    raise ModelLoadError(f"model_warmup '{warmup.name}' failed: {exc}") from None
        logger.info(
            "'%s' version %d: warm-up '%s' ran %d time(s) on %d instance(s)",
            config.name, version, warmup.name, max(1, warmup.count), len(tensor_instances),
        )  # fmt: skip


async def warm_request_level(
    config: model_config_pb2.ModelConfig, instances: Sequence[object], model_dir: Path, version: int
) -> None:
    """Run each warm-up ``count`` times on every request-level instance (Python models, ensembles)."""
    # An ensemble lists one stateless runner many times over: each distinct instance is warmed once.
    distinct = {id(i): i for i in instances if hasattr(i, "execute_requests")}
    targets = [cast(RequestLevelInstance, i) for i in distinct.values()]
    if not config.model_warmup or not targets:
        return
    if config.model_transaction_policy.decoupled:
        logger.warning("'%s': model_warmup is not run for decoupled models", config.name)
        return
    outputs = tuple(output.name for output in config.output)
    for warmup, inputs in warmup_samples(config, model_dir):
        for instance in targets:
            for count in range(max(1, warmup.count)):
                request = BackendRequest(f"warmup-{warmup.name}-{count}", dict(inputs), outputs, {})
                try:
                    (response,) = await instance.execute_requests([request])
                except ServerError as exc:
                    raise ModelLoadError(f"model_warmup '{warmup.name}' failed: {exc.message}") from None
                if response.error is not None:
                    raise ModelLoadError(f"model_warmup '{warmup.name}' failed: {response.error.message}")
        logger.info(
            "'%s' version %d: warm-up '%s' ran %d time(s) on %d instance(s)",
            config.name, version, warmup.name, max(1, warmup.count), len(targets),
        )  # fmt: skip
