"""Triton's logging extension (HTTP ``/v2/logging``, gRPC ``LogSettings``) over Python logging."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from trt.server.core.errors import InvalidArgument, Unsupported

LOG_FORMATS = ("default", "ISO8601")


@dataclass(frozen=True)
class LogOptions:
    """tritonserver's --log-* flags, the settings the server starts with."""

    log_file: str = ""  # empty: standard error
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"


def log_formatter(log_format: str) -> logging.Formatter:
    """Triton's line prefixes: ``I1123 16:31:48.763 <pid> <logger>]`` by default, or with ISO8601
    ``2026-11-23T16:31:48Z I <pid> <logger>]`` (UTC)."""
    if log_format == "ISO8601":
        formatter = logging.Formatter(
            "%(asctime)s %(levelname).1s %(process)d %(name)s] %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ"
        )
        formatter.converter = time.gmtime
        return formatter
    return logging.Formatter(
        "%(levelname).1s%(asctime)s.%(msecs)03d %(process)d %(name)s] %(message)s", datefmt="%m%d %H:%M:%S"
    )


class LogSettings:
    """Current logging settings of the ``trt`` loggers, readable and changeable at run time."""

    def __init__(self, options: LogOptions | None = None) -> None:
        options = options or LogOptions()
        self.log_file = options.log_file
        self.log_info = options.log_info
        self.log_warning = options.log_warning
        self.log_error = options.log_error
        self.log_verbose_level = options.log_verbose_level
        self.log_format = options.log_format

    def current(self) -> dict[str, Any]:
        return {
            "log_file": self.log_file,
            "log_info": self.log_info,
            "log_warning": self.log_warning,
            "log_error": self.log_error,
            "log_verbose_level": self.log_verbose_level,
            "log_format": self.log_format,
        }

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        for key, value in changes.items():
            if key == "log_file":
                if value != self.log_file:
                    raise Unsupported("log_file can't be changed through the logging API")
            elif key in ("log_info", "log_warning", "log_error"):
                if not isinstance(value, bool):
                    raise InvalidArgument(f"expected a boolean for '{key}'")
                setattr(self, key, value)
            elif key == "log_verbose_level":
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise InvalidArgument("expected a non-negative integer for 'log_verbose_level'")
                self.log_verbose_level = value
            elif key == "log_format":
                if value not in LOG_FORMATS:
                    raise InvalidArgument("'log_format' must be 'default' or 'ISO8601'")
                self.log_format = value
            else:
                raise InvalidArgument(f"unknown logging setting '{key}'")
        self.apply()
        return self.current()

    def apply(self) -> None:
        logger = logging.getLogger("trt")
        if self.log_verbose_level > 0:
            level = logging.DEBUG
        elif self.log_info:
            level = logging.INFO
        elif self.log_warning:
            level = logging.WARNING
        elif self.log_error:
            level = logging.ERROR
        else:
            level = logging.CRITICAL + 1
        logger.setLevel(level)
        formatter = log_formatter(self.log_format)
        for handler in logging.getLogger().handlers + logger.handlers:
            handler.setFormatter(formatter)
