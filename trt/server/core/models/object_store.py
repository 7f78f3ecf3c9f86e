"""Model repositories on object storage (``s3://``, ``gs://``, ``as://``), mirrored into a local cache.

The serving core reads repositories as folders. A remote repository is copied into
``$TRT_CACHE_DIR/repositories/<name>-<hash>/`` and kept there between runs; each ``sync`` lists the
remote prefix and downloads only the objects whose size or ETag changed, and deletes what the remote
no longer has. A model that did not change keeps its local files untouched, so polling sees only real
changes. Files land by rename, so a reader never sees half a file.

Access goes through fsspec: ``s3fs`` for S3 (``pip install 'trt-serve[s3]'``), ``gcsfs`` for GCS and
``adlfs`` for Azure where installed. Credentials come from the usual places (``AWS_ACCESS_KEY_ID``
/ ``AWS_PROFILE`` / instance roles; ``GOOGLE_APPLICATION_CREDENTIALS``; ``AZURE_STORAGE_*``). An
S3-compatible store is reached through ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``) or, as in
Triton, by putting its address in the path: ``s3://host:port/bucket/path`` (plain HTTP) or
``s3://https://host:port/bucket/path``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trt.server.core.errors import ModelLoadError

logger = logging.getLogger("trt.object_store")

# Scheme -> (fsspec protocol, the package that provides it, the trt extra that installs it).
_SCHEMES: dict[str, tuple[str, str, str]] = {
    "s3": ("s3", "s3fs", "pip install 'trt-serve[s3]'"),
    "gs": ("gcs", "gcsfs", "pip install gcsfs"),
    "as": ("abfs", "adlfs", "pip install adlfs"),
    "az": ("abfs", "adlfs", "pip install adlfs"),
    "abfs": ("abfs", "adlfs", "pip install adlfs"),
}
_MANIFEST = ".trt-mirror.json"
_ENDPOINT_IN_PATH = re.compile(r"^(?:(https?)://)?([^/]+:\d+)/(.+)$")


def is_remote(location: str | Path) -> bool:
    scheme, sep, _ = str(location).partition("://")
    return bool(sep) and scheme in _SCHEMES


def cache_root() -> Path:
    """Where trt keeps what it downloads or unpacks (``TRT_CACHE_DIR``, default ``~/.cache/trt``)."""
    return Path(os.environ.get("TRT_CACHE_DIR") or Path.home() / ".cache" / "trt")


@dataclass(frozen=True, slots=True)
class RemoteLocation:
    uri: str  # as the user wrote it
    scheme: str  # "s3", "gs", "as", ...
    path: str  # bucket/prefix, no scheme, no trailing slash
    endpoint_url: str | None = None  # an S3-compatible store named in the path
    account: str | None = None  # Azure: Triton's as://account/container/path names the account

    @classmethod
    def parse(cls, uri: str) -> RemoteLocation:
        scheme, _, rest = uri.partition("://")
        if scheme not in _SCHEMES:
            raise ModelLoadError(f"'{uri}' is not an object-store path (s3://, gs:// or as://)")
        endpoint = account = None
        if scheme == "s3" and (match := _ENDPOINT_IN_PATH.match(rest)):
            endpoint = f"{match.group(1) or 'http'}://{match.group(2)}"
            rest = match.group(3)
        if scheme == "as":
            account, _, rest = rest.strip("/").partition("/")
        path = rest.strip("/")
        if not path:
            raise ModelLoadError(f"'{uri}' names no bucket or container")
        return cls(uri.rstrip("/"), scheme, path, endpoint, account or None)


class RemoteRepository:
    """A remote repository and its local mirror."""

    def __init__(self, uri: str, cache: Path | None = None) -> None:
        self.location = RemoteLocation.parse(uri)
        digest = hashlib.sha256(self.location.uri.encode()).hexdigest()[:12]
        label = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.location.path)[-40:]
        self.root = (cache or cache_root() / "repositories") / f"{label}-{digest}"
        self._fs: Any = None
        # Loads may ask for syncs concurrently; one sync's sweep of stale files must not meet another's
        # half-downloaded ones.
        self._syncing = threading.Lock()

    def __str__(self) -> str:
        return self.location.uri

    def display(self, local: Path) -> str:
        """A path inside the mirror, written as the remote path it came from."""
        try:
            relative = local.relative_to(self.root)
        except ValueError:
            return str(local)
        return f"{self.location.uri}/{relative.as_posix()}" if str(relative) != "." else self.location.uri

    def filesystem(self) -> Any:
        if self._fs is None:
            protocol, package, install = _SCHEMES[self.location.scheme]
            try:
                import fsspec

                options: dict[str, Any] = {}
                if self.location.account:
                    options["account_name"] = self.location.account
                if protocol == "s3":
                    endpoint = (
                        self.location.endpoint_url
                        or os.environ.get("AWS_ENDPOINT_URL_S3")
                        or os.environ.get("AWS_ENDPOINT_URL")
                    )
                    if endpoint:
                        options["client_kwargs"] = {"endpoint_url": endpoint}
                self._fs = fsspec.filesystem(protocol, **options)
            except ImportError:
                raise ModelLoadError(
                    f"{self.location.scheme}:// repositories need {package}: {install}"
                ) from None
        return self._fs

    def sync(self) -> tuple[int, int]:
        """Bring the mirror up to date; return (files downloaded, files removed)."""
        with self._syncing:
            return self._sync()

    def _sync(self) -> tuple[int, int]:
        fs = self.filesystem()
        try:
            listing = fs.find(self.location.path, withdirs=True, detail=True)
        except FileNotFoundError:
            raise ModelLoadError(f"model repository '{self.location.uri}' does not exist") from None
        except Exception as exc:  # each store's client raises its own types (credentials, network)
            raise ModelLoadError(f"cannot list model repository '{self.location.uri}': {exc}") from None
        remote_files: dict[str, tuple[str, int, str]] = {}  # relative path -> (key, size, tag)
        remote_dirs: set[str] = set()
        prefix = self.location.path.rstrip("/") + "/"
        for listed_key, info in listing.items():
            # A zero-byte object named "folder/" is how stores keep an empty folder (an ensemble's "1/").
            is_folder = info.get("type") == "directory" or listed_key.endswith("/")
            key = listed_key.rstrip("/")
            if not key.startswith(prefix):
                continue
            relative = key[len(prefix) :]
            if not _safe_relative(relative):
                logger.warning("skipping object '%s': its name would leave the repository", key)
                continue
            if is_folder:
                remote_dirs.add(relative)
            else:
                tag = next((str(info[k]) for k in ("ETag", "etag", "md5Hash", "mtime") if info.get(k)), "")
                remote_files[relative] = (key, int(info.get("size") or 0), tag)
        self.root.mkdir(parents=True, exist_ok=True)
        manifest = self._read_manifest()
        downloaded = 0
        for relative, (key, size, tag) in sorted(remote_files.items()):
            target = self.root / relative
            if manifest.get(relative) == [size, tag] and target.is_file() and target.stat().st_size == size:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".download-")
            os.close(handle)
            try:
                fs.get_file(key, temporary)
                os.replace(temporary, target)
            except Exception as exc:
                Path(temporary).unlink(missing_ok=True)
                raise ModelLoadError(f"cannot download '{self.location.uri}/{relative}': {exc}") from None
            manifest[relative] = [size, tag]
            downloaded += 1
        for relative in remote_dirs:
            (self.root / relative).mkdir(parents=True, exist_ok=True)
        removed = self._remove_stale(set(remote_files), remote_dirs)
        for relative in set(manifest) - set(remote_files):
            del manifest[relative]
        self._write_manifest(manifest)
        if downloaded or removed:
            logger.info(
                "synced %s: %d file(s) downloaded, %d removed", self.location.uri, downloaded, removed
            )
        return downloaded, removed

    def _remove_stale(self, files: set[str], dirs: set[str]) -> int:
        removed = 0
        keep_dirs = set(dirs)
        for relative in files:
            parts = Path(relative).parts
            keep_dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
        for path in sorted(self.root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            relative = path.relative_to(self.root).as_posix()
            if relative == _MANIFEST:
                continue
            if path.is_dir() and not path.is_symlink():
                if relative not in keep_dirs:
                    shutil.rmtree(path, ignore_errors=True)
            elif relative not in files:
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def _read_manifest(self) -> dict[str, list[Any]]:
        try:
            value = json.loads((self.root / _MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def _write_manifest(self, manifest: dict[str, list[Any]]) -> None:
        temporary = self.root / f"{_MANIFEST}.tmp"
        temporary.write_text(json.dumps(manifest, sort_keys=True), encoding="utf-8")
        os.replace(temporary, self.root / _MANIFEST)


def _safe_relative(relative: str) -> bool:
    parts = relative.split("/")
    return bool(relative) and not relative.startswith("/") and all(p not in ("", ".", "..") for p in parts)
