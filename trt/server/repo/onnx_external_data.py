"""The files an ONNX model keeps its tensors in ("external data"), found without loading them.

A model saved with ``onnx.save(..., save_as_external_data=True)`` names, for each such tensor, a file
relative to the model file. ``trt repo add`` copies those files beside the model so that it loads
where it lands; this finds them in the graph (subgraphs and functions too) and checks each one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from trt.server.core.errors import InvalidArgument

if TYPE_CHECKING:
    from onnx import GraphProto, ModelProto, NodeProto, TensorProto


class ExternalDataError(InvalidArgument):
    """An external data file is missing, or lies outside the model's folder."""


def external_data_files(model_file: Path) -> list[tuple[Path, str]] | None:
    """(file, location relative to the model's folder) for each data file the model names, once each;
    None without the onnx package. The weights stay on disk: only the graph is read."""
    onnx = _import_onnx()
    if onnx is None:
        return None
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    try:
        model = onnx.load(str(model_file), load_external_data=False)
    except Exception:  # not an ONNX file: onnxruntime's check says so, in its words
        return []
    found: dict[str, Path] = {}
    for tensor in _model_tensors(model):
        if not uses_external_data(tensor):
            continue
        location = ExternalDataInfo(tensor).location
        target = _external_target(location, tensor.name, model_file)
        data = model_file.parent / target
        if target not in found and not data.is_file():
            raise ExternalDataError(
                f"{model_file.name} keeps tensor '{tensor.name}' in {model_file.parent / location}, which "
                "does not exist: put the file there (locations are relative to the model file) or save the "
                "model again with its weights"
            )
        found.setdefault(target, data)
    return [(data, target) for target, data in found.items()]


def _import_onnx() -> ModuleType | None:
    try:
        import onnx
    except ImportError:
        return None
    return onnx


def _external_target(location: str, tensor: str, model_file: Path) -> str:
    """Where the data file goes in the version folder: ``location``, as long as it stays in the folder."""
    if not location:
        raise ExternalDataError(
            f"{model_file.name}: tensor '{tensor}' is marked as external data but names no file"
        )
    normal = Path(os.path.normpath(location))  # 'weights/./w.bin' is 'weights/w.bin'
    if normal.is_absolute() or normal.parts[:1] == ("..",):
        raise ExternalDataError(
            f"{model_file.name} keeps tensor '{tensor}' at '{location}', outside the folder of the model: "
            "only files under it can travel with the model; save it with a relative location, e.g. "
            "onnx.save(model, path, save_as_external_data=True, location='weights.bin')"
        )
    return normal.as_posix()


def _model_tensors(model: ModelProto) -> Iterator[TensorProto]:
    """Every tensor that can live in an external file, in subgraphs and functions too."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        yield from _node_tensors(function.node)


def _graph_tensors(graph: GraphProto) -> Iterator[TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    yield from _node_tensors(graph.node)


def _node_tensors(nodes: Iterable[NodeProto]) -> Iterator[TensorProto]:
    for node in nodes:
        for attribute in node.attribute:
            # An unset message field reads as empty: no external data, no nodes.
            yield from (attribute.t, *attribute.tensors)
            for sparse in (attribute.sparse_tensor, *attribute.sparse_tensors):
                yield from (sparse.values, sparse.indices)
            for subgraph in (attribute.g, *attribute.graphs):
                yield from _graph_tensors(subgraph)
