"""A worker's settings cross to it as JSON: every setting arrives as the core wrote it, and bytes
that are not those settings (a pickle among them) are refused without being run."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from trt.server.frontend.config import WorkerConfig, config_from_json, config_to_json
from trt.server.frontend.forward import MethodEntry
from trt.server.grpc.h2.settings import H2Settings, KeepaliveOptions
from trt.server.grpc.options import GrpcOptions
from trt.server.http.limits import HttpLimits
from trt.server.restrictions import Restrictions
from trt.server.tls import TlsOptions

SERVICE = "/inference.GRPCInferenceService"


def _config() -> WorkerConfig:
    """Settings none of which is its default, so that one lost or mangled on the way shows."""
    restrictions = Restrictions.parse(
        ["model-repository,shared-memory:admin-key=s3cret", "statistics:x-stats=on"],
        "--grpc-restricted-protocol",
    )
    return WorkerConfig(
        index=3,
        channel_fd=7,
        http_fd=8,
        grpc_fd=9,
        http_limits=HttpLimits(max_body_size=1 << 20, max_header_size=4096, max_header_count=12),
        http_tls=TlsOptions("/certs/server.pem", "/certs/server.key", "/certs/ca.pem", mutual=True),
        queued_bytes=123_456,
        grpc_options=GrpcOptions(
            tls=TlsOptions("/certs/grpc.pem", "/certs/grpc.key"),
            keepalive=KeepaliveOptions(
                time_ms=1000, timeout_ms=500, permit_without_calls=True, max_ping_strikes=0
            ),
            http2=H2Settings(max_concurrent_streams=7, preface_timeout_s=2.5, resets_per_second=12.5),
            restrictions=restrictions,
            infer_compression_level="high",
            reuse_port=True,
            max_message_size=1 << 22,
            max_receiving_bytes=1 << 21,
            max_response_pool_size=5,
            max_unsent_bytes=1 << 16,
        ),
        grpc_methods=[
            MethodEntry(f"{SERVICE}/ModelInfer", "ModelInfer", "inference", True, False),
            MethodEntry(f"{SERVICE}/ServerLive", "ServerLive", None, False, False),
            MethodEntry(f"{SERVICE}/ModelStreamInfer", "ModelStreamInfer", "inference", True, True),
        ],
        log_level=10,
        infer_layouts=False,
    )


def test_every_setting_arrives_as_written() -> None:
    config = _config()
    arrived = config_from_json(config_to_json(config))
    # Restrictions compare by what they restrict (the class has no equality of its own).
    assert arrived.grpc_options.restrictions.by_category == config.grpc_options.restrictions.by_category
    same = Restrictions()
    assert dataclasses.replace(
        arrived, grpc_options=dataclasses.replace(arrived.grpc_options, restrictions=same)
    ) == dataclasses.replace(config, grpc_options=dataclasses.replace(config.grpc_options, restrictions=same))
    assert arrived.http_tls is not None and arrived.http_tls.mutual
    assert arrived.grpc_options.http2.preface_timeout_s == 2.5


def test_no_settings_travel_as_the_defaults() -> None:
    config = dataclasses.replace(_config(), http_tls=None, grpc_options=GrpcOptions())
    arrived = config_from_json(config_to_json(config))
    assert arrived.http_tls is None and arrived.grpc_options.tls is None
    assert not arrived.grpc_options.restrictions


def test_the_settings_are_json_text() -> None:
    text = config_to_json(_config()).decode("ascii")
    assert text.startswith('{"index":3,')
    assert '"restrictions":{"model-repository":["admin-key","s3cret"]' in text


def test_a_pickle_is_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Planted:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (marker.touch, ())  # type: ignore[return-value]

    with pytest.raises(ValueError):
        config_from_json(pickle.dumps(Planted()))
    assert not marker.exists()


@pytest.mark.parametrize(
    "text",
    [
        b'{"index":3}',  # settings missing
        config_to_json(_config()).replace(b'"index":3', b'"index":3,"planted":1'),  # one no setting has
        config_to_json(_config()).replace(b'"time_ms":1000', b'"time_ms":1000,"planted":1'),
        b"[]",
    ],
)
def test_settings_that_are_not_a_workers_are_refused(text: bytes) -> None:
    with pytest.raises((KeyError, TypeError, AttributeError)):
        config_from_json(text)
