"""``pb_utils.Logger``, as Triton's: a message and a level (INFO, WARNING, ERROR, VERBOSE)."""

from __future__ import annotations

import trt_pb_runtime


class Logger:
    """Log lines go to the server's log, tagged with the model."""

    @staticmethod
    def log(message: str, level: int = 0) -> None:
        trt_pb_runtime.current.log(
            ("INFO", "WARNING", "ERROR", "VERBOSE")[level] if 0 <= level < 4 else "INFO", str(message)
        )

    @staticmethod
    def log_info(message: str) -> None:
        trt_pb_runtime.current.log("INFO", str(message))

    @staticmethod
    def log_warn(message: str) -> None:
        trt_pb_runtime.current.log("WARNING", str(message))

    @staticmethod
    def log_error(message: str) -> None:
        trt_pb_runtime.current.log("ERROR", str(message))

    @staticmethod
    def log_verbose(message: str) -> None:
        trt_pb_runtime.current.log("VERBOSE", str(message))

    INFO, WARNING, ERROR, VERBOSE = 0, 1, 2, 3
