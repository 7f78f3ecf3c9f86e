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

from trt.protos import model_config_pb2
from trt.server.core.errors import ModelConfigError

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
    ("dynamic_batching", "priority_levels"),
    ("dynamic_batching", "default_priority_level"),
    ("dynamic_batching", "default_queue_policy", "default_timeout_microseconds"),
    ("dynamic_batching", "priority_queue_policy", "*", "default_timeout_microseconds"),
    ("sequence_batching", "direct", "max_queue_delay_microseconds"),
    ("sequence_batching", "oldest", "max_queue_delay_microseconds"),
    ("sequence_batching", "max_sequence_idle_microseconds"),
    ("sequence_batching", "state", "*", "dims"),
    ("sequence_batching", "state", "*", "initial_state", "*", "dims"),
    ("ensemble_scheduling", "step", "*", "model_version"),
    ("model_warmup", "*", "inputs", "*", "dims"),
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
        raise ModelConfigError(
            f"{where}: {reason}{_did_you_mean(reason)}", line=line, column=column
        ) from None
    except ValueError as exc:  # protobuf's own range checks, e.g. an enum given 2**63 (found by fuzzing)
        raise ModelConfigError(f"{source}: {exc}") from None
    undefined = _undefined_enum_value(config)
    if undefined is not None:
        where, number, enum = undefined
        raise ModelConfigError(f"{source}: {where}: {number} is not a value of {enum}", where)
    return config


def _undefined_enum_value(message: Any, path: str = "") -> tuple[str, int, str] | None:
    """Where ``message`` holds a number that its enum does not define (the field's path, the number,
    the enum's name), or None. The text and JSON formats take any number for an enum field
    (``data_type: 32``), and every reader after the parse names the values it finds (found by fuzzing:
    a ValueError far from the config)."""
    for field, value in message.ListFields():
        where = f"{path}{field.name}"
        repeated = _is_repeated(field)
        if field.type == FieldDescriptor.TYPE_ENUM:
            for number in value if repeated else (value,):
                if number not in field.enum_type.values_by_number:
                    return where, number, field.enum_type.name
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                entry = field.message_type.fields_by_name["value"]
                if entry.type != FieldDescriptor.TYPE_MESSAGE:
                    continue  # the config's maps hold strings and messages, never enums
                children = [(f"{where}[{key}]", value[key]) for key in value]
            elif repeated:
                children = [(f"{where}[{index}]", item) for index, item in enumerate(value)]
            else:
                children = [(where, value)]
            for child_path, child in children:
                found = _undefined_enum_value(child, f"{child_path}.")
                if found is not None:
                    return found
    return None


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
    """config.pbtxt as Triton's own examples write it: repeated values in brackets (``dims: [ 16 ]``,
    ``input [ { ... }, { ... } ]``), fields in the order the proto declares them."""
    lines: list[str] = []
    _write_message(config, lines, "")
    return "\n".join(lines) + "\n"


# Fields printed even at their default: a sequence control's kind is what the entry is about, and
# CONTROL_SEQUENCE_START is enum value 0, which proto3 would leave out.
_ALWAYS_PRINTED = {"inference.ModelSequenceBatching.Control": "kind"}


def _fields(message: Any) -> list[tuple[Any, Any]]:
    fields = list(message.ListFields())
    always = _ALWAYS_PRINTED.get(message.DESCRIPTOR.full_name)
    if always and all(field.name != always for field, _ in fields):
        field = message.DESCRIPTOR.fields_by_name[always]
        fields.append((field, getattr(message, always)))
        fields.sort(key=lambda item: item[0].number)
    return fields


def _write_message(message: Any, lines: list[str], indent: str) -> None:
    for field, value in _fields(message):
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for key in sorted(value):
                entry = field.message_type._concrete_class(key=key, value=value[key])
                _write_block(field.name, entry, lines, indent)
        elif _is_repeated(field):
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                lines.append(f"{indent}{field.name} [")
                for index, item in enumerate(value):
                    lines.append(f"{indent}  {{")
                    _write_message(item, lines, indent + "    ")
                    lines.append(f"{indent}  }}" + ("," if index < len(value) - 1 else ""))
                lines.append(f"{indent}]")
            else:
                items = ", ".join(_scalar(field, item) for item in value)
                lines.append(f"{indent}{field.name}: [ {items} ]")
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            _write_block(field.name, value, lines, indent)
        else:
            lines.append(f"{indent}{field.name}: {_scalar(field, value)}")


def _write_block(name: str, message: Any, lines: list[str], indent: str) -> None:
    """A message on one line when it is short and flat (``parameters { key: "a" value { ... } }``)."""
    compact = _one_line(message)
    if compact is not None and len(indent) + len(name) + len(compact) < 100:
        lines.append(f"{indent}{name} {{ {compact} }}" if compact else f"{indent}{name} {{ }}")
        return
    lines.append(f"{indent}{name} {{")
    _write_message(message, lines, indent + "  ")
    lines.append(f"{indent}}}")


def _one_line(message: Any) -> str | None:
    parts: list[str] = []
    for field, value in _fields(message):
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if _is_repeated(field):
                return None
            inner = _one_line(value)
            if inner is None:
                return None
            parts.append(f"{field.name} {{ {inner} }}" if inner else f"{field.name} {{ }}")
        elif _is_repeated(field):
            parts.append(f"{field.name}: [ {', '.join(_scalar(field, item) for item in value)} ]")
        else:
            parts.append(f"{field.name}: {_scalar(field, value)}")
    return " ".join(parts)


def _is_repeated(field: FieldDescriptor) -> bool:
    # protobuf 7 has only ``is_repeated``; 6.30 only ``label``, which 6.33 deprecates.
    repeated = getattr(field, "is_repeated", None)
    return field.label == FieldDescriptor.LABEL_REPEATED if repeated is None else bool(repeated)


def _scalar(field: Any, value: Any) -> str:
    if field.type == FieldDescriptor.TYPE_ENUM:
        return str(field.enum_type.values_by_number[value].name)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    printed: str = text_format.MessageToString(_single(field, value), as_one_line=True)
    return printed.split(":", 1)[1].strip()


def _single(field: Any, value: Any) -> Any:
    """A one-field message holding ``value``, so protobuf prints the number (floats, int64) its way."""
    holder = field.containing_type._concrete_class()
    if _is_repeated(field):
        getattr(holder, field.name).append(value)
    else:
        setattr(holder, field.name, value)
    return holder


def config_to_dict(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """The JSON object Triton returns for a model's configuration."""
    as_dict: dict[str, Any] = json_format.MessageToDict(
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
    undefined = _undefined_enum_value(config)
    if undefined is not None:
        where, number, enum = undefined
        raise ModelConfigError(
            f"invalid model configuration: {where}: {number} is not a value of {enum}", where
        )
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
