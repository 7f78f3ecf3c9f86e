"""Property-based fuzzing of the config.pbtxt loader and the JSON config a load request carries.

Any text either parses or is refused with a ModelConfigError naming where; a parsed config goes
through every rule the loader applies (each problem a ModelConfigError, nothing else) and writes back
to the same config as text and as JSON. Read from a model folder, a config completes or is refused
with a ServerError, and never makes the loader open a file outside that folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import SIMPLE_CONFIG, add_sub_model, save_onnx
from trt.server.core.errors import ModelConfigError, ServerError
from trt.server.core.models.config import config_from_json, config_to_json, config_to_text, parse_config_text
from trt.server.core.models.config_paths import check_config_paths
from trt.server.core.models.config_rules import config_problems
from trt.server.core.models.loader import complete_config
from trt.server.core.options import CoreOptions

# protobuf's text parser warns on the backslashes the fuzzer writes into strings.
pytestmark = pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")

TOKENS = [
    'name: "simple"', 'platform: "onnxruntime_onnx"', 'backend: "python"', "max_batch_size:", "-1", "0",
    "8", "9223372036854775808", "input", "output", "[", "]", "{", "}", ",", ":", "dims:", "data_type:",
    "TYPE_FP32", "TYPE_STRING", "TYPE_INT33", "TYPE_FLOAT", 'label_filename: "../x"',
    'default_model_filename: "/etc/passwd"', "dynamic_batching { }", "sequence_batching { direct { } }",
    "instance_group [ { count: 2 kind: KIND_CPU } ]", "version_policy: { specific { versions: [ 1, 3 ] } }",
    "reshape: { shape: [ ] }", "optional: true",
    'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "/usr" } }', "\\", '"', "#", "\n", "\x00",
]  # fmt: skip
TEXTS = st.one_of(
    st.text(max_size=120),
    st.lists(st.sampled_from(TOKENS), max_size=30).map(" ".join),
    st.tuples(
        st.integers(0, len(SIMPLE_CONFIG)), st.integers(0, 40), st.lists(st.sampled_from(TOKENS), max_size=3)
    ).map(lambda edit: SIMPLE_CONFIG[: edit[0]] + " ".join(edit[2]) + SIMPLE_CONFIG[edit[0] + edit[1] :]),
)


def _rules_and_round_trips(config: Any) -> None:
    for problem in config_problems(config):
        assert isinstance(problem, ModelConfigError)
    assert parse_config_text(config_to_text(config)) == config
    assert config_from_json(config_to_json(config)) == config


@given(TEXTS)
def test_any_config_text_parses_or_is_refused(text: str) -> None:
    try:
        config = parse_config_text(text)
    except ModelConfigError as exc:
        assert exc.message.startswith("config.pbtxt")
        return
    _rules_and_round_trips(config)


JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**65), 2**65), st.floats(), st.text(max_size=6)
)
JSON_KEYS = st.sampled_from(["name", "dims", "data_type", "string_value", "count", "kind"])
# Two levels of lists and objects, built without st.recursive (whose leaf limit made replays flaky).
JSON_INNER = st.one_of(
    JSON_SCALARS, st.lists(JSON_SCALARS, max_size=3), st.dictionaries(JSON_KEYS, JSON_SCALARS, max_size=3)
)
JSON_VALUES = st.one_of(
    JSON_INNER, st.lists(JSON_INNER, max_size=3), st.dictionaries(JSON_KEYS, JSON_INNER, max_size=3)
)
FIELDS = [
    "name", "platform", "backend", "max_batch_size", "input", "output", "instance_group", "dynamic_batching",
    "default_model_filename", "parameters", "model_warmup", "sequence_batching", "version_policy", "nonsense",
]  # fmt: skip


@given(st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES, max_size=5))
def test_any_json_override_parses_or_is_refused(document: dict[str, Any]) -> None:
    try:
        text = orjson.dumps(document)
    except (TypeError, orjson.JSONEncodeError):  # integers past 64 bits: no client can send them
        return
    try:
        config = config_from_json(text)
        check_config_paths(config, from_client=True)
    except ModelConfigError:
        return
    _rules_and_round_trips(config)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz_repo") / "simple"
    save_onnx(add_sub_model(), folder / "1" / "model.onnx")
    return folder


@given(TEXTS)
def test_a_model_folder_with_any_config_completes_or_is_refused(model_folder: Path, text: str) -> None:
    (model_folder / "config.pbtxt").write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        config, versions, _ = complete_config("simple", model_folder, CoreOptions())
    except ServerError:
        return
    assert versions and config.name == "simple"
