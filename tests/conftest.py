"""Shared fixtures (a model repository with good and broken models, and one running server), and the
order in which test files go to the workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ServerProcess, write_autocomplete, write_broken, write_identity, write_simple

# The files that take longest (about a minute each on two cores), handed to the workers first: each
# worker runs whole files (pyproject's --dist loadfile), so one of these started last would leave the
# other worker idle for its minute at the end.
_LONGEST_FIRST = (
    "tests/packaging/test_compiled_build.py",
    "tests/packaging/test_install.py",
    "tests/server/repo/test_add.py",
    "tests/analyzer/test_analyze.py",
    "tests/server/test_perf_analyzer.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: index for index, path in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: others keep order


@pytest.fixture(scope="module")
def marks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of the test file's own where its models leave files ($MARKS) that say what they did."""
    return tmp_path_factory.mktemp("marks")


@pytest.fixture(scope="session")
def model_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with the add/sub model, every-dtype identity, an auto-completed model and broken ones."""
    repo = tmp_path_factory.mktemp("repo")
    write_simple(repo)
    write_identity(repo)
    write_autocomplete(repo)
    write_broken(repo)
    return repo


@pytest.fixture(scope="session")
def server(model_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the read-mostly protocol tests (broken models present, so --exit-on-error=false;
    client shared memory allowed, as the shared-memory tests need)."""
    proc = ServerProcess(
        [model_repo], ["--exit-on-error=false", "--strict-readiness=false", "--allow-client-shm=true"]
    )
    proc.start(tmp_path_factory.mktemp("logs"))
    yield proc
    assert proc.alive(), f"the server died during the tests:\n{proc.log()}"
    proc.stop()
