"""Request inputs: random, zero, perf_analyzer's JSON input-data files, or a directory of raw files.

Every entry of a JSON file is one batch element; with ``-b N`` a request takes N consecutive entries.
A JSON ``data`` list of lists is one stream per sequence (perf_analyzer's format for sequence models).
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from trt.perf.errors import InputDataError
from trt.perf.model_info import ModelInfo, TensorSpec
from trt.perf.tensors import deserialize_bytes, numpy_type

Sample = dict[str, np.ndarray]  # one batch element per input


@dataclass(frozen=True)
class RequestInputs:
    """The named arrays of one request, batch dimension included when the model batches."""

    arrays: dict[str, np.ndarray]


@dataclass(frozen=True)
class InputData:
    streams: tuple[tuple[RequestInputs, ...], ...]
    from_files: bool  # True when the data (and for sequences, their lengths) came from the user


def element_shape(spec: TensorSpec, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The shape of one batch element: ``--shape`` fills variable (-1) dimensions."""
    if spec.name in shapes:
        given = shapes[spec.name]
        if len(given) != len(spec.dims) or any(
            d not in (-1, g) for d, g in zip(spec.dims, given, strict=True)
        ):
            raise InputDataError(
                f"--shape {spec.name}:{','.join(map(str, given))} does not fit the model's dims "
                f"[{','.join(map(str, spec.dims))}]"
            )
        return given
    if any(d < 0 for d in spec.dims):
        example = ",".join("4" if d < 0 else str(d) for d in spec.dims)
        raise InputDataError(
            f"input '{spec.name}' has variable dims [{','.join(map(str, spec.dims))}]: "
            f"pass --shape {spec.name}:{example}"
        )
    return spec.dims


def _synthetic(
    spec: TensorSpec,
    shape: tuple[int, ...],
    mode: str,
    rng: np.random.Generator,
    string_length: int,
    string_data: str | None,
) -> np.ndarray:
    dtype = numpy_type(spec.datatype, spec.name)
    count = math.prod(shape)
    if spec.datatype == "BYTES":
        if string_data is not None:
            value = string_data.encode()
        elif mode == "zero":
            value = b"0" * string_length
        else:
            letters = rng.integers(97, 123, size=string_length, dtype=np.uint8)
            value = letters.tobytes()
        return np.array([value] * count, dtype=np.object_).reshape(shape)
    if mode == "zero":
        return np.zeros(shape, dtype=dtype)
    if spec.datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.floating):
        return rng.random(shape).astype(dtype)
    return rng.integers(0, 100, size=shape).astype(dtype)


def _json_value(
    spec: TensorSpec, value: Any, default_shape: tuple[int, ...] | None, where: str
) -> np.ndarray:
    shape = default_shape
    if isinstance(value, dict) and "content" in value:
        if "shape" in value:
            shape = tuple(int(d) for d in value["shape"])
        value = value["content"]
    if shape is None:
        raise InputDataError(f"{where}: input '{spec.name}' has variable dims; give a \"shape\" or --shape")
    dtype = numpy_type(spec.datatype, spec.name)
    count = math.prod(shape)
    if isinstance(value, dict) and "b64" in value:
        raw = base64.b64decode(value["b64"])
        if spec.datatype == "BYTES":
            array = np.array(deserialize_bytes(raw), dtype=np.object_)
        else:
            array = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)
    elif spec.datatype == "BYTES":
        flat = np.array(value, dtype=np.object_).reshape(-1)
        array = np.array([v.encode() if isinstance(v, str) else bytes(v) for v in flat], dtype=np.object_)
    else:
        array = np.asarray(value, dtype=dtype).reshape(-1)
    if array.size != count:
        raise InputDataError(
            f"{where}: input '{spec.name}' expects {count} values for shape "
            f"[{','.join(map(str, shape))}], got {array.size}"
        )
    return array.reshape(shape)


