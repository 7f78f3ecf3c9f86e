"""The rich consoles every command prints through."""

from __future__ import annotations

from rich.console import Console


def make_console(stderr: bool) -> Console:
    """A console on stdout or stderr; when not a terminal (logs, CI) 160 columns wide, so tables keep
    whole rows instead of 80 columns of wrapped cells."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        console.width = 160
    return console
