"""A load request's ``file:`` contents are decoded a slice at a time (so that the event loop gets the GIL
between slices), with exactly the strict base64 of decoding them whole."""

from __future__ import annotations

import base64
import binascii
import os

import pytest

from trt.server.http import model_push


@pytest.fixture
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_push, "_SLICE_CHARS", 8)


def _whole(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _sliced(text: str) -> bytes | None:
    try:
        return model_push._b64decode(text)
    except (binascii.Error, ValueError):
        return None


@pytest.mark.usefixtures("small_slices")
def test_every_length_decodes_as_it_would_whole() -> None:
    for size in range(64):
        data = os.urandom(size)
        assert _sliced(base64.b64encode(data).decode()) == data


@pytest.mark.usefixtures("small_slices")
@pytest.mark.parametrize(
    "text",
    [
        "QUJD=QUJDQUJD",
        "QQ==QUJDQUJD",
        "QUJDQUJDQ",
        "QUJD QUJDQUJD",
        "QUJDQUJD\nQUJD",
        "QUJDQUJDQUJ-",
        "QUJDQUJDQUJé",
    ],
)
def test_what_whole_decoding_refuses_sliced_decoding_refuses(text: str) -> None:
    assert _whole(text) is None and _sliced(text) is None


def test_a_load_body_is_read_with_its_config_and_files() -> None:
    files = {"file:1/model.onnx": base64.b64encode(os.urandom(3000)).decode()}
    load = model_push._decode({"config": "{}", **files, "other": "kept out"})
    assert load.config == "{}"
    assert load.files == {"file:1/model.onnx": base64.b64decode(files["file:1/model.onnx"])}
