"""TLS for trt's endpoints: gRPC with Triton's ``--grpc-use-ssl*`` flags, and HTTPS for the HTTP
endpoint (Triton has none; its flags follow the gRPC ones, ``--http-...``).

``--http-use-ssl=true --http-server-cert=PEM --http-server-key=PEM`` serves TLS 1.2 or newer with the
``ssl`` module's default ciphers; ``--http-use-ssl-mutual=true --http-root-cert=PEM`` also asks each
client for a certificate signed by that CA and refuses connections without one. A file that cannot be
read, or a key that does not match its certificate, stops the server at start-up with the reason.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass


class TlsSetupError(ValueError):
    """The TLS flags do not make a usable server context (the message says which and why)."""


@dataclass(frozen=True, slots=True)
class TlsOptions:
    server_cert: str  # PEM certificate chain of the server
    server_key: str  # PEM private key of that certificate
    root_cert: str = ""  # PEM CA certificates that sign client certificates (mutual TLS)
    mutual: bool = False  # require a client certificate signed by root_cert


def server_context(
    options: TlsOptions, flag_prefix: str = "--http", alpn: tuple[str, ...] = ()
) -> ssl.SSLContext:
    """The server-side ``SSLContext`` for ``options``, offering the ``alpn`` protocols (gRPC needs
    ``h2``); TlsSetupError naming the flag at fault."""
    if not options.server_cert or not options.server_key:
        raise TlsSetupError(
            f"{flag_prefix}-use-ssl=true needs {flag_prefix}-server-cert and {flag_prefix}-server-key"
        )
    if options.mutual and not options.root_cert:
        raise TlsSetupError(
            f"{flag_prefix}-use-ssl-mutual=true needs {flag_prefix}-root-cert (the CA of client certificates)"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(options.server_cert, options.server_key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(
            f"{flag_prefix}-server-cert / {flag_prefix}-server-key: cannot use "
            f"'{options.server_cert}' with '{options.server_key}': {_reason(exc)}"
        ) from None
    if options.root_cert:
        try:
            context.load_verify_locations(cafile=options.root_cert)
        except (OSError, ssl.SSLError) as exc:
            raise TlsSetupError(
                f"{flag_prefix}-root-cert: cannot read '{options.root_cert}': {_reason(exc)}"
            ) from None
    context.verify_mode = ssl.CERT_REQUIRED if options.mutual else ssl.CERT_NONE
    if alpn:
        context.set_alpn_protocols(list(alpn))
    return context


def _reason(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    return exc.strerror or str(exc)
