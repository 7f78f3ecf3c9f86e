"""Certificates made for one test run: a CA, a server certificate for 127.0.0.1 and localhost that
it signed, and a client certificate for mutual TLS (EC P-256, valid for a day)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    usage: x509.ObjectIdentifier | None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer[0].subject if issuer else _name(subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if issuer is None:  # the CA
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)  # type: ignore[list-item]
        if usage == ExtendedKeyUsageOID.SERVER_AUTH:
            names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def _write(
    folder: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> tuple[str, str]:
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(cert_path), str(key_path)


def issue_certificates(folder: Path) -> dict[str, str]:
    """Paths by role: ``ca``, ``server_cert``, ``server_key``, ``client_cert``, ``client_key``."""
    ca_key = _key()
    ca = _certificate("trt test CA", ca_key, None, None)
    server_key, client_key = _key(), _key()
    server = _certificate("127.0.0.1", server_key, (ca, ca_key), ExtendedKeyUsageOID.SERVER_AUTH)
    client = _certificate("a client", client_key, (ca, ca_key), ExtendedKeyUsageOID.CLIENT_AUTH)
    paths = {}
    paths["ca"], _ = _write(folder, "ca", ca, ca_key)
    paths["server_cert"], paths["server_key"] = _write(folder, "server", server, server_key)
    paths["client_cert"], paths["client_key"] = _write(folder, "client", client, client_key)
    return paths
