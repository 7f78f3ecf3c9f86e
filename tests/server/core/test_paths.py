"""The one rule for names and paths from clients and configs (trt/server/core/paths.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trt.server.core.errors import UnsafePath
from trt.server.core.paths import (
    contained,
    escape_problem,
    inside,
    relative_path_problem,
    relative_to_holder,
    safe_name,
    shown,
)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("..", "'..' segment"),
        ("", "empty"),
        ("a/b", "path separator"),
        ("a\\b", "path separator"),
        ("m\x00", "NUL"),
        ("A" * 256, "over 255 bytes"),
        ("\u00e9" * 128, "over 255 bytes"),  # 256 bytes in UTF-8, 128 characters
    ],
)
def test_a_name_is_one_segment(name: str, reason: str) -> None:
    with pytest.raises(UnsafePath, match=reason):
        safe_name(name, "model name")


def test_ordinary_names_pass_unchanged() -> None:
    assert safe_name("resnet50_v1.5-int8", "model name") == "resnet50_v1.5-int8"
    assert safe_name("A" * 255, "model name") == "A" * 255


@pytest.mark.parametrize(
    "value", ["../x", "1/../../x", "/etc/passwd", "1//x", "./x", "1/", "a\\..\\x", "x\x00", "a/" * 2049]
)
def test_what_a_client_sends_meets_the_strict_rule(value: str, tmp_path: Path) -> None:
    assert relative_path_problem(value) is not None
    with pytest.raises(UnsafePath, match="must be a relative path that stays inside its folder"):
        inside(tmp_path, value, "file")


def test_a_safe_relative_path_is_joined_to_its_folder(tmp_path: Path) -> None:
    assert inside(tmp_path, "1/model.onnx", "file") == tmp_path / "1" / "model.onnx"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("model.onnx", "model.onnx"),
        ("weights/./model.onnx", "weights/model.onnx"),
        ("weights/../model.onnx", "model.onnx"),
        ("../1/model.onnx", None),
        ("weights/../../x", None),
        ("..", None),
        ("/etc/passwd", None),
        ("x\x00", None),
    ],
)
def test_an_operators_name_is_judged_once_dots_resolve(
    value: str, expected: str | None, tmp_path: Path
) -> None:
    assert contained(tmp_path, value) == (None if expected is None else tmp_path / expected)
    assert (escape_problem(value) is None) == (expected is not None)


def test_names_in_messages_are_bounded_and_escaped() -> None:
    assert shown("a\x00b\nc") == "a\\x00b\\nc"
    assert shown("x" * 1000) == "x" * 77 + "..."


def test_paths_under_a_holder_read_from_it_and_other_paths_are_left_alone(tmp_path: Path) -> None:
    holder = tmp_path / "m"
    holder.mkdir()
    (tmp_path / "linked").symlink_to(holder)
    text = f"cannot read {holder}/x/config.pbtxt; '{tmp_path}/linked/y/1' "
    text += f"(from {holder.resolve()}/z) /mnt{holder}/w"
    assert relative_to_holder(text, tmp_path / "linked") == (
        f"cannot read x/config.pbtxt; 'y/1' (from z) /mnt{holder}/w"
    )


def test_nothing_is_rewritten_for_models_held_by_the_root_folder() -> None:
    text = "cannot read /x/config.pbtxt"
    assert relative_to_holder(text, Path("/")) == text
