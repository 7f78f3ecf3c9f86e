"""HTTPS on the HTTP endpoint (--http-use-ssl, flags of our own: Triton has none), with tritonclient's
``ssl=True`` and certificates made here: a CA, the server's certificate for 127.0.0.1, a client's."""

from __future__ import annotations

import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import gevent.ssl
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.certificates import issue_certificates
from tests.support import ServerProcess, int_inputs, simple_inputs, write_simple
from trt.server.tls import TlsOptions, TlsSetupError, server_context


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return issue_certificates(tmp_path_factory.mktemp("certs"))


def _start(tmp_path: Path, flags: list[str]) -> ServerProcess:
    repo = tmp_path / "repo"
    write_simple(repo)
    server = ServerProcess([repo], flags).start(tmp_path, wait=False)
    return server


def _wait_live(server: ServerProcess, context: ssl.SSLContext) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert server.process is not None and server.process.poll() is None, server.log()
        try:
            with urllib.request.urlopen(
                f"https://{server.http_url}/v2/health/live", context=context, timeout=2
            ):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"no HTTPS answer:\n{server.log()}")


def _client_context(certificates: dict[str, str], with_client_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=certificates["ca"])
    if with_client_cert:
        context.load_cert_chain(certificates["client_cert"], certificates["client_key"])
    return context


@pytest.fixture
def https_server(tmp_path: Path, certificates: dict[str, str]) -> Iterator[ServerProcess]:
    server = _start(
        tmp_path,
        [
            "--http-use-ssl=true",
            f"--http-server-cert={certificates['server_cert']}",
            f"--http-server-key={certificates['server_key']}",
        ],
    )
    try:
        _wait_live(server, _client_context(certificates, False))
        yield server
    finally:
        server.stop()


def test_tritonclient_infers_over_https(https_server: ServerProcess, certificates: dict[str, str]) -> None:
    client = httpclient.InferenceServerClient(
        https_server.http_url, ssl=True, ssl_options={"ca_certs": certificates["ca"]}
    )
    first, _ = int_inputs()
    result = client.infer("simple", simple_inputs(httpclient, first))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + first)
    assert client.is_model_ready("simple")
    # Plain HTTP on the same port is not served; the certificate is checked by the client.
    with pytest.raises(Exception):  # noqa: B017 (http.client raises one of several errors here)
        urllib.request.urlopen(f"http://{https_server.http_url}/v2/health/live", timeout=5)
    untrusting = ssl.create_default_context()  # the system's CAs: ours is not among them
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(
            f"https://{https_server.http_url}/v2/health/live", context=untrusting, timeout=5
        )
    assert "(HTTPS)" in https_server.log()


def test_mutual_tls_needs_a_client_certificate(tmp_path: Path, certificates: dict[str, str]) -> None:
    server = _start(
        tmp_path,
        [
            "--http-use-ssl=true",
            "--http-use-ssl-mutual=true",
            f"--http-server-cert={certificates['server_cert']}",
            f"--http-server-key={certificates['server_key']}",
            f"--http-root-cert={certificates['ca']}",
        ],
    )
    try:
        _wait_live(server, _client_context(certificates, True))
        client = httpclient.InferenceServerClient(
            server.http_url,
            ssl=True,
            ssl_options={"keyfile": certificates["client_key"], "certfile": certificates["client_cert"]},
            ssl_context_factory=lambda *args, **kwargs: _gevent_context(certificates),
        )
        first, _ = int_inputs()
        np.testing.assert_array_equal(
            client.infer("simple", simple_inputs(httpclient, first)).as_numpy("OUTPUT1"), first - first
        )
        anonymous = _client_context(certificates, with_client_cert=False)
        with pytest.raises(OSError):  # the handshake, or the first read after it, is refused
            urllib.request.urlopen(f"https://{server.http_url}/v2/health/live", context=anonymous, timeout=5)
    finally:
        server.stop()


def test_an_idle_https_client_does_not_hold_up_the_shutdown(
    tmp_path: Path, certificates: dict[str, str]
) -> None:
    """A TLS connection is closed with close_notify, which an idle keep-alive client never reads to
    answer: the server stopped only at --exit-timeout-secs. It stops once no request is in progress."""
    server = _start(
        tmp_path,
        [
            "--http-use-ssl=true",
            f"--http-server-cert={certificates['server_cert']}",
            f"--http-server-key={certificates['server_key']}",
            "--exit-timeout-secs=30",
        ],
    )
    try:
        _wait_live(server, _client_context(certificates, True))
        client = httpclient.InferenceServerClient(
            server.http_url, ssl=True, ssl_options={"ca_certs": certificates["ca"]}
        )
        first, _ = int_inputs()
        client.infer("simple", simple_inputs(httpclient, first))  # its connection stays open, idle
        started = time.monotonic()
        assert server.stop(timeout=60) == 0, server.log()
        assert time.monotonic() - started < 15, "the server waited for the idle client"
    finally:
        server.stop()


def _gevent_context(certificates: dict[str, str]) -> gevent.ssl.SSLContext:
    context = gevent.ssl.create_default_context(cafile=certificates["ca"])
    context.load_cert_chain(certificates["client_cert"], certificates["client_key"])
    return context


def test_bad_tls_flags_stop_the_server_before_it_loads_anything(tmp_path: Path) -> None:
    server = _start(
        tmp_path, ["--http-use-ssl=true", "--http-server-cert=/nonexistent.pem", "--http-server-key=/x"]
    )
    assert server.process is not None and server.process.wait(60) == 2
    usage_error = " ".join(re.sub("[│╭╮╰╯─]", " ", server.log()).split())  # typer's box, unwrapped
    assert "--http-server-cert / --http-server-key: cannot use '/nonexistent.pem'" in usage_error, usage_error
    assert "loaded" not in server.log()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (TlsOptions("", ""), "--http-use-ssl=true needs --http-server-cert and --http-server-key"),
        (TlsOptions("a.pem", "a.key", mutual=True), "--http-use-ssl-mutual=true needs --http-root-cert"),
        (TlsOptions("/nonexistent.pem", "/nonexistent.key"), "No such file or directory"),
    ],
)
def test_tls_settings_that_cannot_work_say_which_flag(options: TlsOptions, message: str) -> None:
    with pytest.raises(TlsSetupError, match=re.escape(message)):
        server_context(options)


def test_a_key_that_does_not_match_its_certificate_is_refused(certificates: dict[str, str]) -> None:
    mismatched = TlsOptions(certificates["server_cert"], certificates["client_key"])
    with pytest.raises(TlsSetupError, match="cannot use"):
        server_context(mismatched)
    assert (
        server_context(TlsOptions(certificates["server_cert"], certificates["server_key"])).verify_mode
        == ssl.CERT_NONE
    )
