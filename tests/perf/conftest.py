"""One ``trt serve`` for the perf tests: add/sub, a string model, a sequence model, a decoupled model,
and one that fails every third request."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.perf.perf_support import write_accumulator, write_flaky, write_square, write_string_identity
from tests.support import ServerProcess, write_simple


@pytest.fixture(scope="session")
def perf_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("perf_repo")
    write_simple(repo)
    write_string_identity(repo)
    write_accumulator(repo)
    write_square(repo)
    write_flaky(repo)
    proc = ServerProcess([repo], ["--allow-client-shm=true"]).start(tmp_path_factory.mktemp("perf_logs"))
    yield proc
    assert proc.alive(), f"the server died during the perf tests:\n{proc.log()}"
    proc.stop()
