"""What trt perf needs to know about a model, from its config or, where a server has no config call
(MLServer, KServe), from its metadata alone."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("trt.perf")


@dataclass(frozen=True)
class TensorSpec:
    """One input or output; ``dims`` excludes the batch dimension when the model batches."""

    name: str
    datatype: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    version: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batching: bool
    max_batch_size: int | None  # None: unknown (metadata only)
    sequence: bool = False
    decoupled: bool = False
    response_cache: bool = False
    source: str = "config"  # "config" or "metadata"


def _wire_type(config_type: str) -> str:
    name = config_type.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def _tensors(entries: list[dict[str, Any]]) -> tuple[TensorSpec, ...]:
    return tuple(
        TensorSpec(
            str(e["name"]), _wire_type(str(e.get("data_type", "TYPE_FP32"))), tuple(int(d) for d in e["dims"])
        )
        for e in entries
    )


def from_config(config: dict[str, Any], version: str) -> ModelInfo:
    """From the model-config call's JSON (HTTP) or the proto as a dict (gRPC), Triton's field names."""
    max_batch = int(config.get("max_batch_size", 0) or 0)
    policy = config.get("model_transaction_policy") or {}
    cache = config.get("response_cache") or {}
    return ModelInfo(
        name=str(config["name"]),
        version=version,
        inputs=_tensors(list(config.get("input", []))),
        outputs=_tensors(list(config.get("output", []))),
        batching=max_batch > 0,
        max_batch_size=max_batch,
        sequence=config.get("sequence_batching") is not None,
        decoupled=bool(policy.get("decoupled", False)),
        response_cache=bool(cache.get("enable", False)),
    )


def from_metadata(metadata: dict[str, Any], version: str) -> ModelInfo:
    """From KServe v2 model metadata: a leading -1 on every input is taken to be the batch dimension."""
    inputs = list(metadata.get("inputs", []))
    outputs = list(metadata.get("outputs", []))
    batching = bool(inputs) and all(list(t.get("shape", []))[:1] == [-1] for t in inputs)

    def specs(entries: list[dict[str, Any]]) -> tuple[TensorSpec, ...]:
        result = []
        for entry in entries:
            shape = tuple(int(d) for d in entry.get("shape", []))
            if batching and shape[:1] == (-1,):
                shape = shape[1:]
            result.append(TensorSpec(str(entry["name"]), str(entry["datatype"]), shape))
        return tuple(result)

    logger.info("model '%s': no model-config call on this server; using its metadata", metadata.get("name"))
    return ModelInfo(
        name=str(metadata.get("name", "")),
        version=version,
        inputs=specs(inputs),
        outputs=specs(outputs),
        batching=batching,
        max_batch_size=None,
        source="metadata",
    )
