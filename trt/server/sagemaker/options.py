"""What the SageMaker front end is told: its flags (tritonserver's) and the ``SAGEMAKER_TRITON_*`` variables
Triton's SageMaker server reads from its environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

INFERENCE_TYPES = ("infer", "generate", "generate_stream")
UNSPECIFIED_DEFAULT_MODEL = "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
# Where SageMaker unpacks multi-model endpoint archives; Triton accepts load URLs under it only.
SAGEMAKER_MODELS_ROOT = Path("/opt/ml/models")


@dataclass(frozen=True, slots=True)
class SageMakerOptions:
    address: str = "0.0.0.0"
    port: int = 8080  # --sagemaker-port
    safe_port_range: tuple[int, int] | None = None  # --sagemaker-safe-port-range=LOW-HIGH
    ping_mode: str = "ready"  # SAGEMAKER_TRITON_PING_MODE: "live" answers /ping with liveness
    default_model: str = UNSPECIFIED_DEFAULT_MODEL  # SAGEMAKER_TRITON_DEFAULT_MODEL_NAME
    inference_type: str = "infer"  # SAGEMAKER_TRITON_INFERENCE_TYPE: what /invocations runs
    # TRT_SAGEMAKER_MODELS_ROOT (trt's own, for tests and unusual layouts): the root of load URLs.
    models_root: Path = SAGEMAKER_MODELS_ROOT

    @classmethod
    def from_environment(
        cls,
        environ: Mapping[str, str],
        address: str = "0.0.0.0",
        port: int = 8080,
        safe_port_range: tuple[int, int] | None = None,
    ) -> SageMakerOptions:
        return cls(
            address=address,
            port=port,
            safe_port_range=safe_port_range,
            ping_mode=environ.get("SAGEMAKER_TRITON_PING_MODE", "ready"),
            default_model=environ.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", UNSPECIFIED_DEFAULT_MODEL),
            inference_type=environ.get("SAGEMAKER_TRITON_INFERENCE_TYPE", "infer"),
            models_root=Path(environ.get("TRT_SAGEMAKER_MODELS_ROOT", str(SAGEMAKER_MODELS_ROOT))),
        )


def parse_port_range(text: str) -> tuple[int, int]:
    """``--sagemaker-safe-port-range=LOW-HIGH`` (tritonserver's form)."""
    low, separator, high = text.partition("-")
    try:
        if not separator:
            raise ValueError
        bounds = int(low), int(high)
    except ValueError:
        raise ValueError(f"--sagemaker-safe-port-range takes <integer>-<integer>, got '{text}'") from None
    return bounds
