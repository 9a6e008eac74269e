"""SASL authentication of one Kafka connection (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER; KIP-368
re-authentication).

A connection on a SASL listener (SASL_PLAINTEXT, SASL_SSL) carries one :class:`Authentication`, made by the connection
task and given to the SaslHandshake and SaslAuthenticate handlers in their request's
:class:`~walgate.gateway.kafka.context.RequestContext` (other listeners: see "Cluster nodes" below). Its states, as Kafka's
``SaslServerAuthenticator`` runs them:

* **handshake**: before a successful SaslHandshake, only ApiVersions and SaslHandshake are accepted;
* **authenticate**: after it, SaslAuthenticate carries the mechanism's tokens (PLAIN: one round; SCRAM: two;
  OAUTHBEARER: one, or two when the token is refused), or,
  after a v0 SaslHandshake, the tokens come as bare size-prefixed frames without a Kafka header
  (:attr:`Authentication.raw`);
* **authenticated**: :attr:`Authentication.principal` is ``User:name``, the principal of the connection's next
  requests, and every API is accepted,
  until the session expires (``connections.max.reauth.ms`` after the authentication, 0: never; with OAUTHBEARER
  at the latest when the token expires, even if that is now, as Kafka's ``SaslServerAuthenticator``). The client
  re-authenticates in the middle of the connection with a new SaslHandshake + SaslAuthenticate (neither the
  mechanism nor the principal may change); an expired session accepts nothing else, and the connection is closed
  on any other request.

A failure (bad mechanism, malformed token, wrong password or unknown user: one message for both, so an answer never
tells whether a user exists) is answered :data:`FAILED_AUTHENTICATION_DELAY` after the token that failed arrived
(:meth:`Authentication.pause_after_failure`), then the connection is closed (:attr:`Authentication.close`), as Kafka
does; counting from the token's arrival rather than from the failure (Kafka's way) answers every failure equally
late whatever work its check did (a PBKDF2 of a stored or mock credential), as long as that took less than the
delay. An unknown user's SCRAM answers and PLAIN work mirror a real user's credential
(:meth:`walgate.storage.users.Users.answer_credential`). A dropped user or a changed password ends existing sessions only at
their expiry. PLAIN passwords are checked by :class:`~walgate.gateway.passwords.PasswordChecker`; SCRAM credentials
are read on the storage thread. OAUTHBEARER tokens are signed JWTs checked against the listener's JWKS
(:func:`walgate.gateway.jwks.oauthbearer_exchanges`, one ``stat`` of the JWKS file per authentication); a refused
token is answered as Kafka's ``OAuthBearerSaslServer`` does (RFC 7628): the challenge ``{"status":"invalid_token"}``,
then, after the client's ``%x01``, SASL_AUTHENTICATION_FAILED with that JSON as message. The principal is
``User:<sub>``; the subject needs no user in walgate's store.

Cluster nodes (docs/cluster.md "Transaction coordinators"): a user name of a node's form (``walgate-node-<id>``,
:func:`walgate.security.node_token.node_of_user`) authenticates only with SCRAM-SHA-256 and the credential derived from
the cluster's node token (:func:`~walgate.security.node_token.node_credential`), on every listener and whatever
``sasl.enabled.mechanisms`` says, never with PLAIN, OAUTHBEARER or a password of the user store; the connection's
:attr:`Authentication.node` is then that node's id, which alone lets it make the requests only nodes make
(:mod:`walgate.gateway.kafka.node_auth`). A listener without SASL (PLAINTEXT, SSL) gives each connection a node-only
:class:`Authentication` (``settings`` None): every request is accepted as the listener's principal, as before, and a
SaslHandshake for SCRAM-SHA-256 starts an exchange only a node passes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.passwords import PasswordChecker
from walgate.security.node_token import NODE_MECHANISM, node_credential, node_of_user
from walgate.security.oauthbearer import OAuthBearerError, OAuthBearerExchange
from walgate.security.plain import PlainError, parse_plain
from walgate.security.principals import user_principal
from walgate.security.scram import MECHANISMS as SCRAM_MECHANISMS
from walgate.security.scram import ScramCredential, ScramError, ScramExchange
from walgate.storage.engine import Engine

__all__ = ["MECHANISMS", "AUTHENTICATION_FAILED", "Authentication", "FAILED_AUTHENTICATION_DELAY",
           "OAUTHBEARER", "SaslFailed", "SaslSettings"]

log = logging.getLogger("walgate.kafka.sasl")

OAUTHBEARER = "OAUTHBEARER"
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, OAUTHBEARER)
"""The SASL mechanisms walgate implements (``sasl.enabled.mechanisms`` picks among them)."""
AUTHENTICATION_FAILED = "Authentication failed: Invalid username or password"
FAILED_AUTHENTICATION_DELAY = 0.1
"""Seconds after its token a failed authentication is answered (Kafka's ``connection.failed.authentication.delay.ms``,
100): a client retrying a wrong password in a loop costs little."""
_SASL_HANDSHAKE, _SASL_AUTHENTICATE, _API_VERSIONS = 17, 36, 18


class SaslFailed(Exception):
    """The exchange failed; the message (no secret, never whether the user exists) goes to the client."""


@dataclass(frozen=True)
class SaslSettings:
    """A SASL listener's settings: ``sasl.enabled.mechanisms`` and ``connections.max.reauth.ms`` (0: sessions never
    expire), the node's password checker, and OAUTHBEARER's ``new(now_ms)`` exchange (required when it is enabled)."""

    passwords: PasswordChecker  # PLAIN's password check
    mechanisms: tuple[str, ...] = ("PLAIN", *SCRAM_MECHANISMS)
    reauth_ms: int = 0
    oauthbearer: Callable[[int], OAuthBearerExchange] | None = None  # walgate.gateway.jwks.oauthbearer_exchanges

    def __post_init__(self) -> None:
        unknown = [m for m in self.mechanisms if m not in MECHANISMS]
        if unknown or not self.mechanisms:
            raise ValueError(f"sasl.enabled.mechanisms: {', '.join(unknown) or 'none'}: walgate implements "
                             f"{', '.join(MECHANISMS)}")
        if OAUTHBEARER in self.mechanisms and self.oauthbearer is None:
            raise ValueError("sasl.enabled.mechanisms: OAUTHBEARER needs sasl.oauthbearer.jwks.endpoint.url")


def _credential(engine: Engine, user: str, mechanism: str) -> tuple[ScramCredential, bool]:
    return engine.users.answer_credential(user, mechanism)


def _node_credential(broker: Broker, user: str, mechanism: str) -> tuple[ScramCredential, bool]:
    """The credential node user ``user`` authenticates with: from the cluster's current node token (every node reads
    it every :data:`walgate.gateway.node_tokens.REFRESH_S`; the one before a rotation is not taken: a node still
    using it fails and tries again); a single node, or the nodes' mechanism not asked, knows none."""
    member = broker.cluster
    if member is None or mechanism != NODE_MECHANISM:
        raise ScramError("invalid credentials")
    return _derived(member.tokens.signing(), user), True


