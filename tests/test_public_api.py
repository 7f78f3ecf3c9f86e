"""The public faces of the package, pinned: a name added to or dropped from one is a decision, made
here on purpose, not by accident elsewhere."""

from __future__ import annotations

import importlib

import pytest

FACES = {
    "trt": ["DISTRIBUTION", "__version__"],
    "trt.server.core": [
        "AlreadyExists",
        "BackendUnavailable",
        "CoreOptions",
        "DecoupledModelNeedsStream",
        "InferenceRequest",
        "InferenceResponse",
        "InferenceServer",
        "InputTensor",
        "InvalidArgument",
        "InvalidInput",
        "ModelConfigError",
        "ModelControlMode",
        "ModelLoadError",
        "ModelMetadata",
        "ModelNotFound",
        "ModelNotReady",
        "NotFound",
        "OutputTensor",
        "RepositoryIndexEntry",
        "RequestedOutput",
        "ServerError",
        "ServerMetadata",
        "StartupError",
        "StreamItem",
        "TensorMetadata",
        "Unavailable",
        "Unsupported",
    ],
    "trt.server.core.backends": [
        "SEQUENCE_END",
        "SEQUENCE_START",
        "Backend",
        "BackendEntry",
        "BackendRequest",
        "BackendResponse",
        "InstanceSpec",
        "ModelFiles",
        "ModelFormat",
        "ModelInstance",
        "RequestLevelInstance",
        "ServerServices",
    ],
    "trt.server.grpc": ["GrpcBindError", "GrpcInferenceService", "HealthService", "start_grpc_server"],
    "trt.server.backends.python": ["PythonBackend"],
}


@pytest.mark.parametrize("face", sorted(FACES))
def test_each_face_exports_exactly_its_pinned_names(face: str) -> None:
    module = importlib.import_module(face)
    assert sorted(module.__all__) == sorted(FACES[face])
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []
