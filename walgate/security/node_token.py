"""The signature that tells one cluster node's forwarded HTTP request from anyone else's (docs/security.md
"Between cluster nodes").

Every node of a cluster holds the cluster's node token, a secret kept in etcd under the cluster's prefix
(``/walgate/<cluster>/node_token``: :mod:`walgate.gateway.node_tokens`). A node forwarding part of a client's write or
SELECT to the node that owns it signs the request with it: HMAC-SHA256 over the receiving node's id, the method,
path, query, the ``X-Walgate-Forwarded`` value, the caller's principal and address, the time and the body's SHA-256
(:func:`signature`), sent in :data:`SIGNATURE` beside :data:`PRINCIPAL`, :data:`CLIENT_HOST` and :data:`TIME`. The
owner first checks the headers alone (:func:`header_refusal`: their form, and the time within :data:`WINDOW_MS` of
its own clock; :func:`head_refusal`: :data:`HEAD_SIGNATURE`, an HMAC of the same fields but the body's hash, valid
for a token it knows), before it reads the body, so that nobody without the token makes a node read and hash a body,
then trusts the principal and address only when :func:`refusal` finds the
signature valid for a token it knows and made for it; it then checks its ACLs for that principal and that address,
as the node asked did. A request with any of these headers and no valid signature is refused whole: without the
token nobody can make a node act for another user, or for another address. Both signatures also cover
:data:`CATALOG_SEQ`, the last record of the cluster's catalog the sending node applied, which the owner applies
too before it resolves a name or checks the user (a database, supertable or user just made through the sender), and
the format's version (:data:`VERSION`, sent in :data:`VERSION_HEADER`): a node of another version is refused with a
message saying so. A signed request can be sent again
(replayed) to the same node within the window: the signature names no single use.

The same token authenticates a node's Kafka connections to another node (WriteTxnMarkers, AddPartitionsToTxn v5,
AddOffsetsToTxn: docs/cluster.md "Transaction coordinators"): node ``N`` authenticates with SASL
:data:`NODE_MECHANISM` as user :func:`node_user` ``(N)`` with the password :func:`node_password`, an HMAC of the user
name with the token; the other node derives the same credential (:func:`node_credential`) from the token it knows.
SCRAM, because the password never crosses the wire (a challenge with the server's nonce, a proof only valid for it):
a recorded exchange, even on a PLAINTEXT listener, authenticates nobody again; the other side proves it knows the
token too. Nobody without the token authenticates as a node, whatever client id it sends.

Pure: no I/O, no clock (the caller gives ``now_ms``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from walgate.security.scram import ScramCredential, credential_from_password

__all__ = ["CATALOG_SEQ", "CLIENT_HOST", "HEADERS", "HEAD_SIGNATURE", "NODE_MECHANISM", "PRINCIPAL", "SIGNATURE",
           "TIME", "VERSION", "VERSION_HEADER", "WINDOW_MS", "Signed", "head_refusal", "head_signature",
           "header_refusal", "new_token", "node_credential", "node_of_user", "node_password", "node_user", "refusal",
           "signature"]

PRINCIPAL = "X-Walgate-Principal"
"""The authenticated caller of the node asked (``User:name``)."""
CLIENT_HOST = "X-Walgate-Client-Host"
"""The caller's address as the node asked saw it: the host its ACLs are checked with."""
TIME = "X-Walgate-Time"
"""Milliseconds since the epoch when the request was signed."""
SIGNATURE = "X-Walgate-Signature"
"""Hex HMAC-SHA256 of the request (:func:`signature`) with the cluster's node token."""
HEAD_SIGNATURE = "X-Walgate-Head-Signature"
"""Hex HMAC-SHA256 of the request but its body (:func:`head_signature`), checked before the body is read."""
CATALOG_SEQ = "X-Walgate-Catalog-Seq"
"""The last record of the cluster's catalog the sending node applied when it signed (the owner applies it first)."""
VERSION_HEADER = "X-Walgate-Signature-Version"
"""The signature format's :data:`VERSION`."""
VERSION = "2"
"""This walgate's signature format (1, unmarked: before the catalog sequence and the head signature)."""
HEADERS = (PRINCIPAL, CLIENT_HOST, TIME, SIGNATURE, HEAD_SIGNATURE, CATALOG_SEQ, VERSION_HEADER)
WINDOW_MS = 300_000
"""How far a signed request's time may be from the owner's clock (either way) and still be accepted."""
_TIME_FORM = re.compile(r"[0-9]{1,15}")  # ASCII digits only: str.isdigit() also takes "²", which int() refuses
_SIGNATURE_FORM = re.compile(r"[0-9a-f]{64}")
_SEQ_FORM = re.compile(r"[0-9]{1,18}")
_PRINCIPAL_FORM = re.compile(r"User:[^\x00-\x1f]+")


@dataclass(frozen=True)
class Signed:
    """What a signature covers: the node it is sent to (``node``: its node id), the request line (``method``,
    ``path``, decoded ``query``), the forwarded part (``forwarded``: the ``X-Walgate-Forwarded`` value), who asked
    (``principal``, ``host``), when (``time_ms``), the ``body`` and the sender's applied catalog record
    (``catalog_seq``)."""

    node: int
    method: str
    path: str
    query: Mapping[str, str]
    forwarded: str
    principal: str
    host: str
    time_ms: int
    body: bytes
    catalog_seq: int = 0

    def message(self) -> bytes:
        """The bytes :data:`SIGNATURE` signs: each field length-prefixed, so that no two requests sign the same
        bytes."""
        return self._fields("walgate node request", hashlib.sha256(self.body).hexdigest())

    def head_message(self) -> bytes:
        """The bytes :data:`HEAD_SIGNATURE` signs: :meth:`message`'s fields but the body's hash (and another first
        field: neither signature is ever the other's)."""
        return self._fields("walgate node request head")

    def _fields(self, kind: str, *more: str) -> bytes:
        fields = [kind, VERSION, str(self.node), self.method, self.path, str(len(self.query)),
                  *(field for item in sorted(self.query.items()) for field in item), self.forwarded, self.principal,
                  self.host, str(self.time_ms), str(self.catalog_seq), *more]
        encoded = [f.encode("utf-8", "surrogatepass") for f in fields]  # a query may decode to lone surrogates
        return b"".join(len(e).to_bytes(4, "big") + e for e in encoded)


