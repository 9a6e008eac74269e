"""The TLS alert a refused client certificate gets: bad_certificate (42), as librdkafka expects of Kafka.

OpenSSL answers a client certificate that fails verification with the alert its verify error maps to: an unknown
issuer (``unable to get local issuer certificate``, a self-signed certificate) is unknown_ca (48), an expired one
certificate_expired (45). librdkafka's own test of client certificates (``0097_ssl_verify``) accepts only 42
(bad_certificate) or 40 (handshake_failure) from a broker that refuses one, and Java's client then reports
"Received fatal alert: unknown_ca" where Kafka's users search for "bad_certificate". Kafka's brokers send one alert
whatever the reason (Java's SSLEngine maps every trust-manager failure to one alert; which one depends on the JDK:
docs/security.md).

Python's ``ssl`` module has no verify callback, so :func:`answer_bad_certificate` installs one with ctypes on the
context's ``SSL_CTX`` (``SSL_CTX_set_verify`` of the libssl ``_ssl`` is linked with): it lets every certificate
OpenSSL accepted through, and for one it refused, logs OpenSSL's reason at INFO and replaces the error with
``X509_V_ERR_CERT_REJECTED``, which OpenSSL answers with bad_certificate. The verification itself is OpenSSL's,
unchanged: only the alert's description differs. The ``SSL_CTX`` pointer is read from the ``SSLContext`` object
(CPython's ``PySSLContext`` holds it first after the object header) and checked against the context's verify mode
and options before use; when that check fails or libssl's functions cannot be found (another Python build), nothing
is installed, OpenSSL's own alert is sent and a warning says so. Setting ``verify_mode`` afterwards removes the callback (CPython passes none):
install it last.
"""

from __future__ import annotations

import ctypes
import logging
import ssl
from typing import Any

__all__ = ["answer_bad_certificate"]

log = logging.getLogger("walgate.tls")

_X509_V_ERR_CERT_REJECTED = 28  # OpenSSL's ssl_x509err2alert: -> SSL_AD_BAD_CERTIFICATE
_VERIFY_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
_OPENSSL_MODE = {ssl.CERT_NONE: 0, ssl.CERT_OPTIONAL: 1, ssl.CERT_REQUIRED: 3}
"""``SSL_VERIFY_*`` flags CPython sets for each verify mode (PEER, PEER | FAIL_IF_NO_PEER_CERT)."""


def _libssl() -> Any:
    """The libssl CPython's ``_ssl`` module uses, with the prototypes of the functions called here."""
    import _ssl

    # dlsym through _ssl's handle finds the libssl/libcrypto it was linked with (None: a _ssl built into python)
    lib = ctypes.CDLL(getattr(_ssl, "__file__", None))
    lib.SSL_CTX_get_verify_mode.argtypes, lib.SSL_CTX_get_verify_mode.restype = [ctypes.c_void_p], ctypes.c_int
    lib.SSL_CTX_get_options.argtypes, lib.SSL_CTX_get_options.restype = [ctypes.c_void_p], ctypes.c_uint64
    lib.SSL_CTX_set_verify.argtypes, lib.SSL_CTX_set_verify.restype = [ctypes.c_void_p, ctypes.c_int,
                                                                       _VERIFY_CALLBACK], None
    lib.X509_STORE_CTX_get_error.argtypes, lib.X509_STORE_CTX_get_error.restype = [ctypes.c_void_p], ctypes.c_int
    lib.X509_STORE_CTX_set_error.argtypes, lib.X509_STORE_CTX_set_error.restype = [ctypes.c_void_p,
                                                                                   ctypes.c_int], None
    lib.X509_STORE_CTX_get_error_depth.argtypes = [ctypes.c_void_p]
    lib.X509_STORE_CTX_get_error_depth.restype = ctypes.c_int
    lib.X509_verify_cert_error_string.argtypes = [ctypes.c_long]
    lib.X509_verify_cert_error_string.restype = ctypes.c_char_p
    return lib


def _refuse_as_bad_certificate(preverify_ok: int, store: int | None) -> int:
    """OpenSSL's verify callback: OpenSSL's decision, a refusal worded as a rejected certificate."""
    if preverify_ok:
        return 1
    error = _LIB.X509_STORE_CTX_get_error(store)
    reason = (_LIB.X509_verify_cert_error_string(error) or b"?").decode("ascii", "replace")
    log.info("client certificate refused (bad_certificate): %s (at depth %d)", reason,
             _LIB.X509_STORE_CTX_get_error_depth(store))
    _LIB.X509_STORE_CTX_set_error(store, _X509_V_ERR_CERT_REJECTED)
    return 0


try:
    _LIB: Any = _libssl()
except (OSError, AttributeError):  # no libssl symbols to be found: answer_bad_certificate installs nothing
    _LIB = None
_CALLBACK = _VERIFY_CALLBACK(_refuse_as_bad_certificate)  # kept alive for as long as contexts may call it


def _ssl_ctx(context: ssl.SSLContext) -> int | None:
    """The ``SSL_CTX *`` of ``context`` if it is where CPython keeps it (see the module docstring), else None."""
    pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    if pointer is None or _LIB is None:
        return None
    if (_LIB.SSL_CTX_get_verify_mode(pointer) != _OPENSSL_MODE[context.verify_mode]
            or _LIB.SSL_CTX_get_options(pointer) != int(context.options)):
        return None
    return int(pointer)


def answer_bad_certificate(context: ssl.SSLContext) -> bool:
    """Make ``context`` (a server context that verifies client certificates) answer a certificate it refuses with
    bad_certificate; False (and a warning) when the context's ``SSL_CTX`` cannot be found safely."""
    pointer = _ssl_ctx(context)
    if pointer is None:
        log.warning("cannot install the client-certificate verify callback on this Python build: refused client "
                    "certificates get OpenSSL's own alert (e.g. unknown_ca) instead of bad_certificate")
        return False
    _LIB.SSL_CTX_set_verify(pointer, _OPENSSL_MODE[context.verify_mode], _CALLBACK)
    return True
