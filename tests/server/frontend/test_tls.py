"""HTTPS is served by the workers (each builds the TLS context from the core's settings)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.server.http.test_https import _client_context, _start, _wait_live
from tests.server.http.test_https import certificates as certificates  # the fixture, shared
from tests.support import simple_inputs


def test_tritonclient_infers_over_https_through_a_worker(
    tmp_path: Path, certificates: dict[str, str]
) -> None:
    server = _start(
        tmp_path,
        [
            "--frontend-workers=1",
            "--http-use-ssl=true",
            f"--http-server-cert={certificates['server_cert']}",
            f"--http-server-key={certificates['server_key']}",
        ],
    )
    try:
        _wait_live(server, _client_context(certificates, False))
        client = httpclient.InferenceServerClient(
            server.http_url, ssl=True, ssl_options={"ca_certs": certificates["ca"]}
        )
        data = np.arange(16, dtype=np.int32).reshape(1, 16)
        result = client.infer("simple", simple_inputs(httpclient, data))
        assert (result.as_numpy("OUTPUT0") == data * 2).all()
        assert f"Started HTTPService at 127.0.0.1:{server.http_port} (1 workers) (HTTPS)" in server.log()
    finally:
        assert server.stop() == 0
