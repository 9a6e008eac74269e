"""SASL authentication of one Kafka connection (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; KIP-368 re-authentication).

A connection on a SASL listener (SASL_PLAINTEXT, SASL_SSL) carries one :class:`Authentication` (the ContextVar
:data:`AUTHENTICATION`, set by the connection task; None on other listeners). Its states, as Kafka's
``SaslServerAuthenticator`` runs them:

* **handshake**: before a successful SaslHandshake, only ApiVersions and SaslHandshake are accepted;
* **authenticate**: after it, SaslAuthenticate carries the mechanism's tokens (PLAIN: one round; SCRAM: two), or,
  after a v0 SaslHandshake, the tokens come as bare size-prefixed frames without a Kafka header
  (:attr:`Authentication.raw`);
* **authenticated**: :data:`~walgate.gateway.kafka.broker.PRINCIPAL` is ``User:name`` and every API is accepted,
  until the session expires (``connections.max.reauth.ms`` after the authentication; 0: never). The client
  re-authenticates in the middle of the connection with a new SaslHandshake + SaslAuthenticate (the principal may
  not change); an expired session accepts nothing else, and the connection is closed on any other request.

A failure (bad mechanism, malformed token, wrong password or unknown user: one message for both, so an answer never
tells whether a user exists) is answered :data:`FAILED_AUTHENTICATION_DELAY` after it, then the connection is closed
(:attr:`Authentication.close`), as Kafka does. A dropped user or a changed password ends existing sessions only at
their expiry. PLAIN passwords are checked by :class:`~walgate.gateway.passwords.PasswordChecker`; SCRAM credentials
are read on the storage thread.
"""

from __future__ import annotations

import contextvars
import logging
import time
from dataclasses import dataclass

from walgate.gateway.kafka.broker import PEER, PRINCIPAL, Broker
from walgate.gateway.passwords import PasswordChecker
from walgate.security.plain import PlainError, parse_plain
from walgate.security.principals import user_principal
from walgate.security.scram import MECHANISMS as SCRAM_MECHANISMS
from walgate.security.scram import ScramCredential, ScramError, ScramExchange
from walgate.storage.engine import Engine

__all__ = ["AUTHENTICATION", "MECHANISMS", "AUTHENTICATION_FAILED", "Authentication", "FAILED_AUTHENTICATION_DELAY",
           "SaslFailed", "SaslSettings"]

log = logging.getLogger("walgate.kafka.sasl")

MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
"""The SASL mechanisms walgate implements (``sasl.enabled.mechanisms`` picks among them)."""
AUTHENTICATION_FAILED = "Authentication failed: Invalid username or password"
FAILED_AUTHENTICATION_DELAY = 0.1
"""Seconds a failed authentication's answer waits (Kafka's ``connection.failed.authentication.delay.ms``, 100): a
client retrying a wrong password in a loop costs little."""
_SASL_HANDSHAKE, _SASL_AUTHENTICATE, _API_VERSIONS = 17, 36, 18


class SaslFailed(Exception):
    """The exchange failed; the message (no secret, never whether the user exists) goes to the client."""


@dataclass(frozen=True)
class SaslSettings:
    """A SASL listener's settings: ``sasl.enabled.mechanisms`` and ``connections.max.reauth.ms`` (0: sessions never
    expire), and the node's password checker."""

    passwords: PasswordChecker  # PLAIN's password check
    mechanisms: tuple[str, ...] = MECHANISMS
    reauth_ms: int = 0

    def __post_init__(self) -> None:
        unknown = [m for m in self.mechanisms if m not in MECHANISMS]
        if unknown or not self.mechanisms:
            raise ValueError(f"sasl.enabled.mechanisms: {', '.join(unknown) or 'none'}: walgate implements "
                             f"{', '.join(MECHANISMS)}")


def _credential(engine: Engine, user: str, mechanism: str) -> ScramCredential | None:
    return engine.users.credential(user, mechanism)


