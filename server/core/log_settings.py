"""Triton's logging extension (HTTP ``/v2/logging``, gRPC ``LogSettings``) over Python logging."""

from __future__ import annotations

import logging
from typing import Any

from server.core.errors import InvalidArgument, Unsupported

_ISO_FORMAT = "%(asctime)s %(levelname).1s %(process)d %(name)s] %(message)s"
_DEFAULT_FORMAT = "%(levelname).1s%(asctime)s %(process)d %(name)s] %(message)s"


class LogSettings:
    """Current logging settings of the ``trt`` loggers, readable and changeable at run time."""

    def __init__(self, log_file: str = "") -> None:
        self.log_file = log_file
        self.log_info = True
        self.log_warning = True
        self.log_error = True
        self.log_verbose_level = 0
        self.log_format = "default"

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
                if value not in ("default", "ISO8601"):
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
        formatter = logging.Formatter(_ISO_FORMAT if self.log_format == "ISO8601" else _DEFAULT_FORMAT)
        for handler in logging.getLogger().handlers + logger.handlers:
            handler.setFormatter(formatter)
