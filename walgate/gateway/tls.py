"""TLS for the Kafka listeners (SSL, SASL_SSL) and the HTTP API, from Kafka's PEM settings.

:func:`server_context` builds one ``ssl.SSLContext`` from a listener's settings (``Config.for_listener``):

- the certificate: ``ssl.keystore.location`` (a PEM file holding the private key and the certificate chain, the
  key encrypted or not: ``ssl.key.password``), or the same inline (``ssl.keystore.certificate.chain`` +
  ``ssl.keystore.key``, written to a private temporary directory only while OpenSSL reads them);
- client certificates (``ssl.client.auth``; on SASL_SSL listeners only when set per listener, as in Kafka):
  ``none`` asks for none, ``requested`` verifies one if the client sends it, ``required`` refuses the handshake
  without a valid one; they must chain to ``ssl.truststore.location`` / ``ssl.truststore.certificates`` (PEM CA
  certificates), or to the system's CAs when neither is set; one that does not is refused with the TLS alert
  bad_certificate, whatever OpenSSL's reason (:mod:`.tls_verify`);
- versions: ``ssl.enabled.protocols`` among TLSv1.2 and TLSv1.3 (never older).

A failed handshake (no or an untrusted client certificate, no common version) must reach the client as the TLS
alert OpenSSL wrote, or clients see a bare EOF (Java's client then retries "terminated during authentication"
instead of failing with ``SslAuthenticationException``). asyncio's and uvloop's TLS protocols close the transport
at once when ``do_handshake`` raises, dropping that alert; so the contexts (:class:`_Context`) make
:class:`_AlertingSSLObject` objects, which answer a failure that left an alert to send with "want read" (the loop then
sends it) and raise the failure at the next call (data or EOF from the client, or the loop's handshake timeout). A
failure with nothing to send (OpenSSL sends no alert to a peer that does not speak TLS at all) is raised at once.
Each failure is logged once at INFO.

:func:`peer_principal` is Kafka's principal of an SSL connection (``DefaultKafkaPrincipalBuilder``): ``User:`` and
the client certificate's subject DN in RFC 2253 form (RFC 4514, as ``cryptography`` writes it) mapped by
``ssl.principal.mapping.rules``; ``User:ANONYMOUS`` without a certificate. A DN no rule maps raises
:class:`~walgate.gateway.principal_mapping.NoMatchingRule` (the connection must not go on). Error messages never
contain the key password or key material.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from pathlib import Path

from cryptography import x509

from walgate.gateway.config import Config, ConfigError
from walgate.gateway.kafka.context import ANONYMOUS
from walgate.gateway.principal_mapping import PrincipalMapper
from walgate.gateway.tls_verify import answer_bad_certificate

__all__ = ["node_client_context", "server_context", "peer_principal"]

log = logging.getLogger("walgate.tls")

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(config: Config, what: str, client_auth: str | None = None) -> ssl.SSLContext:
    """A server-side context for ``config``'s TLS settings (``client_auth``, when given, instead of its
    ``ssl_client_auth``: ``Config.client_auth``); ``what`` names the listener in errors. Raises
    :class:`ConfigError` when a file cannot be read or does not hold what it should."""
    client_auth = client_auth or config.ssl_client_auth
    context = _versions(_Context(ssl.PROTOCOL_TLS_SERVER), config)
    _certificate(context, config, what)
    context.verify_mode = _VERIFY[client_auth]
    if client_auth != "none":
        _truststore(context, config, what, ssl.Purpose.CLIENT_AUTH)
        answer_bad_certificate(context)  # last: setting verify_mode would remove it
    return context


def node_client_context(config: Config) -> ssl.SSLContext:
    """The client context a node reaches other nodes' HTTPS APIs with (SQL forwarded between nodes): it verifies the
    other node's certificate and host name against ``ssl.truststore.location`` / ``ssl.truststore.certificates``
    only (as Kafka's truststore; the system's CAs when neither is set) and presents this node's own certificate
    (``ssl.keystore.*``), for an HTTP API that asks for one. Raises :class:`ConfigError` when a file cannot be
    read."""
    context = _versions(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), config)  # verifies the certificate and host name
    _truststore(context, config, "HTTP between nodes", ssl.Purpose.SERVER_AUTH)
    _certificate(context, config, "HTTP between nodes")
    return context


def _versions(context: ssl.SSLContext, config: Config) -> ssl.SSLContext:
    """``context`` limited to ``ssl.enabled.protocols``."""
    versions = sorted(_VERSIONS[name] for name in config.ssl_enabled_protocols)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    return context


def _certificate(context: ssl.SSLContext, config: Config, what: str) -> None:
    """``ssl.keystore.*`` loaded into ``context``; ConfigError naming ``what`` (never the password) otherwise."""
    try:
        _load_certificate(context, config)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError; never show the password
        raise ConfigError(f"{what}: cannot load the certificate and private key "
                          f"({_where(config)}): {_reason(e)}") from None


def _truststore(context: ssl.SSLContext, config: Config, what: str, purpose: ssl.Purpose) -> None:
    """The CAs ``context`` verifies peers with: ``ssl.truststore.*``, else the system's for ``purpose``;
    ConfigError naming ``what`` when they cannot be loaded."""
    try:
        if config.ssl_truststore_location is not None:
            context.load_verify_locations(cafile=str(config.ssl_truststore_location))
        elif config.ssl_truststore_certificates:
            context.load_verify_locations(cadata=config.ssl_truststore_certificates)
        else:
            context.load_default_certs(purpose)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{what}: cannot load the truststore "
                          f"({config.ssl_truststore_location or 'ssl.truststore.certificates'}): {_reason(e)}") from None


class _AlertingSSLObject(ssl.SSLObject):
    """An SSLObject whose failed handshake lets the event loop send the alert first (see the module docstring)."""

    _outgoing: ssl.MemoryBIO | None = None  # what the loop sends to the peer
    _failure: ssl.SSLError | None = None

    def do_handshake(self) -> None:
        if self._failure is not None:
            raise self._failure
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as e:
            log.info("TLS handshake failed: %s", e.reason or e)
            if self._outgoing is None or not self._outgoing.pending:
                raise
            self._failure = e
            raise ssl.SSLWantReadError("TLS handshake failed; sending the alert") from e


class _Context(ssl.SSLContext):
    """A server context whose TLS objects are :class:`_AlertingSSLObject` objects that know their outgoing BIO."""

    sslobject_class = _AlertingSSLObject

    def wrap_bio(self, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, server_side: bool = False,
                 server_hostname: str | bytes | None = None, session: ssl.SSLSession | None = None) -> ssl.SSLObject:
        sslobject = super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)
        if isinstance(sslobject, _AlertingSSLObject):
            sslobject._outgoing = outgoing
        return sslobject


def _where(config: Config) -> str:
    return str(config.ssl_keystore_location) if config.ssl_keystore_location else "ssl.keystore.certificate.chain"


def _reason(error: BaseException) -> str:
    if isinstance(error, ssl.SSLError):
        return error.reason or type(error).__name__
    if isinstance(error, OSError):
        return error.strerror or type(error).__name__
    return type(error).__name__


def _load_certificate(context: ssl.SSLContext, config: Config) -> None:
    password = config.ssl_key_password
    if config.ssl_keystore_location is not None:
        context.load_cert_chain(str(config.ssl_keystore_location), password=password)
        return
    assert config.ssl_keystore_certificate_chain and config.ssl_keystore_key  # Config checked they go together
    with tempfile.TemporaryDirectory(prefix="walgate-tls-") as tmp:  # mode 0700
        chain, key = Path(tmp, "chain.pem"), Path(tmp, "key.pem")
        chain.write_text(config.ssl_keystore_certificate_chain)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(config.ssl_keystore_key)
        context.load_cert_chain(str(chain), str(key), password=password)


def peer_principal(ssl_object: ssl.SSLObject | ssl.SSLSocket | None, mapper: PrincipalMapper) -> str:
    """The principal of a TLS connection's client (see the module docstring)."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return ANONYMOUS
    subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return "User:" + mapper.name(subject)