def new_token() -> str:
    """A fresh node token: 32 random bytes, URL-safe base64."""
    return secrets.token_urlsafe(32)


def signature(token: str, signed: Signed) -> str:
    """The :data:`SIGNATURE` of ``signed`` with ``token``."""
    return _mac(token, signed.message())


def head_signature(token: str, signed: Signed) -> str:
    """The :data:`HEAD_SIGNATURE` of ``signed`` with ``token`` (its body not used)."""
    return _mac(token, signed.head_message())


def _mac(token: str, message: bytes) -> str:
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def header_refusal(time_text: str, given: str, principal: str, now_ms: int, seq_text: str = "0") -> str | None:
    """Why a request whose :data:`TIME`, :data:`SIGNATURE` (or :data:`HEAD_SIGNATURE`), :data:`PRINCIPAL` and
    :data:`CATALOG_SEQ` headers are ``time_text``, ``given``, ``principal`` and ``seq_text`` cannot be a node's,
    by their form alone: a time that is not 1 to 15 ASCII digits or not within :data:`WINDOW_MS` of ``now_ms``, a
    signature that is not 64 lowercase hex digits, a principal that is not ``User:<name>``, a sequence that is not 1
    to 18 ASCII digits; None when none of these."""
    if not _TIME_FORM.fullmatch(time_text):
        return f"its {TIME} is not a number of milliseconds"
    if abs(now_ms - int(time_text)) > WINDOW_MS:
        return (f"its {TIME} is {abs(now_ms - int(time_text)) // 1000} s from this node's clock (at most "
                f"{WINDOW_MS // 1000} s are accepted)")
    if not _SIGNATURE_FORM.fullmatch(given):
        return f"its {SIGNATURE} is not 64 hex digits"
    if not _PRINCIPAL_FORM.fullmatch(principal):
        return f"its {PRINCIPAL} is not User:<name>"
    if not _SEQ_FORM.fullmatch(seq_text):
        return f"its {CATALOG_SEQ} is not a number"
    return None


def head_refusal(tokens: Iterable[str], given: str, signed: Signed, now_ms: int) -> str | None:
    """Why a request claiming to be ``signed`` (its body not read yet: not used) with head signature ``given`` is
    not a node's, or None when its headers pass :func:`header_refusal` and ``given`` is the :func:`head_signature`
    of ``signed`` with one of ``tokens``."""
    refused = header_refusal(str(signed.time_ms), given, signed.principal, now_ms, str(signed.catalog_seq))
    if refused is not None:
        return refused.replace(SIGNATURE, HEAD_SIGNATURE)
    message = signed.head_message()
    if not any(hmac.compare_digest(_mac(token, message), given) for token in tokens):
        return f"its {HEAD_SIGNATURE} is not one of this cluster's nodes"
    return None


def refusal(tokens: Iterable[str], given: str, signed: Signed, now_ms: int) -> str | None:
    """Why a request claiming to be ``signed`` with signature ``given`` is not a node's, or None when its headers
    pass :func:`header_refusal` and ``given`` is the signature of ``signed`` with one of ``tokens``."""
    refused = header_refusal(str(signed.time_ms), given, signed.principal, now_ms, str(signed.catalog_seq))
    if refused is not None:
        return refused
    message = signed.message()  # the body hashed once, whatever the number of tokens
    if not any(hmac.compare_digest(_mac(token, message), given) for token in tokens):
        return "its signature is not one of this cluster's nodes"
    return None


NODE_MECHANISM = "SCRAM-SHA-256"
"""The SASL mechanism a node authenticates to another node's Kafka listener with."""
_NODE_USER = "walgate-node-"


def node_user(node_id: int) -> str:
    """The SASL user name node ``node_id`` authenticates as (its principal: ``User:walgate-node-<id>``)."""
    return f"{_NODE_USER}{node_id}"


def node_of_user(user: str) -> int | None:
    """The node id a SASL user name of a node's form names, else None. Every name of this form is reserved: it
    authenticates only with :func:`node_credential`, never with a password of the user store."""
    rest = user[len(_NODE_USER):] if user.startswith(_NODE_USER) else ""
    return int(rest) if rest.isascii() and rest.isdigit() and len(rest) < 10 else None


def node_password(token: str, user: str) -> str:
    """The SCRAM password of node user ``user`` with node token ``token``."""
    return hmac.new(token.encode(), b"walgate kafka node password\0" + user.encode(), hashlib.sha256).hexdigest()


def node_credential(token: str, user: str) -> ScramCredential:
    """The :data:`NODE_MECHANISM` credential of node user ``user`` with ``token`` (its salt derived from both, so
    every node derives the same)."""
    salt = hmac.new(token.encode(), b"walgate kafka node salt\0" + user.encode(), hashlib.sha256).digest()[:16]
    return credential_from_password(NODE_MECHANISM, node_password(token, user), salt)
