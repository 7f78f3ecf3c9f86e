"""Where candidates are served: a ``trt serve`` process on a scratch copy of the model, or a server the
user already runs (``--url``). Either way a candidate is deployed through the repository extension's
``load`` with a config override, the same call any Triton client can make."""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from trt.analyzer.errors import AnalyzeError
from trt.analyzer.precision import copy_model_file
from trt.parent_death import ending_with_parent

SCRATCH_PREFIX = "trt-analyze-"  # a scratch repository in the temporary folder, its log beside it
_SCRATCH_SETTLE_S = 60.0  # a scratch log younger than this is never taken as abandoned
_STARTUP_S = 120.0
_UNLOAD_S = 60.0  # how long an unloaded model may take to release its instances before we go on


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Deployment:
    """A Triton-protocol server reachable over HTTP, on which candidate configs are loaded one at a time."""

    def __init__(self, http_url: str, grpc_url: str, process: subprocess.Popen[bytes] | None = None) -> None:
        self.http_url = http_url
        self.grpc_url = grpc_url
        self.process = process

    # -- the repository extension ------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any], timeout: float = 300.0) -> Any:
        """POST ``body`` as JSON; the answer's JSON (None when it has no body)."""
        request = urllib.request.Request(
            f"http://{self.http_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                answer = response.read()
                return json.loads(answer) if answer else None
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            with contextlib.suppress(ValueError):
                detail = json.loads(detail).get("error", detail)
            raise AnalyzeError(f"{path}: {detail}") from None
        except OSError as exc:
            raise AnalyzeError(f"server at {self.http_url} unreachable ({exc})") from None

    def get_json(self, path: str) -> Any:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}{path}", timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise AnalyzeError(f"{path}: {exc.read().decode(errors='replace')}") from None
        except OSError as exc:
            raise AnalyzeError(f"server at {self.http_url} unreachable ({exc})") from None

    def load(self, model: str, config: dict[str, Any] | None = None) -> None:
        body: dict[str, Any] = {"parameters": {"config": json.dumps(config)}} if config else {}
        self._post(f"/v2/repository/models/{model}/load", body)

    def unload(self, model: str) -> None:
        """Unload ``model`` and wait (up to a minute) until its instances are released: the unload call
        returns before that, as Triton's does, and a candidate measured meanwhile would share the CPU
        and memory with them."""
        with contextlib.suppress(AnalyzeError):
            self._post(f"/v2/repository/models/{model}/unload", {})
        deadline = time.monotonic() + _UNLOAD_S
        while self._unloading(model) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _unloading(self, model: str) -> bool:
        try:
            rows = self._post("/v2/repository/index", {})
        except AnalyzeError:
            return False
        return any(row.get("name") == model and row.get("state") == "UNLOADING" for row in rows or [])

    def model_config(self, model: str) -> dict[str, Any]:
        config: dict[str, Any] = self.get_json(f"/v2/models/{model}/config")
        return config

    # -- the process -------------------------------------------------------------------------------

    def memory_bytes(self) -> int | None:
        """Resident memory of the server and its children (Python-backend stubs); None for --url."""
        if self.process is None:
            return None
        try:
            root = psutil.Process(self.process.pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return None
        total = 0
        for process in processes:
            with contextlib.suppress(psutil.Error):
                total += process.memory_info().rss
        return total

    def gpu_memory_bytes(self) -> int | None:
        """GPU memory the server's processes hold, through NVML; None without a GPU or for --url.
        Unverified here: the machines this was written on have no GPU."""
        if self.process is None:
            return None
        try:
            import pynvml
        except ImportError:
            return None
        try:
            root = psutil.Process(self.process.pid)
            pids = {root.pid, *(child.pid for child in root.children(recursive=True))}
            pynvml.nvmlInit()
            total = 0
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if process.pid in pids and process.usedGpuMemory:
                        total += int(process.usedGpuMemory)
            return total
        except (pynvml.NVMLError, psutil.Error):
            return None

    def close(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def remove_abandoned_scratch(folder: Path | None = None) -> list[Path]:
    """Remove the scratch repositories, and their logs, of ``trt analyze`` runs killed outright
    (SIGKILL, the OOM killer), which nobody was left to remove; return the repositories removed.

    A run holds an exclusive ``flock`` on its log while it or its server lives (the server writes to
    the same open log), and the kernel lets it go when both have ended, however they ended: a lock
    that can be taken marks a folder nobody uses. Not process ids, which another container sharing
    the temporary folder would see differently."""
    removed = []
    for log in Path(folder or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*.log"):
        repository = log.with_suffix("")
        try:
            if time.time() - log.stat().st_mtime < _SCRATCH_SETTLE_S:
                continue  # perhaps a run that has made its log and not yet locked it
            with log.open("rb") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(repository, ignore_errors=True)
                log.unlink()
        except OSError:  # in use (the lock is held), or another user's
            continue
        removed.append(repository)
    return removed


class ScratchServer(Deployment):
    """``trt serve`` in explicit mode on a temporary repository that holds the model's variants."""

    def __init__(self) -> None:
        remove_abandoned_scratch()
        self.repository = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        http_port, grpc_port = free_port(), free_port()
        command = [
            sys.executable, "-m", "trt", "serve", f"--model-repository={self.repository}",
            "--model-control-mode=explicit", "--http-address=127.0.0.1", f"--http-port={http_port}",
            "--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}", "--allow-metrics=false",
            "--log-info=false", "--exit-on-error=false",
        ]  # fmt: skip
        self.log = (self.repository.parent / f"{self.repository.name}.log").open("wb")
        fcntl.flock(self.log, fcntl.LOCK_EX)  # in use: see remove_abandoned_scratch
        # SIGTERM when this process dies, even by SIGKILL: the server then stops its models and ends,
        # rather than serving on for good from a folder nobody will remove.
        process = subprocess.Popen(
            command, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=ending_with_parent(signal.SIGTERM)
        )
        super().__init__(f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}", process)
        try:
            self._wait_ready()
        except BaseException:  # it failed to start, or Ctrl-C or SIGTERM came: nobody else will close it
            self.close()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _STARTUP_S
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AnalyzeError(f"trt serve exited while starting:\n{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"http://{self.http_url}/v2/health/live", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise AnalyzeError(f"trt serve did not start in {_STARTUP_S:.0f} s:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def add_model(self, name: str, source_dir: Path, model_file: Path | None = None) -> Path:
        """Copy the model folder ``source_dir`` in as ``name`` (optionally with another model file)."""
        destination = self.repository / name
        if destination.exists():
            shutil.rmtree(destination)
        shutil.copytree(source_dir, destination)
        if model_file is not None:
            for version in destination.iterdir():
                if version.is_dir() and version.name.isascii() and version.name.isdigit():
                    copy_model_file(model_file, version / model_file.name)
        return destination

    def close(self) -> None:
        super().close()
        self.log.close()
        shutil.rmtree(self.repository, ignore_errors=True)
        Path(self.log.name).unlink(missing_ok=True)
