"""The signature that tells one cluster node's forwarded HTTP request from anyone else's (docs/security.md
"Between cluster nodes").

Every node of a cluster holds the cluster's node token, a secret kept in etcd under the cluster's prefix
(``/walgate/<cluster>/node_token``: :mod:`walgate.gateway.node_tokens`). A node forwarding part of a client's write or
SELECT to the node that owns it signs the request with it: HMAC-SHA256 over the receiving node's id, the method,
path, query, the ``X-Walgate-Forwarded`` value, the caller's principal and address, the time and the body's SHA-256
(:func:`signature`), sent in :data:`SIGNATURE` beside :data:`PRINCIPAL`, :data:`CLIENT_HOST` and :data:`TIME`. The
owner first checks the headers alone (:func:`header_refusal`: their form, and the time within :data:`WINDOW_MS` of
its own clock), before it reads the body, then trusts the principal and address only when :func:`refusal` finds the
signature valid for a token it knows and made for it; it then checks its ACLs for that principal and that address,
as the node asked did. A request with any of these headers and no valid signature is refused whole: without the
token nobody can make a node act for another user, or for another address. A signed request can be sent again
(replayed) to the same node within the window: the signature names no single use.

Pure: no I/O, no clock (the caller gives ``now_ms``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["CLIENT_HOST", "HEADERS", "PRINCIPAL", "SIGNATURE", "TIME", "WINDOW_MS", "Signed", "header_refusal",
           "new_token", "refusal", "signature"]

PRINCIPAL = "X-Walgate-Principal"
"""The authenticated caller of the node asked (``User:name``)."""
CLIENT_HOST = "X-Walgate-Client-Host"
"""The caller's address as the node asked saw it: the host its ACLs are checked with."""
TIME = "X-Walgate-Time"
"""Milliseconds since the epoch when the request was signed."""
SIGNATURE = "X-Walgate-Signature"
"""Hex HMAC-SHA256 of the request (:func:`signature`) with the cluster's node token."""
HEADERS = (PRINCIPAL, CLIENT_HOST, TIME, SIGNATURE)
WINDOW_MS = 300_000
"""How far a signed request's time may be from the owner's clock (either way) and still be accepted."""
_TIME_FORM = re.compile(r"[0-9]{1,15}")  # ASCII digits only: str.isdigit() also takes "²", which int() refuses
_SIGNATURE_FORM = re.compile(r"[0-9a-f]{64}")
_PRINCIPAL_FORM = re.compile(r"User:[^\x00-\x1f]+")


@dataclass(frozen=True)
class Signed:
    """What a signature covers: the node it is sent to (``node``: its node id), the request line (``method``,
    ``path``, decoded ``query``), the forwarded part (``forwarded``: the ``X-Walgate-Forwarded`` value), who asked
    (``principal``, ``host``), when (``time_ms``) and the ``body``."""

    node: int
    method: str
    path: str
    query: Mapping[str, str]
    forwarded: str
    principal: str
    host: str
    time_ms: int
    body: bytes

    def message(self) -> bytes:
        """The bytes signed: each field length-prefixed, so that no two requests sign the same bytes."""
        fields = [str(self.node), self.method, self.path, str(len(self.query)),
                  *(field for item in sorted(self.query.items()) for field in item), self.forwarded, self.principal,
                  self.host, str(self.time_ms), hashlib.sha256(self.body).hexdigest()]
        encoded = [f.encode("utf-8", "surrogatepass") for f in fields]  # a query may decode to lone surrogates
        return b"".join(len(e).to_bytes(4, "big") + e for e in encoded)


def new_token() -> str:
    """A fresh node token: 32 random bytes, URL-safe base64."""
    return secrets.token_urlsafe(32)


def signature(token: str, signed: Signed) -> str:
    """The :data:`SIGNATURE` of ``signed`` with ``token``."""
    return _mac(token, signed.message())


def _mac(token: str, message: bytes) -> str:
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def header_refusal(time_text: str, given: str, principal: str, now_ms: int) -> str | None:
    """Why a request whose :data:`TIME`, :data:`SIGNATURE` and :data:`PRINCIPAL` headers are ``time_text``,
    ``given`` and ``principal`` cannot be a node's, before its body is read: a time that is not 1 to 15 ASCII
    digits or not within :data:`WINDOW_MS` of ``now_ms``, a signature that is not 64 lowercase hex digits, a
    principal that is not ``User:<name>``; None when none of these."""
    if not _TIME_FORM.fullmatch(time_text):
        return f"its {TIME} is not a number of milliseconds"
    if abs(now_ms - int(time_text)) > WINDOW_MS:
        return (f"its {TIME} is {abs(now_ms - int(time_text)) // 1000} s from this node's clock (at most "
                f"{WINDOW_MS // 1000} s are accepted)")
    if not _SIGNATURE_FORM.fullmatch(given):
        return f"its {SIGNATURE} is not 64 hex digits"
    if not _PRINCIPAL_FORM.fullmatch(principal):
        return f"its {PRINCIPAL} is not User:<name>"
    return None


def refusal(tokens: Iterable[str], given: str, signed: Signed, now_ms: int) -> str | None:
    """Why a request claiming to be ``signed`` with signature ``given`` is not a node's, or None when its headers
    pass :func:`header_refusal` and ``given`` is the signature of ``signed`` with one of ``tokens``."""
    refused = header_refusal(str(signed.time_ms), given, signed.principal, now_ms)
    if refused is not None:
        return refused
    message = signed.message()  # the body hashed once, whatever the number of tokens
    if not any(hmac.compare_digest(_mac(token, message), given) for token in tokens):
        return "its signature is not one of this cluster's nodes"
    return None
