"""Parsing helpers for tritonserver-style flags (``--flag=true|false``, ``--backend-config=b,k=v``)."""

from __future__ import annotations

import typer

_TRUE = {"true", "1", "yes", "on", "t", "y"}
_FALSE = {"false", "0", "no", "off", "f", "n"}


def parse_bool(value: str, flag: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise typer.BadParameter(f"{flag} takes true or false, got '{value}'")


def parse_backend_config(values: list[str]) -> dict[str, dict[str, str]]:
    """``--backend-config=onnxruntime,k=v`` (or ``k=v`` for every backend, keyed by "")."""
    result: dict[str, dict[str, str]] = {}
    for value in values:
        backend, _, setting = value.partition(",") if "," in value else ("", "", value)
        key, sep, setting_value = setting.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--backend-config expects [BACKEND,]KEY=VALUE, got '{value}'")
        result.setdefault(backend, {})[key] = setting_value
    return result
