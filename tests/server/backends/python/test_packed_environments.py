"""An ``EXECUTION_ENV_PATH`` archive is unpacked inside its cache folder or not at all (Triton's
L0_backend_python zip-slip cases: a member named with ``..`` or an absolute path), two models loading
one archive at once share its one unpacking, and an unpacking cut short is done again."""

from __future__ import annotations

import io
import tarfile
import threading
from pathlib import Path

import pytest

from trt.server.backends.python.backend import UNPACKED_MARK, _unpacked
from trt.server.core.errors import ModelLoadError


def _archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "environments"


def test_an_archive_whose_member_climbs_out_of_its_folder_is_refused_and_leaves_nothing(
    tmp_path: Path, cache: Path
) -> None:
    marker = tmp_path / "outside" / "marker"
    archive = _archive(tmp_path / "env.tar.gz", {"bin/python": b"#!", "../../outside/marker": b"escaped"})
    with pytest.raises(ModelLoadError, match=r"env\.tar\.gz cannot be unpacked: .*outside the destination"):
        _unpacked(archive)
    assert not marker.exists()
    assert not [entry for entry in cache.iterdir() if entry.is_dir()]  # no half-unpacked folder kept


def test_an_absolute_member_is_unpacked_inside_the_folder_not_where_it_points(
    tmp_path: Path, cache: Path
) -> None:
    """tarfile's ``data`` filter drops the leading '/' (Triton refuses the archive instead): either
    way nothing lands outside."""
    marker = tmp_path / "outside" / "marker"
    unpacked = _unpacked(_archive(tmp_path / "env.tar.gz", {str(marker): b"kept inside"}))
    assert not marker.exists()
    assert (unpacked / str(marker).lstrip("/")).read_bytes() == b"kept inside"


def test_one_archive_loaded_by_two_models_at_once_is_unpacked_once_for_both(
    tmp_path: Path, cache: Path
) -> None:
    members = {f"lib/module_{i}.py": b"x = 1\n" * 1000 for i in range(300)}
    archive = _archive(tmp_path / "env.tar.gz", members)
    results: list[Path | BaseException] = []

    def load() -> None:
        try:
            results.append(_unpacked(archive))
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(results)) == 1 and isinstance(results[0], Path), results
    assert [entry.name for entry in cache.iterdir() if entry.is_dir()] == [results[0].name]  # no staging
    assert (results[0] / "lib" / "module_7.py").read_bytes() == members["lib/module_7.py"]


def test_an_unpacking_cut_short_is_done_again(tmp_path: Path, cache: Path) -> None:
    archive = _archive(tmp_path / "env.tar.gz", {"bin/python": b"#!", "lib/site.py": b"x = 1\n"})
    unpacked = _unpacked(archive)
    (unpacked / "lib" / "site.py").unlink()  # as a kill during the unpacking would leave it
    (unpacked / UNPACKED_MARK).unlink()
    assert _unpacked(archive) == unpacked
    assert (unpacked / "lib" / "site.py").read_bytes() == b"x = 1\n"
