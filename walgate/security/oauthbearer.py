"""SASL OAUTHBEARER (RFC 7628) on the server side: the client's message, signed JWT validation, the exchange.

Pure and synchronous: no I/O, no clock. The caller passes the verification keys (a JWKS document, as
:class:`Jwks`; :mod:`walgate.gateway.jwks` reads and re-reads Kafka's ``sasl.oauthbearer.jwks.endpoint.url``
file) and the time.

The client's message (Kafka's ``OAuthBearerClientInitialResponse``): a GS2 header ``n,[a=<authzid>],`` then
``\\x01``-separated ``key=value`` pairs ending in ``\\x01\\x01``; ``auth=Bearer <token>`` is required, the other keys
are SASL extensions (letters only; values printable ASCII, space, tab, CR, LF). Anything else is malformed.

A token is valid as Kafka's ``ValidatorAccessTokenValidator`` (jose4j) decides:

* a JWS whose ``alg`` is one of :data:`ALGORITHMS` (RSA and EC signatures: never ``none``, never an HMAC, so a
  public key can never be used as a shared secret), signed by the JWKS key its ``kid`` names (without a ``kid``:
  the one key of the set usable for that algorithm);
* ``exp`` and ``iat`` present, ``nbf`` optional, each a JSON number of seconds that jose4j's ``NumericDate`` holds:
  truncated to whole seconds (Java's ``longValue``), not negative, and at most :data:`MAX_NUMERIC_DATE` so that its
  milliseconds fit a signed 64-bit long (the session lifetime SaslAuthenticate announces; Kafka's
  ``getValueInMillis`` throws beyond it, walgate refuses the token); ``NaN`` and ``Infinity`` are no numbers;
  not expired (``now < exp + skew``), not before ``nbf`` (``now + skew >= nbf``), skew =
  ``sasl.oauthbearer.clock.skew.seconds``;
* ``iss`` equal to ``sasl.oauthbearer.expected.issuer`` when that is set;
* ``aud`` containing one of ``sasl.oauthbearer.expected.audience`` when that is set; a token with an ``aud`` is
  refused when none is expected (jose4j's default);
* the subject claim (``sasl.oauthbearer.sub.claim.name``, ``sub``) a non-blank string; the scope claim
  (``sasl.oauthbearer.scope.claim.name``, ``scope``) a string or list of distinct non-blank strings, if present.

The principal is ``User:<subject>``; the token's ``exp`` (ms) bounds the session (KIP-368). An authorization id in the
message must equal the subject. A refused token is answered as RFC 7628 asks: the server's challenge is
``{"status":"invalid_token"}``, the client answers ``\\x01``, and the exchange then fails with that JSON as message
(Kafka's ``OAuthBearerSaslServer``). Why a token was refused is in :attr:`OAuthBearerExchange.reason` for the log;
no error or reason ever contains the token.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jwt
from jwt.exceptions import InvalidKeyError, InvalidTokenError, PyJWKError, PyJWKSetError

__all__ = ["ALGORITHMS", "INVALID_TOKEN", "MAX_NUMERIC_DATE", "Jwks", "OAuthBearerError", "OAuthBearerExchange", "Step", "TokenSettings",
           "ValidToken", "parse_initial_response", "validate_token"]

MAX_NUMERIC_DATE = ((1 << 63) - 1) // 1000
"""The largest ``exp``, ``iat`` or ``nbf`` accepted, in seconds: its milliseconds still fit a signed 64-bit long."""
ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"})
"""Signature algorithms accepted: asymmetric only (never ``none`` or ``HS*``)."""
INVALID_TOKEN = b'{"status":"invalid_token"}'
_CONTROL_A = b"\x01"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"  # 0x01-0x7F but '=' and ','; or =2C / =3D
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_MESSAGE = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<pairs>(?:{_KEY}={_VALUE}\x01)*)\x01")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
_MAX_MESSAGE = 64 << 10  # bytes of a client message parsed (a JWT is a few kB)


class OAuthBearerError(Exception):
    """The exchange failed (Kafka's SASL_AUTHENTICATION_FAILED); the message names no secret."""


class Step(NamedTuple):
    """One step of the exchange: the server's bytes for the client, whether the exchange is over (successfully),
    and the authenticated principal (``User:name``) once it is."""

    challenge: bytes
    done: bool
    principal: str | None


@dataclass(frozen=True)
class TokenSettings:
    """Kafka's broker settings for validating OAUTHBEARER tokens (``sasl.oauthbearer.*``)."""

    expected_issuer: str | None = None
    expected_audience: tuple[str, ...] = ()  # any one of them
    scope_claim_name: str = "scope"
    sub_claim_name: str = "sub"
    clock_skew_seconds: int = 30


@dataclass(frozen=True)
class ValidToken:
    """What a valid token establishes."""

    principal: str  # User:<subject>
    subject: str
    scopes: frozenset[str]
    expiry_ms: int  # the token's exp: the session lasts at most until then (KIP-368)
    issued_at_ms: int


class _Key(NamedTuple):
    kid: str | None
    family: str  # "RSA" or "EC"
    alg: str | None  # the JWK's "alg", when it names one
    key: Any  # a cryptography public key


@dataclass(frozen=True)
class Jwks:
    """The verification keys of a JWKS document (RFC 7517): only signature keys of RSA or EC type."""

    keys: tuple[_Key, ...] = field(default=())

    @classmethod
    def from_json(cls, document: str | bytes) -> Jwks:
        """The usable keys of a JWKS document; raises ``ValueError`` when it is no JWKS at all. Keys of other types
        (``oct``: shared secrets), for encryption, or that do not parse are left out."""
        try:
            raw = json.loads(document)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a JWKS document: {exc}") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("keys"), list):
            raise ValueError("not a JWKS document: no \"keys\" list")
        keys = []
        for item in raw["keys"]:
            if not isinstance(item, dict) or item.get("kty") not in ("RSA", "EC") or item.get("use", "sig") != "sig":
                continue
            kid, alg = item.get("kid"), item.get("alg")
            try:
                public = jwt.PyJWK.from_dict(item).key
            except (PyJWKError, PyJWKSetError, InvalidKeyError, ValueError, TypeError, KeyError):
                continue
            if hasattr(public, "private_bytes"):  # a private key published by mistake: verify with its public half
                public = public.public_key()
            keys.append(_Key(kid if isinstance(kid, str) else None, item["kty"], alg if isinstance(alg, str) else None,
                             public))
        return cls(tuple(keys))

    def key_for(self, kid: str | None, alg: str) -> Any:
        """The public key verifying a token with this header: by ``kid``, else the one key usable for ``alg``."""
        family = "EC" if alg.startswith("ES") else "RSA"
        usable = [k for k in self.keys if k.family == family and k.alg in (None, alg)]
        if kid is not None:
            return next((k.key for k in usable if k.kid == kid), None)
        return usable[0].key if len(usable) == 1 else None


class _Refused(Exception):
    """A token that is not valid; the message is for the log."""


def parse_initial_response(message: bytes) -> tuple[str, str, dict[str, str]]:
    """(token, authorization id or "", extensions) of the client's message; raises :class:`OAuthBearerError`."""
    if len(message) > _MAX_MESSAGE:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: too long")
    try:
        text = message.decode("ascii")
    except UnicodeDecodeError:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message") from None
    match = _MESSAGE.fullmatch(text)
    if match is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message")
    pairs: dict[str, str] = {}
    for item in match["pairs"].split("\x01")[:-1]:
        key, _, value = item.partition("=")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: 'auth' not specified")
    bearer = _AUTH.fullmatch(auth)
    if bearer is None:
        raise OAuthBearerError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if bearer["scheme"].lower() != "bearer":
        raise OAuthBearerError("Invalid scheme in OAUTHBEARER client first message")
    authzid = (match["authzid"] or "").replace("=2C", ",").replace("=3D", "=")
    return bearer["token"], authzid, pairs


def _seconds(claims: Mapping[str, Any], name: str, required: bool) -> int | None:
    """A NumericDate claim in whole seconds, within ``0..MAX_NUMERIC_DATE`` (None: absent and not required)."""
    value = claims.get(name)
    if value is None:
        if required:
            raise _Refused(f"the token has no {name} claim")
        return None
    finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if isinstance(value, bool) or not finite:
        raise _Refused(f"the token's {name} claim is not a number")
    if value < 0:
        raise _Refused(f"the token's {name} claim is negative")
    if value > MAX_NUMERIC_DATE:
        raise _Refused(f"the token's {name} claim is out of range (at most {MAX_NUMERIC_DATE} seconds)")
    return int(value)


def _scopes(claims: Mapping[str, Any], name: str) -> frozenset[str]:
    raw = claims.get(name)
    items: Sequence[Any] = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    scopes: set[str] = set()
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise _Refused(f"the token's {name} claim holds an empty or non-string scope")
        if item.strip() in scopes:
            raise _Refused(f"the token's {name} claim holds {item.strip()!r} twice")
        scopes.add(item.strip())
    return frozenset(scopes)


def validate_token(token: str, keys: Jwks, settings: TokenSettings, now_ms: int) -> ValidToken:
    """The identity a signed JWT establishes (see the module docstring); raises :class:`OAuthBearerError` with the
    reason (never the token) when it is not valid."""
    try:
        return _validate(token, keys, settings, now_ms)
    except _Refused as exc:
        raise OAuthBearerError(f"invalid token: {exc}") from None


def _validate(token: str, keys: Jwks, settings: TokenSettings, now_ms: int) -> ValidToken:
    try:
        header = jwt.get_unverified_header(token)
    except InvalidTokenError as exc:
        raise _Refused(f"malformed JWT ({type(exc).__name__})") from None
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in ALGORITHMS:
        raise _Refused(f"signature algorithm {str(alg)[:20]!r} is not accepted (only {', '.join(sorted(ALGORITHMS))})")
    key = keys.key_for(kid, alg)
    if key is None:
        raise _Refused(f"no key of the JWKS verifies {alg} with kid {str(kid)[:64]!r}")
    try:
        claims = jwt.decode(
            token, key=key, algorithms=[alg], audience=list(settings.expected_audience) or None,
            issuer=settings.expected_issuer or None,
            options={"verify_signature": True, "verify_exp": False, "verify_nbf": False, "verify_iat": False,
                     "verify_aud": True, "verify_iss": settings.expected_issuer is not None},
        )
    except InvalidTokenError as exc:  # signature, issuer, audience; the clock is checked below with now_ms
        raise _Refused(f"{type(exc).__name__}: {exc}") from None
    skew_ms = settings.clock_skew_seconds * 1000
    exp = _seconds(claims, "exp", required=True)
    iat = _seconds(claims, "iat", required=True)
    nbf = _seconds(claims, "nbf", required=False)
    assert exp is not None and iat is not None
    if now_ms >= exp * 1000 + skew_ms:
        raise _Refused("the token has expired")
    if nbf is not None and now_ms + skew_ms < nbf * 1000:
        raise _Refused("the token is not valid yet (nbf)")
    subject = claims.get(settings.sub_claim_name)
    if not isinstance(subject, str) or not subject.strip():
        raise _Refused(f"the token's {settings.sub_claim_name} claim is missing or blank")
    subject = subject.strip()
    return ValidToken(f"User:{subject}", subject, _scopes(claims, settings.scope_claim_name), exp * 1000, iat * 1000)


class OAuthBearerExchange:
    """One OAUTHBEARER authentication, driven by :meth:`step` with each client message (SaslAuthenticate bytes).

    * A valid token: ``Step(b"", True, "User:<sub>")``; :attr:`token` then holds its expiry (KIP-368) and scopes,
      :attr:`extensions` the client's SASL extensions.
    * An invalid token: ``Step(INVALID_TOKEN, False, None)`` and :attr:`reason` says why (for the log); the client's
      next message (``\\x01``) then raises :class:`OAuthBearerError` whose message is that JSON.
    * A malformed message, an authorization id other than the subject, or any message after the exchange is over:
      raises :class:`OAuthBearerError`.
    """

    def __init__(self, keys: Jwks, settings: TokenSettings, now_ms: int) -> None:
        self._keys = keys
        self._settings = settings
        self._now_ms = now_ms
        self._refused = False
        self._over = False
        self.token: ValidToken | None = None
        self.extensions: dict[str, str] = {}
        self.reason: str | None = None

    def step(self, message: bytes) -> Step:
        if self._over:
            raise OAuthBearerError("the OAUTHBEARER exchange is over")
        if self._refused:
            self._over = True
            raise OAuthBearerError(INVALID_TOKEN.decode() if message == _CONTROL_A else
                                   "Invalid OAUTHBEARER client response after an error")
        token, authzid, extensions = parse_initial_response(message)
        try:
            valid = validate_token(token, self._keys, self._settings, self._now_ms)
        except OAuthBearerError as exc:
            self._refused = True
            self.reason = str(exc)
            return Step(INVALID_TOKEN, False, None)
        self._over = True
        if authzid and authzid != valid.subject:
            raise OAuthBearerError("Authentication failed: the authorization id is not the token's principal name")
        self.token = valid
        self.extensions = extensions
        return Step(b"", True, valid.principal)