class Authentication:
    """The SASL state of one connection (module docstring)."""

    def __init__(self, settings: SaslSettings) -> None:
        self.settings = settings
        self.mechanism: str | None = None  # chosen by the last SaslHandshake, until its exchange ends
        self.raw = False  # v0 SaslHandshake: the next frames are bare tokens
        self.user: str | None = None  # authenticated as (kept through re-authentication)
        self.expires: float | None = None  # time.monotonic() the session ends (None: never, or not authenticated)
        self.close = False  # the answer being sent is the last: close the connection after it
        self.failure = ""  # why the exchange failed (what the client was told)
        self._scram: ScramExchange | None = None

    def allows(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may be handled now (False: close the connection)."""
        if api_key == _SASL_HANDSHAKE:
            return self.mechanism is None
        if api_key == _SASL_AUTHENTICATE:
            return self.mechanism is not None and not self.raw
        if self.mechanism is not None:
            return False  # an exchange is under way: only its tokens
        if self.user is None:
            return api_key == _API_VERSIONS
        return not self.expired()

    def expired(self) -> bool:
        return self.expires is not None and time.monotonic() >= self.expires

    def why_refused(self, api_key: int) -> str:
        """The log line's reason for refusing ``api_key`` (after :meth:`allows` said no)."""
        if self.user is not None and self.expired():
            return f"api key {api_key}: the session of {self.user} expired and it did not re-authenticate"
        if self.mechanism is not None:
            return f"api key {api_key} during a SASL {self.mechanism} exchange"
        return f"api key {api_key} before SASL authentication"

    def handshake(self, mechanism: str, version: int) -> bool:
        """A SaslHandshake for ``mechanism``: True when it is enabled (the exchange starts), else False (the answer
        is UNSUPPORTED_SASL_MECHANISM and the connection closes)."""
        if mechanism not in self.settings.mechanisms:
            self.close = True
            return False
        self.mechanism = mechanism
        self.raw = version == 0
        self._scram = ScramExchange(mechanism) if mechanism in SCRAM_MECHANISMS else None
        return True

    @property
    def session_lifetime_ms(self) -> int:
        """The session lifetime SaslAuthenticate (v1+) announces: ``connections.max.reauth.ms`` (0: none)."""
        return self.settings.reauth_ms

    async def step(self, broker: Broker, token: bytes) -> tuple[bytes, bool]:
        """One token of the exchange: (the answer token, whether the exchange is complete). Raises
        :class:`SaslFailed` (the connection closes after the answer)."""
        try:
            if self._scram is None:
                answer, done = await self._plain(token), True
            elif not self._scram.user:
                user = self._scram.client_first(token)
                credential = await broker.call(_credential, user, self._scram.mechanism)
                answer, done = self._scram.server_first(credential), False
            else:
                answer, done = self._scram.client_final(token), True
                self._authenticated(self._scram.user)
        except SaslFailed as exc:
            self._fail(str(exc))
            raise
        except (PlainError, ScramError) as exc:
            reason = str(exc)
            message = AUTHENTICATION_FAILED if reason == "invalid credentials" else f"Authentication failed: {reason}"
            self._fail(message)
            raise SaslFailed(message) from None
        return answer, done

    def _fail(self, message: str) -> None:
        self.close = True
        self.failure = message

    async def _plain(self, token: bytes) -> bytes:
        user, password = parse_plain(token)
        if not await self.settings.passwords.check(user, password):
            raise SaslFailed(AUTHENTICATION_FAILED)
        self._authenticated(user)
        return b""

    def _authenticated(self, user: str) -> None:
        if self.user is not None and user != self.user:
            raise SaslFailed("Authentication failed: cannot change principals during re-authentication")
        log.info("kafka %s: %sauthenticated as User:%s with %s", PEER.get(), "re-" if self.user else "", user,
                 self.mechanism)
        self.user = user
        self.mechanism = None
        self.raw = False
        self._scram = None
        reauth = self.settings.reauth_ms
        self.expires = time.monotonic() + reauth / 1000 if reauth else None
        PRINCIPAL.set(user_principal(user))


AUTHENTICATION: contextvars.ContextVar[Authentication | None] = contextvars.ContextVar(
    "walgate_kafka_authentication", default=None)
"""The SASL state of the connection the current request came on (None: not a SASL listener)."""
