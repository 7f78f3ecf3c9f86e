"""The TensorFlow backend's config parameters (Triton's names), read and checked without TensorFlow.

TF_NUM_INTRA_THREADS / TF_NUM_INTER_THREADS (0: TensorFlow decides; intra defaults here to the
instance's share of the cores, as the other backends do), TF_USE_PER_SESSION_THREADS, TF_GRAPH_TAG
(default ``serve``), TF_SIGNATURE_DEF (default ``serving_default``, else the first signature with a
warning, as Triton does), MAX_SESSION_SHARE_COUNT (default 1: a session per instance) and
TF_INIT_OPS_FILE. TensorFlow's thread pools are per process unless TF_USE_PER_SESSION_THREADS is on:
then the first session's thread counts hold for every model, as in Triton.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from trt.protos import model_config_pb2
from trt.server.backends.model_signature import parameter, yes
from trt.server.core import devices
from trt.server.core.backends.base import ModelFiles
from trt.server.core.errors import ModelConfigError

_INIT_OPS_LIMIT = 1 << 20  # bytes: a list of operation names, not data


@dataclass(frozen=True)
class TensorFlowSettings:
    intra_threads: int = 0
    inter_threads: int = 0
    per_session_threads: bool = False
    graph_tag: str = "serve"
    signature_def: str = ""  # "" takes serving_default, else the first signature
    session_share_count: int = 1
    init_ops_file: str = ""


def _count(config: model_config_pb2.ModelConfig, key: str, default: int, minimum: int = 0) -> int:
    value = parameter(config, key).strip()
    if not value:
        return default
    if not (value.isascii() and value.isdigit()) or len(value) > 6 or int(value) < minimum:
        raise ModelConfigError(
            f"parameter {key} must be a whole number of at least {minimum}, got '{value}'",
            f"parameters[{key}]",
        )
    return int(value)


def read_settings(config: model_config_pb2.ModelConfig, files: ModelFiles) -> TensorFlowSettings:
    """Every TensorFlow parameter of ``config``, checked; raises ModelConfigError naming the parameter."""
    instances = sum(max(group.count, 1) for group in config.instance_group) or 1
    share = devices.cpu_count() // instances
    init_file = parameter(config, "TF_INIT_OPS_FILE").strip()
    if init_file:
        files.inside(init_file, "parameters[TF_INIT_OPS_FILE]")  # refuses a name that leaves the folder
    return TensorFlowSettings(
        intra_threads=_count(config, "TF_NUM_INTRA_THREADS", max(share, 1)),
        inter_threads=_count(config, "TF_NUM_INTER_THREADS", 0),
        per_session_threads=yes(
            parameter(config, "TF_USE_PER_SESSION_THREADS"), "TF_USE_PER_SESSION_THREADS"
        ),
        graph_tag=parameter(config, "TF_GRAPH_TAG").strip() or "serve",
        signature_def=parameter(config, "TF_SIGNATURE_DEF").strip(),
        session_share_count=_count(config, "MAX_SESSION_SHARE_COUNT", 1, minimum=1),
        init_ops_file=init_file,
    )


def init_ops(settings: TensorFlowSettings, files: ModelFiles) -> list[str]:
    """The operations TF_INIT_OPS_FILE names: from the version folder, else the model folder (the
    version folder's wins where both have it, as in Triton)."""
    if not settings.init_ops_file:
        return []
    candidates = [files.inside(settings.init_ops_file, "parameters[TF_INIT_OPS_FILE]")]
    candidates.append(files.model_dir / candidates[0].relative_to(files.version_dir))
    path = next((p for p in candidates if p.is_file()), None)
    where = "parameters[TF_INIT_OPS_FILE]"
    if path is None:
        raise ModelConfigError(
            f"TF_INIT_OPS_FILE '{settings.init_ops_file}' is in neither {files.version_dir} "
            f"nor {files.model_dir}",
            where,
        )
    if path.stat().st_size > _INIT_OPS_LIMIT:
        raise ModelConfigError(f"{path} is over {_INIT_OPS_LIMIT} bytes; it lists operation names", where)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelConfigError(f"{path} is not readable JSON: {exc}", where) from None
    operations = document.get("init_ops") if isinstance(document, dict) else None
    if not isinstance(operations, list) or not all(isinstance(op, str) for op in operations):
        raise ModelConfigError(f'{path} must hold {{"init_ops": ["operation", ...]}}', where)
    return operations
