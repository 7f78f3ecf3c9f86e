"""gRPC over TLS with Triton's flags, driven by tritonclient.grpc's ``ssl=True`` options: server TLS
(``--grpc-use-ssl``), mutual TLS (``--grpc-use-ssl-mutual`` with ``--grpc-root-cert``), and the
failures a client or an operator must see. The certificates are made here, for this run only."""

from __future__ import annotations

import datetime
import ipaddress
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, simple_inputs, write_simple


def _issue(
    folder: Path, name: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None, server: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    certificate = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    (folder / f"{name}.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / f"{name}.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return certificate, key


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("certificates")
    authority = _issue(folder, "ca", None, server=False)
    _issue(folder, "server", authority, server=True)
    _issue(folder, "client", authority, server=False)
    _issue(folder, "stranger", _issue(folder, "other_ca", None, server=False), server=False)
    return folder


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tls_repo")
    write_simple(folder)
    return folder


def _server(repo: Path, logs: Path, *flags: str) -> ServerProcess:
    return ServerProcess([repo], list(flags)).start(logs)


@pytest.fixture(scope="module")
def tls_server(
    repo: Path, certificates: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    server = _server(
        repo,
        tmp_path_factory.mktemp("logs"),
        "--grpc-use-ssl=true",
        f"--grpc-server-cert={certificates / 'server.crt'}",
        f"--grpc-server-key={certificates / 'server.key'}",
    )
    yield server
    # Clients whose handshake failed left nothing behind for the stop to wait on (it waited for
    # --exit-timeout-secs when they were counted as connections).
    began = time.monotonic()
    assert server.stop() == 0
    assert time.monotonic() - began < 3


@pytest.fixture(scope="module")
def mutual_server(
    repo: Path, certificates: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    server = _server(
        repo,
        tmp_path_factory.mktemp("logs"),
        "--grpc-use-ssl-mutual=true",
        f"--grpc-server-cert={certificates / 'server.crt'}",
        f"--grpc-server-key={certificates / 'server.key'}",
        f"--grpc-root-cert={certificates / 'ca.crt'}",
    )
    yield server
    server.stop()


def _infer_works(client: grpcclient.InferenceServerClient) -> None:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    result = client.infer("simple", simple_inputs(grpcclient, data))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + data)


def test_tls_serves_tritonclient_with_ssl(tls_server: ServerProcess, certificates: Path) -> None:
    client = grpcclient.InferenceServerClient(
        tls_server.grpc_url, ssl=True, root_certificates=str(certificates / "ca.crt")
    )
    assert client.is_server_live()
    _infer_works(client)
    client.close()


def test_tls_refuses_a_plaintext_client_and_a_client_that_trusts_another_ca(
    tls_server: ServerProcess, certificates: Path
) -> None:
    for client in (
        grpcclient.InferenceServerClient(tls_server.grpc_url),
        grpcclient.InferenceServerClient(
            tls_server.grpc_url, ssl=True, root_certificates=str(certificates / "other_ca.crt")
        ),
    ):
        with pytest.raises(InferenceServerException, match="UNAVAILABLE"):
            client.is_server_live(client_timeout=5)
        client.close()
    assert tls_server.alive()


def test_mutual_tls_serves_a_client_with_a_certificate_from_the_root(
    mutual_server: ServerProcess, certificates: Path
) -> None:
    client = grpcclient.InferenceServerClient(
        mutual_server.grpc_url,
        ssl=True,
        root_certificates=str(certificates / "ca.crt"),
        private_key=str(certificates / "client.key"),
        certificate_chain=str(certificates / "client.crt"),
    )
    _infer_works(client)
    client.close()


@pytest.mark.parametrize("identity", [None, "stranger"])
def test_mutual_tls_refuses_a_client_without_a_certificate_from_the_root(
    mutual_server: ServerProcess, certificates: Path, identity: str | None
) -> None:
    keys = {}
    if identity is not None:
        keys = {
            "private_key": str(certificates / f"{identity}.key"),
            "certificate_chain": str(certificates / f"{identity}.crt"),
        }
    client = grpcclient.InferenceServerClient(
        mutual_server.grpc_url, ssl=True, root_certificates=str(certificates / "ca.crt"), **keys
    )
    with pytest.raises(InferenceServerException, match="UNAVAILABLE"):
        client.is_server_live(client_timeout=5)
    client.close()
    assert mutual_server.alive()


def test_tls_files_that_cannot_be_read_stop_the_start_with_their_flag(
    repo: Path, certificates: Path, tmp_path: Path
) -> None:
    server = ServerProcess(
        [repo],
        ["--grpc-use-ssl=true", f"--grpc-server-cert={tmp_path / 'missing.crt'}",
         f"--grpc-server-key={certificates / 'server.key'}"],
    )  # fmt: skip
    server.start(tmp_path, wait=False)
    assert server.process is not None
    assert server.process.wait(60) == 1
    assert "--grpc-server-cert / --grpc-server-key: cannot use" in server.log()
