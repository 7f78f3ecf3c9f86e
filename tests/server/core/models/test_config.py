"""config.pbtxt as trt writes it (``trt repo add``, ``show``, ``trt analyze``): Triton's bracket style,
and always the same config when read back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.server.repo.catalogue import ADD_SUB, ENSEMBLE_CYCLE, ENSEMBLE_HEAD, SEQUENCE
from tests.support import ROOT
from trt.server.core.errors import ModelConfigError
from trt.server.core.models.config import (
    config_from_json,
    config_to_dict,
    config_to_json,
    config_to_text,
    parse_config_text,
)

RICH = (
    ADD_SUB
    + """
version_policy { specific { versions: [ 1, 3 ] } }
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  priority_queue_policy { key: 2 value { timeout_action: DELAY default_timeout_microseconds: 9000000000 } }
}
optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt"
  parameters { key: "precision_mode" value: "FP16" } } ] } }
model_warmup [ { name: "w" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ]
  zero_data: true } } } ]
parameters { key: "quote\\"and\\\\slash" value { string_value: "line\\nbreak" } }
instance_group [ { count: 2 kind: KIND_CPU
  rate_limiter { resources [ { name: "R" count: 2 } ] priority: 3 } } ]
"""
)

EXAMPLES = sorted((ROOT / "model_repository").glob("*/config.pbtxt"))
TEXTS = {
    "rich": RICH,
    "ensemble": ENSEMBLE_CYCLE,
    "ensemble_head": ENSEMBLE_HEAD % ("TYPE_INT32", "simple", "INPUT0", "A"),
    "sequence": SEQUENCE % ("START", "fp32_false_true: [ 0, 1.5 ]"),
    **{path.parent.name: path.read_text() for path in EXAMPLES},
}


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_written_text_reads_back_as_the_same_config(name: str) -> None:
    config = parse_config_text(TEXTS[name])
    assert parse_config_text(config_to_text(config)) == config


def test_the_text_is_written_the_way_triton_examples_write_it() -> None:
    text = config_to_text(parse_config_text(RICH))
    assert 'input [\n  {\n    name: "INPUT0"\n    data_type: TYPE_INT32\n    dims: [ 16 ]\n  },\n' in text
    assert 'parameters { key: "precision_mode" value: "FP16" }' in text
    assert "preferred_batch_size: [ 4, 8 ]" in text
    sequence = config_to_text(parse_config_text(SEQUENCE % ("START", "int32_false_true: [ 0, 1 ]")))
    assert "kind: CONTROL_SEQUENCE_START" in sequence  # enum value 0, printed all the same


def test_an_empty_message_is_written_as_braces() -> None:
    assert "dynamic_batching { }" in config_to_text(parse_config_text(ADD_SUB + "dynamic_batching { }"))


def test_a_written_file_needs_no_trailing_edit(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text(config_to_text(parse_config_text(ADD_SUB)))
    assert path.read_text().endswith("]\n")


@pytest.mark.parametrize("value", ["9223372036854775808", "-9223372036854775809"])
def test_an_enum_given_a_number_out_of_range_is_a_config_error(value: str) -> None:
    """Found by the long fuzz run: protobuf's text parser raised ValueError, not ParseError, for
    ``data_type: 9223372036854775808``, and it escaped as something other than a config problem."""
    text = f'name: "m" input [ {{ name: "x" data_type: {value} dims: [ 1 ] }} ]'
    with pytest.raises(ModelConfigError, match=r"config\.pbtxt: .*out of range"):
        parse_config_text(text)


_SEQUENCE_CONTROL = """
name: "m" backend: "python" max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
sequence_batching { control_input [ { name: "c" control [ { KIND } ] } ] }
"""


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            'name: "m" input [ { name: "x" data_type: 32 dims: [ 1 ] } ]',
            "input[0].data_type: 32 is not a value",
        ),
        (
            _SEQUENCE_CONTROL.replace("KIND", "kind: 9"),
            "control_input[0].control[0].kind: 9 is not a value of Kind",
        ),
        (
            _SEQUENCE_CONTROL.replace("KIND", "kind: CONTROL_SEQUENCE_CORRID data_type: 99"),
            "control[0].data_type: 99 is not a value of DataType",
        ),
        ('name: "m" instance_group [ { kind: 7 } ]', "instance_group[0].kind: 7 is not a value of Kind"),
    ],
    ids=["tensor data_type", "control kind", "correlation id data_type", "instance kind"],
)
def test_an_enum_given_a_number_it_does_not_define_is_refused_where_the_config_is_read(
    text: str, problem: str
) -> None:
    """Found by the fuzz run: the text format takes ``data_type: 32`` for an enum field, and the first
    reader to name the number (the config rules, a backend's signature check) raised ValueError."""
    with pytest.raises(ModelConfigError, match=re.escape(problem)):
        parse_config_text(text)


def test_an_enum_number_it_does_not_define_is_refused_in_a_json_override_too() -> None:
    override = b'{"name": "m", "input": [{"name": "x", "data_type": 32, "dims": [1]}]}'
    with pytest.raises(
        ModelConfigError, match=re.escape("input[0].data_type: 32 is not a value of DataType")
    ):
        config_from_json(override)


def test_the_json_config_writes_64_bit_numbers_where_triton_does_and_leaves_names_as_they_are() -> None:
    """As Triton's model_config_utils.cc fixes them: dynamic batching's priority fields are numbers; a
    batch input's source tensors are names (the JSON of a model with one failed: int('INPUT0'))."""
    config = parse_config_text(
        'name: "m" max_batch_size: 4\n'
        'batch_input [{ kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_FP32\n'
        '               source_input: "IN" }]\n'
        "dynamic_batching { priority_levels: 2 default_priority_level: 1\n"
        "                   max_queue_delay_microseconds: 100 }\n"
    )
    as_dict = config_to_dict(config)
    assert as_dict["batch_input"][0]["source_input"] == ["IN"]
    batching = as_dict["dynamic_batching"]
    assert (batching["priority_levels"], batching["default_priority_level"]) == (2, 1)
    assert batching["max_queue_delay_microseconds"] == 100
    assert config_from_json(config_to_json(config)) == config