@functools.lru_cache(maxsize=64)
def _derived(token: str, user: str) -> ScramCredential:
    return node_credential(token, user)  # a PBKDF2: once per token and node


class Authentication:
    """The SASL state of one connection from ``peer`` (module docstring)."""

    def __init__(self, settings: SaslSettings | None, peer: str) -> None:
        """``settings``: the SASL listener's; None on a listener without SASL (only nodes authenticate)."""
        self.settings = settings
        self.peer = peer
        self.node: int | None = None  # the cluster node authenticated as (module docstring), else None
        self.mechanism: str | None = None  # chosen by the last SaslHandshake, until its exchange ends
        self.raw = False  # v0 SaslHandshake: the next frames are bare tokens
        self.user: str | None = None  # authenticated as (kept through re-authentication)
        self.expires: float | None = None  # time.monotonic() the session ends (None: never, or not authenticated)
        self.close = False  # the answer being sent is the last: close the connection after it
        self.failure = ""  # why the exchange failed (what the client was told)
        self._scram: ScramExchange | None = None
        self._oauthbearer: OAuthBearerExchange | None = None
        self._lifetime_ms = 0  # the session lifetime announced by the last successful authentication
        self._session_mechanism: str | None = None  # the mechanism of the last successful authentication
        self._wrong_mechanism = False  # this re-authentication asked for another mechanism: its first token fails
        self._received = 0.0  # time.monotonic() the last token arrived

    def allows(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may be handled now (False: close the connection)."""
        if api_key == _SASL_HANDSHAKE:
            return self.mechanism is None
        if api_key == _SASL_AUTHENTICATE:  # without SASL and no exchange: answered ILLEGAL_SASL_STATE, as Kafka
            return not self.raw if self.mechanism is not None else self.settings is None
        if self.mechanism is not None:
            return False  # an exchange is under way: only its tokens
        if self.user is None:
            return api_key == _API_VERSIONS or self.settings is None
        return not self.expired()

    @property
    def principal(self) -> str | None:
        """``User:name`` once the connection has authenticated (kept through re-authentication), else None."""
        return None if self.user is None else user_principal(self.user)

    def expired(self) -> bool:
        return self.expires is not None and time.monotonic() >= self.expires

    def why_refused(self, api_key: int) -> str:
        """The log line's reason for refusing ``api_key`` (after :meth:`allows` said no)."""
        if self.user is not None and self.expired():
            return f"api key {api_key}: the session of {self.user} expired and it did not re-authenticate"
        if self.mechanism is not None:
            return f"api key {api_key} during a SASL {self.mechanism} exchange"
        return f"api key {api_key} before SASL authentication"

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """The mechanisms SaslHandshake answers as enabled (a listener without SASL: the nodes' only)."""
        return (NODE_MECHANISM,) if self.settings is None else self.settings.mechanisms

    def handshake(self, mechanism: str, version: int) -> bool:
        """A SaslHandshake for ``mechanism``: True when it is enabled (the exchange starts), else False (the answer
        is UNSUPPORTED_SASL_MECHANISM and the connection closes). A re-authentication with another mechanism than
        the session's is accepted here and fails at its first token, as Kafka's ``SaslServerAuthenticator`` does (a
        token's subject is no password user of the same name)."""
        if mechanism not in self.mechanisms and mechanism != NODE_MECHANISM:
            self.close = True
            return False
        self._wrong_mechanism = self.user is not None and mechanism != self._session_mechanism
        self.mechanism = mechanism
        self.raw = version == 0
        self._scram = ScramExchange(mechanism) if mechanism in SCRAM_MECHANISMS else None
        self._oauthbearer = None
        return True

    @property
    def session_lifetime_ms(self) -> int:
        """The session lifetime SaslAuthenticate (v1+) announces after a successful exchange (0: none):
        ``connections.max.reauth.ms``, or with OAUTHBEARER the smaller of it (when set) and the token's remaining
        life."""
        return self._lifetime_ms

    async def step(self, broker: Broker, token: bytes) -> tuple[bytes, bool]:
        """One token of the exchange: (the answer token, whether the exchange is complete). Raises
        :class:`SaslFailed` (the connection closes after the answer, :meth:`pause_after_failure` after the token)."""
        self._received = time.monotonic()
        try:
            if self._wrong_mechanism:
                raise SaslFailed(f"SASL mechanism '{self.mechanism}' requested by client is not supported for "
                                 f"re-authentication of mechanism '{self._session_mechanism}'")
            if self.mechanism == OAUTHBEARER:
                answer, done = self._oauthbearer_step(token)
            elif self._scram is None:
                answer, done = await self._plain(token), True
            elif not self._scram.user:
                user = self._scram.client_first(token)
                if node_of_user(user) is not None:
                    credential, known = _node_credential(broker, user, self._scram.mechanism)
                elif self._scram.mechanism not in self.mechanisms:  # the nodes' mechanism, not enabled for users
                    raise ScramError("invalid credentials")
                else:
                    credential, known = await broker.call(_credential, user, self._scram.mechanism)
                answer, done = self._scram.server_first(credential, known=known), False
            else:
                answer, done, user = self._scram.client_final(token), True, self._scram.user
                self._authenticated(user)
                self.node = node_of_user(user)  # a node user authenticates only with the node token
        except SaslFailed as exc:
            self._fail(str(exc))
            raise
        except OAuthBearerError as exc:  # its messages name no secret (walgate.security.oauthbearer)
            self._fail(str(exc))
            raise SaslFailed(str(exc)) from None
        except (PlainError, ScramError) as exc:
            reason = str(exc)
            message = AUTHENTICATION_FAILED if reason == "invalid credentials" else f"Authentication failed: {reason}"
            self._fail(message)
            raise SaslFailed(message) from None
        return answer, done

    async def pause_after_failure(self) -> None:
        """Wait until :data:`FAILED_AUTHENTICATION_DELAY` after the arrival of the token :meth:`step` failed on."""
        await asyncio.sleep(max(0.0, self._received + FAILED_AUTHENTICATION_DELAY - time.monotonic()))

    def _fail(self, message: str) -> None:
        self.close = True
        self.failure = message

    def _oauthbearer_step(self, message: bytes) -> tuple[bytes, bool]:
        if self._oauthbearer is None:
            # a SASL listener's (SaslSettings: enabled only with a JWKS)
            assert self.settings is not None and self.settings.oauthbearer is not None
            self._oauthbearer = self.settings.oauthbearer(now_ms())
        step = self._oauthbearer.step(message)
        if not step.done:
            log.info("kafka %s: OAUTHBEARER token refused (%s)", self.peer, self._oauthbearer.reason)
            return step.challenge, False
        valid = self._oauthbearer.token
        assert valid is not None  # set by a completed exchange
        if node_of_user(valid.subject) is not None:
            raise SaslFailed(AUTHENTICATION_FAILED)  # a node's name: only the node token authenticates it
        self._authenticated(valid.subject, valid.expiry_ms)
        return step.challenge, True

    async def _plain(self, token: bytes) -> bytes:
        user, password = parse_plain(token)
        assert self.settings is not None  # PLAIN: a SASL listener's mechanism
        if node_of_user(user) is not None or not await self.settings.passwords.check(user, password):
            raise SaslFailed(AUTHENTICATION_FAILED)
        self._authenticated(user)
        return b""

    def _authenticated(self, user: str, credential_expiry_ms: int | None = None) -> None:
        if self.user is not None and user != self.user:
            raise SaslFailed("Authentication failed: cannot change principals during re-authentication")
        log.info("kafka %s: %sauthenticated as User:%s with %s", self.peer, "re-" if self.user else "", user,
                 self.mechanism)
        self.user = user
        self._session_mechanism = self.mechanism
        self.mechanism = None
        self.raw = False
        self._scram = None
        self._oauthbearer = None
        reauth = 0 if self.settings is None else self.settings.reauth_ms
        if credential_expiry_ms is None:
            lifetime = reauth
        else:  # Kafka's SaslServerAuthenticator: the token bounds the session, even to 0 (expired at once)
            remaining = max(0, credential_expiry_ms - now_ms())
            lifetime = min(remaining, reauth) if reauth else remaining
        self._lifetime_ms = lifetime
        bounded = credential_expiry_ms is not None or reauth > 0
        self.expires = time.monotonic() + lifetime / 1000 if bounded else None

