"""Where each field of a config.pbtxt is written, so a problem can point at its line.

protobuf's Python text parser keeps no positions, so this reads the text once more with a small
tokenizer of its own and records, for every field, the line it starts on. A field path is written
the way ``ModelConfigError.field`` writes it: ``input[INPUT0].dims``, ``ensemble_scheduling.step[1]``,
``sequence_batching.control_input[START]``; a bracket holds an index or the element's ``name``.
Only texts that protobuf has already parsed are read here, so the grammar can stay forgiving.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r\f\v]+) | (?P<newline>\n) | (?P<comment>\#[^\n]*)
    | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
    | (?P<word>[A-Za-z_][A-Za-z0-9_.]*|[-+]?[0-9][0-9A-Za-z_.+-]*|[-+][A-Za-z]+)
    | (?P<punct>[{}\[\]<>:,;])
    """,
    re.VERBOSE,
)
_PATH_PART = re.compile(r"(\w+)(?:\[([^\]]*)\])?")


@dataclass
class _Field:
    name: str
    line: int
    value: str = ""  # the first scalar written, unquoted (a repeated element's "name" is looked up here)
    children: list[_Field] = field(default_factory=list)


class ConfigLines:
    def __init__(self, text: str) -> None:
        self._tokens = [(kind, value, line) for kind, value, line in _tokenize(text)]
        self._position = 0
        self._root = _Field("", 1, children=self._message(closing=""))

    def line_of(self, path: str) -> int | None:
        """The line of the deepest written field on ``path`` (a parent's line when the leaf was
        auto-completed or left at its default), or None when nothing on the path is written."""
        node, line = self._root, None
        for name, selector in _PATH_PART.findall(path):
            matches = [child for child in node.children if child.name == name]
            if not matches:
                break
            if selector == "":
                chosen = matches[0]
            elif selector.isascii() and selector.isdigit() and not _has_named(matches, selector):
                index = int(selector)
                if index >= len(matches):
                    chosen = matches[0]
                    line = chosen.line
                    break
                chosen = matches[index]
            else:
                named = [m for m in matches if _name_of(m) == selector]
                if not named:
                    line = matches[0].line
                    break
                chosen = named[0]
            node, line = chosen, chosen.line
        return line

    # -- a forgiving reader of protobuf text format ------------------------------------------------

    def _peek(self) -> tuple[str, str, int]:
        if self._position < len(self._tokens):
            return self._tokens[self._position]
        return ("end", "", self._tokens[-1][2] if self._tokens else 1)

    def _next(self) -> tuple[str, str, int]:
        token = self._peek()
        self._position += 1
        return token

    def _message(self, closing: str) -> list[_Field]:
        fields: list[_Field] = []
        while True:
            kind, value, line = self._peek()
            if kind == "end" or (kind == "punct" and value == closing):
                self._position += 1
                return fields
            self._position += 1
            if kind != "word":
                continue  # separators (, ;) and anything unexpected
            if self._peek()[1] == ":":
                self._position += 1
            fields.extend(self._values(value, line))

    def _values(self, name: str, line: int) -> list[_Field]:
        kind, value, value_line = self._peek()
        if value in ("{", "<"):
            self._position += 1
            return [_Field(name, line, children=self._message("}" if value == "{" else ">"))]
        if value == "[":
            self._position += 1
            elements: list[_Field] = []
            scalars: list[str] = []
            while True:
                kind, value, value_line = self._next()
                if kind == "end" or value == "]":
                    break
                if value in ("{", "<"):
                    elements.append(
                        _Field(name, value_line, children=self._message("}" if value == "{" else ">"))
                    )
                elif kind in ("word", "string"):
                    scalars.append(_unquote(value))
            return elements or [_Field(name, line, value=scalars[0] if scalars else "")]
        self._position += 1
        text = _unquote(value)
        while self._peek()[0] == "string" and kind == "string":  # "a" "b" is one string
            text += _unquote(self._next()[1])
        return [_Field(name, line, value=text)]


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    tokens: list[tuple[str, str, int]] = []
    line = 1
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup or ""
        if kind == "newline":
            line += 1
        elif kind in ("word", "string", "punct"):
            tokens.append((kind, match.group(), line))
    return tokens


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _name_of(node: _Field) -> str:
    for child in node.children:
        if child.name in ("name", "input_name", "key"):
            return child.value
    return ""


def _has_named(nodes: list[_Field], selector: str) -> bool:
    return any(_name_of(node) == selector for node in nodes)
