"""The container images: both Dockerfiles pass hadolint as configured in .hadolint.yaml, run trt as a
non-root user with a health check on readiness, and the entry point sends SageMaker's bare ``serve``
to the SageMaker contract and everything else to ``trt``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

DOCKERFILES = ["Dockerfile", "Dockerfile.gpu"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_dockerfile_passes_hadolint(hadolint: str, dockerfile: str) -> None:
    completed = subprocess.run(
        [hadolint, "--config", str(ROOT / ".hadolint.yaml"), str(ROOT / dockerfile)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_hadolint_catches_what_it_is_configured_for(hadolint: str, tmp_path: Path) -> None:
    """The lint is live: a root image with an unpinned pip install fails under the same config."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.11-slim\nRUN pip install requests\nCMD python\n")
    completed = subprocess.run(
        [hadolint, "--config", str(ROOT / ".hadolint.yaml"), str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode != 0 and "DL3013" in completed.stdout


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_image_runs_trt_serve_as_non_root_with_a_readiness_health_check(dockerfile: str) -> None:
    text = (ROOT / dockerfile).read_text()
    final_stage = text[text.rindex("\nFROM ") :]
    user = next(line.split()[1] for line in final_stage.splitlines() if line.startswith("USER "))
    assert user.split(":")[0] not in ("0", "root")
    assert "HEALTHCHECK" in final_stage and "/v2/health/ready" in final_stage
    assert 'ENTRYPOINT ["trt-entrypoint"]' in final_stage
    assert 'CMD ["serve", "--model-repository=/models"]' in final_stage
    assert "EXPOSE 8000 8001 8002 8080" in final_stage


def test_gpu_image_installs_onnxruntime_gpu_instead_of_onnxruntime() -> None:
    text = (ROOT / "Dockerfile.gpu").read_text()
    assert "pip uninstall -y onnxruntime" in text and "onnxruntime-gpu==" in text
    assert "FROM nvidia/cuda:" in text and "gpu,tensorrt" in text


def test_docker_context_holds_only_what_the_images_copy() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert lines[lines.index("*") :][:1] == ["*"]
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "trt", "deploy/docker", "deploy/sagemaker"}


@pytest.mark.parametrize(
    "arguments, expected",
    [
        (["serve"], "sagemaker-serve"),
        (["serve", "--model-repository=/models"], "trt serve --model-repository=/models"),
        (["repo", "list", "/models"], "trt repo list /models"),
    ],
)
def test_entrypoint_routes_sagemaker_and_trt_commands(
    tmp_path: Path, arguments: list[str], expected: str
) -> None:
    for name in ("trt", "sagemaker-serve"):  # stand-ins that say how they were called
        script = tmp_path / name
        script.write_text(f'#!/bin/sh\necho "{name} $*"\n')
        script.chmod(0o755)
    completed = subprocess.run(
        ["sh", str(ROOT / "deploy" / "docker" / "entrypoint.sh"), *arguments],
        env={**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == expected
