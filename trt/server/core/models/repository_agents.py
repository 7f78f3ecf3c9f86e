"""Triton's model repository agents (``model_repository_agents`` in a config), run before a model loads.

Triton loads each agent a config names from a shared library and fails the load when it has none of
that name. Its containers ship one, ``checksum``, which trt runs here: each parameter's key is
``<algorithm>:<path relative to the model folder>`` and its value the file's expected digest, MD5 the
only algorithm, compared as the hex text Triton's agent writes (lower case). Keys, checks and error
texts follow ``checksum_repository_agent/src/checksum.cc``; a load that fails one is refused with its
text, the model staying UNAVAILABLE. Any other agent name fails the load, as on a Triton without that
agent's library. The paths were checked to stay inside the model folder when the config was read
(``config_paths``); files are read in pieces, so a large model file is never held whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from trt.protos import model_config_pb2
from trt.server.core.errors import InvalidArgument, ModelLoadError, Unsupported
from trt.server.core.paths import contained, shown

CHECKSUM_AGENT = "checksum"
_CHUNK = 1 << 20


def checksum_files(agent: model_config_pb2.ModelRepositoryAgents.Agent) -> Iterator[tuple[str, str]]:
    """(parameter key, the file it names) of each checksum parameter whose key parses."""
    for key in sorted(agent.parameters):
        _algorithm, colon, path = key.partition(":")
        if colon:
            yield key, path


def run_load_agents(config: model_config_pb2.ModelConfig, model_dir: Path) -> None:
    """Run the agents ``config`` names on the model in ``model_dir``, in their order; raise the first
    refusal."""
    for agent in config.model_repository_agents.agents:
        if agent.name != CHECKSUM_AGENT:
            name = shown(agent.name)  # Triton's words, then why: no agent comes as a library here
            raise ModelLoadError(
                f"unable to find 'libtritonrepoagent_{name}.so' for repo agent '{name}': trt has only "
                f"Triton's '{CHECKSUM_AGENT}' agent, built in"
            )
        for key in sorted(agent.parameters):  # a protobuf map has no order of its own
            _check(model_dir, key, agent.parameters[key])


def _check(model_dir: Path, key: str, expected: str) -> None:
    algorithm, colon, relative = key.partition(":")
    if not colon:
        raise InvalidArgument(f"failed to parse key: {shown(key)}")
    if algorithm.lower() != "md5":
        raise Unsupported(f"Unsupported checksum algorithm: {shown(algorithm)}")
    path = contained(model_dir, relative)
    if path is None:  # config_paths refused it already; kept so that no caller can skip that
        raise InvalidArgument(f"checksum file '{shown(relative)}' leads outside the model folder")
    got = _md5(path, relative)
    if got != expected:
        raise InvalidArgument(
            f"Mismatched MD5 hash for file {shown(relative)}, expect: {shown(expected)}, got: {got}"
        )


def _md5(path: Path, relative: str) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    try:
        with path.open("rb") as file:
            while chunk := file.read(_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise InvalidArgument(
            f"failed to open text file for read {shown(relative)}: {exc.strerror or exc}"
        ) from None
    return digest.hexdigest()
