"""The shared memory between the server and a Python model's process (arenas, rings, spills) is
reachable by those two only: it has no name another process (or a client registering a "system
shared memory region") could open, and no other child of the server inherits it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from trt.server.backends.python.instance import PythonModelInstance
from trt.server.core.backends.base import BackendRequest

ECHO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        tensors = [pb_utils.Tensor("Y", request.inputs()[0].as_numpy()) for request in requests]
        return [pb_utils.InferenceResponse([tensor]) for tensor in tensors]
"""


def _instance(folder: Path) -> PythonModelInstance:
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(ECHO)
    args = {
        "model_config": json.dumps({"name": folder.name}),
        "model_instance_kind": "CPU",
        "model_instance_name": f"{folder.name}_0",
        "model_instance_device_id": "0",
        "model_repository": str(folder),
        "model_version": "1",
        "model_name": folder.name,
    }
    return PythonModelInstance(sys.executable, folder / "1" / "model.py", args, None)


def _open_files(pid: int) -> list[str]:
    """What the file descriptors of process ``pid`` point at."""
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            pass
    return links


def test_segments_have_no_name_and_only_their_own_model_process_holds_them(tmp_path: Path) -> None:
    first, second = _instance(tmp_path / "a"), _instance(tmp_path / "b")

    async def scenario() -> np.ndarray:
        try:
            request = BackendRequest("", {"X": np.arange(5, dtype=np.int32)}, ("Y",), {})
            [answer] = await first.execute_requests([request])
            return answer.outputs["Y"]
        finally:
            first_files, second_files = _open_files(first.pid), _open_files(second.pid)
            await first.aclose()
            await second.aclose()
            check(first_files, second_files)

    def check(first_files: list[str], second_files: list[str]) -> None:
        for tag in (first._tag, second._tag):
            assert [name for name in os.listdir("/dev/shm") if name.startswith(tag)] == []
            # Opening it by the name the old code gave it, as another server would: nothing there.
            opened = subprocess.run(
                [sys.executable, "-c", f"open('/dev/shm/{tag}_ctl', 'rb')"], capture_output=True, text=True
            )
            assert "FileNotFoundError" in opened.stderr
        mine = {link.split(" ")[0] for link in first_files if link.startswith(f"/memfd:{first._tag}")}
        assert mine == {
            f"/memfd:{first._tag}_{suffix}" for suffix in ("ctl", "in", "out", "spill_s", "spill_m")
        }
        assert not any(first._tag in link for link in second_files)  # the other model's process
        assert not any(second._tag in link for link in first_files)

    echoed = asyncio.run(scenario())
    assert list(echoed) == [0, 1, 2, 3, 4]
