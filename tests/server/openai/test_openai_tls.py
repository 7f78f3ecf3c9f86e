"""With --http-use-ssl the OpenAI-compatible port serves HTTPS too, under the HTTP port's certificates:
the ``openai`` client reaches it over TLS trusting only our CA, and plain HTTP there gets nothing."""

from __future__ import annotations

import http.client
import ssl
from pathlib import Path

import openai
import pytest

from tests.certificates import issue_certificates
from tests.support import ServerProcess, free_port, wait_until, write_simple


def test_the_openai_port_serves_https_under_the_http_ports_certificates(tmp_path: Path) -> None:
    certificates = issue_certificates(tmp_path)
    write_simple(tmp_path / "repo")
    port = free_port()
    flags = [
        "--allow-openai=true", "--openai-address=127.0.0.1", f"--openai-port={port}",
        "--http-use-ssl=true", f"--http-server-cert={certificates['server_cert']}",
        f"--http-server-key={certificates['server_key']}",
    ]  # fmt: skip
    server = ServerProcess([tmp_path / "repo"], flags).start(tmp_path, wait=False)
    try:
        with openai.DefaultHttpx2Client(
            verify=ssl.create_default_context(cafile=certificates["ca"])
        ) as transport:
            client = openai.OpenAI(
                base_url=f"https://127.0.0.1:{port}/v1", api_key="-", http_client=transport, max_retries=0
            )

            def lists_simple() -> bool:
                try:
                    return "simple" in {model.id for model in client.models.list()}
                except openai.APIConnectionError:
                    return False  # not listening yet

            wait_until(lists_simple, timeout=60)
        # In the clear, the port answers no HTTP: the TLS handshake is all it takes.
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError, http.client.BadStatusLine)):
            plain.request("GET", "/v1/models")
            plain.getresponse()
        plain.close()
        # And a client that does not trust our CA is refused by its own check.
        with openai.DefaultHttpx2Client() as untrusting:
            stranger = openai.OpenAI(
                base_url=f"https://127.0.0.1:{port}/v1", api_key="-", http_client=untrusting, max_retries=0
            )
            with pytest.raises(openai.APIConnectionError):
                stranger.models.list()
    finally:
        server.stop()
