"""The open-file limit, taken up to its hard limit: a process that holds a file per connection (the
server, and ``trt perf``'s clients) runs out at the soft limit many hosts give it (1,024) long before
the machine does. At the limit the server's loop accepted no more and libuv reset the connections it
could not take without a word in the log; ``trt perf`` at concurrency 400 under a soft limit of 256
failed 74% of its requests (``Too many open files``)."""

from __future__ import annotations

import logging
import resource

logger = logging.getLogger("trt.open_files")


def raise_open_file_limit() -> int | None:
    """Take the soft limit up to the hard limit; the soft limit now (None: no limit)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return None
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        if soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            logger.debug("open-file limit raised from %d to %d", soft, wanted)
            soft = wanted
    except (ValueError, OSError) as exc:  # a hard limit the kernel will not grant (nr_open)
        logger.debug("open-file limit left as it was: %s", exc)
        return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    return int(soft)
