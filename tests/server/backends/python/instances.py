"""A Python model's instance run on its own, without a server: the model.py written into a version
folder, and the arguments the loader would give its process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trt.server.backends.python.instance import PythonModelInstance


def model_instance(tmp_path: Path, source: str) -> PythonModelInstance:
    """Model "m", version 1, instance "m_0" on the CPU, running ``source`` in a process of its own."""
    (tmp_path / "1").mkdir(exist_ok=True)
    (tmp_path / "1" / "model.py").write_text(source)
    args = {
        "model_config": json.dumps({"name": "m"}),
        "model_instance_kind": "CPU",
        "model_instance_name": "m_0",
        "model_instance_device_id": "0",
        "model_repository": str(tmp_path),
        "model_version": "1",
        "model_name": "m",
    }
    return PythonModelInstance(sys.executable, tmp_path / "1" / "model.py", args, None)
