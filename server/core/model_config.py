"""Reading, writing and converting ``inference.ModelConfig``, exactly as Triton does.

``config.pbtxt`` is parsed with the real proto schema (``protos/model_config.proto``), so a config that
Triton accepts parses here too. The JSON form is what ``GET /v2/models/{m}/config`` returns and what
``load`` accepts as an override; it follows Triton's rules: proto field names, every scalar printed
with its default, enum names, and a fixed list of int64 fields printed as numbers instead of the
strings protobuf's JSON mapping would give.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import orjson
from google.protobuf import json_format, text_format
from google.protobuf.descriptor import FieldDescriptor

from protos import model_config_pb2
from server.core.errors import ModelConfigError

ModelConfig = model_config_pb2.ModelConfig

# Triton prints these int64/uint64 fields as JSON numbers (model_config_utils.cc); every other 64-bit
# integer stays a string, as protobuf's JSON mapping says.
_NUMERIC_INT64_PATHS: tuple[tuple[str, ...], ...] = (
    ("input", "*", "dims"),
    ("input", "*", "reshape", "shape"),
    ("output", "*", "dims"),
    ("output", "*", "reshape", "shape"),
    ("version_policy", "specific", "versions"),
    ("dynamic_batching", "max_queue_delay_microseconds"),
    ("dynamic_batching", "default_queue_policy", "default_timeout_microseconds"),
    ("dynamic_batching", "priority_queue_policy", "*", "default_timeout_microseconds"),
    ("sequence_batching", "direct", "max_queue_delay_microseconds"),
    ("sequence_batching", "oldest", "max_queue_delay_microseconds"),
    ("sequence_batching", "max_sequence_idle_microseconds"),
    ("sequence_batching", "state", "*", "dims"),
    ("sequence_batching", "state", "*", "initial_state", "*", "dims"),
    ("ensemble_scheduling", "step", "*", "model_version"),
    ("model_warmup", "*", "inputs", "*", "dims"),
    ("batch_input", "*", "source_input"),
)


def parse_config_text(text: str, source: str = "config.pbtxt") -> model_config_pb2.ModelConfig:
    """Parse protobuf text format; errors name the file, line and column, and suggest the name meant
    when a field or enum value is misspelt."""
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        reason = str(exc).split(" : ", 1)[-1] if line is not None else str(exc)
        where = f"{source}:{line}:{column}" if line is not None else source
        raise ModelConfigError(f"{where}: {reason}{_did_you_mean(reason)}", line=line) from None
    return config


_UNKNOWN_FIELD = re.compile(r'Message type "inference\.(\w+)" has no field named "(\w+)"')
_UNKNOWN_ENUM = re.compile(r'Enum type "inference\.([\w.]+)" has no value named (\w+)')


# Data type names people write from other frameworks; string similarity alone would pick wrong ones.
_DATA_TYPE_ALIASES = {
    "TYPE_FLOAT": "TYPE_FP32", "TYPE_FLOAT32": "TYPE_FP32", "TYPE_FLOAT16": "TYPE_FP16",
    "TYPE_HALF": "TYPE_FP16", "TYPE_DOUBLE": "TYPE_FP64", "TYPE_FLOAT64": "TYPE_FP64",
    "TYPE_BYTES": "TYPE_STRING", "TYPE_STR": "TYPE_STRING", "TYPE_INT": "TYPE_INT32",
    "TYPE_LONG": "TYPE_INT64", "TYPE_BFLOAT16": "TYPE_BF16",
}  # fmt: skip


def _did_you_mean(reason: str) -> str:
    """Triton's parser says what is wrong; add the name that was probably meant."""
    candidates: list[str] = []
    if match := _UNKNOWN_FIELD.search(reason):
        message = model_config_pb2.DESCRIPTOR.message_types_by_name.get(match.group(1))
        message = message or _nested_message(match.group(1))
        if message is not None:
            candidates = [field.name for field in message.fields]
        wrong = match.group(2)
    elif match := _UNKNOWN_ENUM.search(reason):
        if match.group(2).upper() in _DATA_TYPE_ALIASES:
            return f' (did you mean "{_DATA_TYPE_ALIASES[match.group(2).upper()]}"?)'
        enum = _enum_named(match.group(1))
        candidates = [value.name for value in enum.values] if enum is not None else []
        wrong = match.group(2)
    else:
        return ""
    close = difflib.get_close_matches(wrong, candidates, n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _nested_message(name: str) -> Any:
    for message in model_config_pb2.DESCRIPTOR.message_types_by_name.values():
        for nested in message.nested_types:
            if nested.name == name:
                return nested
    return None


def _enum_named(dotted: str) -> Any:
    parts = dotted.split(".")
    if len(parts) == 1:
        return model_config_pb2.DESCRIPTOR.enum_types_by_name.get(parts[0])
    message = model_config_pb2.DESCRIPTOR.message_types_by_name.get(parts[0])
    for part in parts[1:-1]:
        message = message.nested_types_by_name.get(part) if message is not None else None
    return message.enum_types_by_name.get(parts[-1]) if message is not None else None


def read_config_file(path: Path) -> model_config_pb2.ModelConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelConfigError(f"cannot read {path}: {exc}") from None
    return parse_config_text(text, str(path))


def config_to_text(config: model_config_pb2.ModelConfig) -> str:
    return text_format.MessageToString(config)


def config_to_dict(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """The JSON object Triton returns for a model's configuration."""
    as_dict = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    for path in _NUMERIC_INT64_PATHS:
        _numbers_at(as_dict, path)
    return as_dict


def config_to_json(config: model_config_pb2.ModelConfig) -> bytes:
    return orjson.dumps(config_to_dict(config))


def config_from_json(text: str | bytes) -> model_config_pb2.ModelConfig:
    """Parse a JSON ModelConfig as Triton's load override does: enum names in any case, numbers as
    strings allowed, unknown fields rejected."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ModelConfigError(f"model configuration is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ModelConfigError("model configuration JSON must be an object")
    _uppercase_enums(value, ModelConfig.DESCRIPTOR)
    config = ModelConfig()
    try:
        json_format.ParseDict(value, config)
    except json_format.ParseError as exc:
        raise ModelConfigError(f"invalid model configuration: {exc}") from None
    return config


def _numbers_at(node: Any, path: tuple[str, ...]) -> None:
    if not path:
        return
    key, rest = path[0], path[1:]
    if key == "*":
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
        for child in children:
            _numbers_at(child, rest)
        return
    if not isinstance(node, dict) or key not in node:
        return
    if rest:
        _numbers_at(node[key], rest)
    elif isinstance(node[key], list):
        node[key] = [int(v) for v in node[key]]
    elif isinstance(node[key], str):
        node[key] = int(node[key])


def _uppercase_enums(node: dict[str, Any], descriptor: Any) -> None:
    for key, value in node.items():
        field = descriptor.fields_by_name.get(key) or descriptor.fields_by_camelcase_name.get(key)
        if field is None:
            continue  # ParseDict reports unknown fields with a better message
        if field.type == FieldDescriptor.TYPE_ENUM:
            if isinstance(value, str):
                node[key] = value.upper()
            elif isinstance(value, list):
                node[key] = [v.upper() if isinstance(v, str) else v for v in value]
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            message = field.message_type
            if message.GetOptions().map_entry:
                value_field = message.fields_by_name["value"]
                if value_field.type == FieldDescriptor.TYPE_MESSAGE and isinstance(value, dict):
                    for item in value.values():
                        if isinstance(item, dict):
                            _uppercase_enums(item, value_field.message_type)
            elif isinstance(value, dict):
                _uppercase_enums(value, message)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, dict):
                        _uppercase_enums(item, message)
