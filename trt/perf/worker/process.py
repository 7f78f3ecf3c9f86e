"""Entry point of a worker process."""

from __future__ import annotations

import logging
from multiprocessing.connection import Connection

from trt.perf.worker.plan import WorkerPlan

logger = logging.getLogger("trt.perf")


def worker_main(plan: WorkerPlan, conn: Connection) -> None:
    try:
        if plan.async_mode:
            from trt.perf.worker.async_runner import AsyncRunner

            AsyncRunner(plan, conn).run()
        else:
            from trt.perf.worker.sync_runner import SyncRunner

            SyncRunner(plan, conn).run()
    except KeyboardInterrupt:
        pass
    except Exception as error:  # reported to the parent, which stops the run with this message
        logger.exception("worker %d failed", plan.index)
        try:
            conn.send(("error", f"{type(error).__name__}: {error}"))
        except OSError:
            pass
