"""The model table's name index: which entry a request naming a model means, and when a name that
several namespaces hold is ambiguous (``--model-namespacing``)."""

from __future__ import annotations

import pytest

from trt.server.core.errors import InvalidArgument
from trt.server.core.models.table import ModelKey, ModelTable

FIRST, SECOND = ModelKey("/repo/a", "simple"), ModelKey("/repo/b", "simple")


def test_a_name_one_namespace_holds_is_its_model() -> None:
    table = ModelTable()
    entry = table.add(FIRST)
    assert table.named("simple") is entry and table.by_name["simple"] is entry
    assert table.named("other") is None


def test_a_name_two_namespaces_hold_is_ambiguous_but_each_namespace_finds_its_own() -> None:
    table = ModelTable()
    first, second = table.add(FIRST), table.add(SECOND)
    assert table.by_name["simple"] is None
    with pytest.raises(InvalidArgument, match="There are 2 identifiers of model 'simple'"):
        table.named("simple")
    assert table.preferring("/repo/a", "simple") is first
    assert table.preferring("/repo/b", "simple") is second
    with pytest.raises(InvalidArgument):
        table.preferring("/repo/c", "simple")  # neither is the third namespace's


def test_a_released_model_no_longer_holds_its_name() -> None:
    table = ModelTable()
    first, second = table.add(FIRST), table.add(SECOND)
    table.release(SECOND)
    assert table.named("simple") is first
    table.release(FIRST)
    assert table.named("simple") is None  # two entries, neither holding the name: none is meant
    assert table.add(SECOND) is second and table.named("simple") is second


def test_without_namespaces_an_unloaded_model_is_still_the_one_its_name_means() -> None:
    """Its entry answers that it has no versions, rather than that no such model exists."""
    table = ModelTable()
    entry = table.add(ModelKey("", "simple"))
    table.release(ModelKey("", "simple"))
    assert table.named("simple") is entry and table.by_name["simple"] is entry
    assert str(ModelKey("", "simple")) == "simple" and str(FIRST) == "/repo/a::simple"
