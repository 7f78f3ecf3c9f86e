"""Reading, writing and converting ``inference.ModelConfig``, exactly as Triton does.

``config.pbtxt`` is parsed with the real proto schema (``protos/model_config.proto``), so a config that
Triton accepts parses here too. The JSON form is what ``GET /v2/models/{m}/config`` returns and what
``load`` accepts as an override; it follows Triton's rules: proto field names, every scalar printed
with its default, enum names, and a fixed list of int64 fields printed as numbers instead of the
strings protobuf's JSON mapping would give.
"""

from __future__ import annotations

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
    """Parse protobuf text format; errors name the file, line and column."""
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise ModelConfigError(f"{source}:{exc}") from None
    return config


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