def _read_json(path: Path, info: ModelInfo, shapes: dict[str, tuple[int, ...]]) -> list[list[Sample]]:
    try:
        document = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as error:
        raise InputDataError(f"--input-data {path}: cannot read it as JSON ({error})") from error
    entries = document.get("data") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise InputDataError(f'--input-data {path}: expected {{"data": [ ... ]}} with at least one entry')
    streams = entries if all(isinstance(e, list) for e in entries) else [entries]
    defaults: dict[str, tuple[int, ...] | None] = {}
    for spec in info.inputs:
        try:
            defaults[spec.name] = element_shape(spec, shapes)
        except InputDataError:
            defaults[spec.name] = None
    result: list[list[Sample]] = []
    for s, stream in enumerate(streams):
        samples: list[Sample] = []
        for i, entry in enumerate(stream):
            where = f"--input-data {path.name}, entry {i}" + (f" of stream {s}" if len(streams) > 1 else "")
            if not isinstance(entry, dict):
                raise InputDataError(f"{where}: expected an object of input names")
            missing = [spec.name for spec in info.inputs if spec.name not in entry]
            if missing:
                raise InputDataError(f"{where}: no data for input(s) {', '.join(missing)}")
            samples.append(
                {
                    spec.name: _json_value(spec, entry[spec.name], defaults[spec.name], where)
                    for spec in info.inputs
                }
            )
        result.append(samples)
    return result


def _read_directory(path: Path, info: ModelInfo, shapes: dict[str, tuple[int, ...]]) -> list[list[Sample]]:
    sample: Sample = {}
    for spec in info.inputs:
        file = path / spec.name
        if not file.is_file():
            raise InputDataError(f"--input-data {path}: no file named '{spec.name}' for that input")
        shape = element_shape(spec, shapes)
        if spec.datatype == "BYTES":
            lines = [line.encode() for line in file.read_text().splitlines()]
            sample[spec.name] = _json_value(spec, [x.decode() for x in lines], shape, str(file))
        else:
            raw = file.read_bytes()
            sample[spec.name] = _json_value(spec, {"b64": base64.b64encode(raw).decode()}, shape, str(file))
    return [[sample]]


def _batch(samples: list[Sample], start: int, batch_size: int, batching: bool) -> RequestInputs:
    if not batching:
        return RequestInputs(dict(samples[start % len(samples)]))
    chosen = [samples[(start + k) % len(samples)] for k in range(batch_size)]
    return RequestInputs({name: np.stack([s[name] for s in chosen]) for name in chosen[0]})


def load_input_data(
    info: ModelInfo,
    sources: tuple[str, ...],
    shapes: dict[str, tuple[int, ...]],
    batch_size: int,
    string_length: int = 128,
    string_data: str | None = None,
    seed: int = 0,
) -> InputData:
    """Every request's inputs, as one stream (or one per sequence when a JSON file gives several)."""
    if not info.batching and batch_size != 1:
        raise InputDataError(f"model '{info.name}' does not batch (max_batch_size 0): -b must be 1")
    if info.max_batch_size and batch_size > info.max_batch_size:
        raise InputDataError(
            f"-b {batch_size} is above model '{info.name}''s max_batch_size {info.max_batch_size}"
        )
    rng = np.random.default_rng(seed)
    streams: list[list[Sample]] = []
    from_files = False
    for source in sources or ("random",):
        if source in ("random", "zero"):
            sample = {
                spec.name: _synthetic(
                    spec, element_shape(spec, shapes), source, rng, string_length, string_data
                )
                for spec in info.inputs
            }
            streams.append([sample])
            continue
        path = Path(source)
        from_files = True
        if path.is_dir():
            streams.extend(_read_directory(path, info, shapes))
        elif path.is_file():
            streams.extend(_read_json(path, info, shapes))
        else:
            raise InputDataError(f"--input-data '{source}': not random, zero, a JSON file or a directory")
    if not from_files or not info.sequence:
        streams = [[s for stream in streams for s in stream]]
    result = []
    for samples in streams:
        step = batch_size if info.batching else 1
        count = len(samples) // math.gcd(len(samples), step) if info.batching else len(samples)
        result.append(tuple(_batch(samples, i * step, batch_size, info.batching) for i in range(count)))
    return InputData(tuple(result), from_files)
