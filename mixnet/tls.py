"""TLS for the chain's websockets: the chain's CA bundle, node certificates, ``wss://``.

A chain may name a CA bundle in its chain file (``[tls] ca = "ca.pem"``, a path relative to
the chain file; :class:`TlsConfig`). Every ``wss://`` connection made from the chain's
configuration — a node's forward link to its successor, the client library's connections to
the entry mix and to the sink — then trusts exactly the certificates in that bundle
(:func:`client_context`), and checks the host name of the URL against the node's
certificate. Without a ``[tls]`` table, ``wss://`` connections trust the system's default
CAs; ``ws://`` connections never use TLS.

A node serves TLS when it is given a certificate and its key (``cloaknet node --tls-cert
FILE --tls-key FILE``; :func:`server_context`). Whether it must is decided by its own URL in
the chain file (:func:`check_server_tls`): a ``wss://`` node without a certificate, or a
``ws://`` node with one, refuses to start (the chain would otherwise stall, each side
speaking another protocol).

Every problem is a :class:`TlsError` with a one-line reason.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from mixnet.errors import MixnetError

__all__ = [
    "TlsConfig",
    "TlsError",
    "check_server_tls",
    "client_context",
    "is_tls_url",
    "server_context",
    "tls_failure",
]


class TlsError(MixnetError):
    """A TLS setting cannot be used (an unreadable CA bundle, certificate or key, a node whose
    URL and certificate disagree), or a TLS connection failed for a reason a retry cannot
    fix (the peer's certificate is not trusted, the peer does not speak TLS). Never sent on
    the wire."""

    code = "tls-error"


@dataclass(frozen=True)
class TlsConfig:
    """The chain file's ``[tls]`` table: ``ca``, the CA bundle (PEM, one or more
    certificates) that ``wss://`` connections of the chain trust. A relative path is
    relative to the current directory; :func:`mixnet.chain.load_chain_config` makes it
    relative to the chain file instead.

    :raises TypeError: ``ca`` is not a path.
    """

    ca: Path

    def __post_init__(self) -> None:
        if not isinstance(self.ca, str | os.PathLike):
            raise TypeError(f"ca must be a path, not {type(self.ca).__name__}")
        object.__setattr__(self, "ca", Path(self.ca))

    def client_context(self) -> ssl.SSLContext:
        """The client context trusting :attr:`ca` (see :func:`client_context`)."""
        return client_context(self.ca)


def is_tls_url(url: str) -> bool:
    """Whether ``url`` is a ``wss://`` URL (the scheme compared case-insensitively)."""
    return url[:6].lower() == "wss://"


def _reason(exc: BaseException) -> str:
    """A short reason for an ``OSError`` or ``ssl.SSLError`` (no traceback, no repr)."""
    verify = getattr(exc, "verify_message", None)
    if verify:
        return str(verify)  # e.g. "unable to get local issuer certificate"
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).replace("_", " ").lower()  # e.g. "wrong version number"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def client_context(ca: str | os.PathLike[str]) -> ssl.SSLContext:
    """A TLS client context that trusts exactly the certificates in the PEM file ``ca``
    (not the system's CAs), verifies the peer's certificate and host name, and speaks
    TLS 1.2 or later.

    :raises TlsError: ``ca`` cannot be read or holds no usable certificate.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificate and host name
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_verify_locations(cafile=os.fspath(ca))
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise TlsError(f"cannot use CA bundle {os.fspath(ca)}: {_reason(exc)}") from None
    if not context.get_ca_certs():
        raise TlsError(f"cannot use CA bundle {os.fspath(ca)}: it holds no CA certificate")
    return context


def server_context(
    cert: str | os.PathLike[str], key: str | os.PathLike[str] | None = None
) -> ssl.SSLContext:
    """A TLS server context with the certificate chain in the PEM file ``cert`` and its
    private key in ``key`` (``None``: the key is in ``cert`` too), speaking TLS 1.2 or
    later. Clients are not asked for certificates (predecessors authenticate with their
    identity keys inside the connection).

    :raises TlsError: a file cannot be read, is not PEM, or the key does not match the
        certificate.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    shown = os.fspath(cert) if key is None else f"{os.fspath(cert)} / {os.fspath(key)}"
    try:
        context.load_cert_chain(
            certfile=os.fspath(cert), keyfile=None if key is None else os.fspath(key)
        )
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise TlsError(f"cannot load TLS certificate and key {shown}: {_reason(exc)}") from None
    return context


def check_server_tls(name: str, url: str, *, has_certificate: bool) -> None:
    """Check that node ``name``, listed at ``url``, serves TLS exactly when its URL says so.

    :raises TlsError: ``url`` is ``wss://`` and the node has no certificate, or ``url`` is
        ``ws://`` and it has one.
    """
    if is_tls_url(url) and not has_certificate:
        raise TlsError(
            f"node {name!r} is listed at {url}, a wss:// URL, but has no TLS certificate "
            "(give --tls-cert and --tls-key, or list it at ws://)"
        )
    if not is_tls_url(url) and has_certificate:
        raise TlsError(
            f"node {name!r} is listed at {url}, a ws:// URL, but was given a TLS certificate "
            "(list it at wss:// in the chain file, or drop --tls-cert)"
        )


def tls_failure(url: str, exc: BaseException) -> TlsError | None:
    """The :class:`TlsError` for ``exc``, a failure to connect to ``url``, if it is one a
    retry cannot fix: the peer's certificate was not trusted (or names another host), or
    the TLS handshake failed (e.g. the peer serves plain ``ws://``); else ``None``."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TlsError(
            f"{url}: the node's TLS certificate is not trusted: {_reason(exc)} "
            "(is [tls].ca in the chain file the CA that signed it?)"
        )
    if isinstance(exc, ssl.SSLError):
        return TlsError(
            f"{url}: the TLS handshake failed: {_reason(exc)} (does the node serve TLS?)"
        )
    return None
