"""HTTP Basic authentication (RFC 7617) against walgate's users, as taosAdapter does for TDengine's REST API.

Every route except ``/healthz`` and ``/readyz`` needs ``Authorization: Basic base64(user:password)`` with the
password of a user of the store (:mod:`walgate.storage.users`, the same users SASL authenticates). A request
without valid credentials gets 401 with ``WWW-Authenticate: Basic realm="walgate"`` (a browser then asks for them
and sends them with every same-origin request, the console's ``fetch()`` calls included) and a TDengine-style JSON
body; the answer never tells whether the user exists. A handled request carries its principal in
``request[walgate.gateway.http_api.PRINCIPAL]`` (``User:name``), for authorization.

Failed logins are slowed down per (peer address, user name), a *pair*:

* the attempts of one pair are checked one at a time, in order of arrival (an :class:`asyncio.Lock` each): a
  pair's attempt is checked only after the attempts before it have been checked and counted, so concurrent guesses
  queue instead of all running after one shared wait;
* after ``n`` consecutive failures of a pair, its next attempt waits ``min(0.1 * 2**(n-1), 5)`` seconds before it
  is checked (``asyncio.sleep``: the event loop runs on); a success forgets the pair;
* at most ``_MAX_TRACKED`` pairs with failures are remembered; to make room, the one with the fewest failures (the
  least recently failed among equals) is forgotten, never a pair with an attempt under way. Forgetting a pair under
  attack (many failures) therefore needs ``_MAX_TRACKED`` other pairs with at least as many failures, each of them
  slowed down the same way.

Passwords are checked by :class:`~walgate.gateway.passwords.PasswordChecker` (PBKDF2 off the event loop, verified
passwords remembered).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from aiohttp import web

from walgate.gateway.passwords import PasswordChecker
from walgate.security.principals import user_principal

__all__ = ["BasicAuth", "UNAUTHENTICATED_PATHS", "AUTH_FAILURE"]

UNAUTHENTICATED_PATHS = frozenset({"/healthz", "/readyz"})
AUTH_FAILURE = 0x0357  # TDengine's TSDB_CODE_MND_AUTH_FAILURE ("Authentication failure")
_MAX_TRACKED = 10_000
_MAX_DELAY = 5.0

_Pair = tuple[str, str]  # (peer address, user name)


@dataclass
class _Attempts:
    """One pair's state: consecutive failures, when its next attempt may be checked, its queue of attempts."""

    failures: int = 0
    next_try: float = 0.0  # time.monotonic()
    in_flight: int = 0  # attempts queued or being checked
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)


class BasicAuth:
    """Checks requests' Basic credentials (module docstring); one per application, used on the event loop.

    Invariant: ``_pairs`` holds every pair with failures or an attempt under way; ``_idle[n]`` holds, oldest failure
    first, exactly the pairs of ``_pairs`` with ``n > 0`` failures and no attempt under way (the ones that may be
    forgotten)."""

    def __init__(self, passwords: PasswordChecker) -> None:
        self._passwords = passwords
        self._pairs: dict[_Pair, _Attempts] = {}
        self._idle: dict[int, OrderedDict[_Pair, None]] = {}

    async def is_user(self, principal: str) -> bool:
        """Whether ``principal`` is ``User:name`` of a user of the store (one another node vouches for)."""
        kind, _, user = principal.partition(":")
        return kind == "User" and bool(user) and await self._passwords.exists(user)

    async def principal(self, request: web.Request) -> str | None:
        """``User:name`` of the request's valid credentials, else None (after the failure's delay)."""
        parsed = _parse(request.headers.get("Authorization", ""))
        if parsed is None:
            return None
        user, password = parsed
        pair = (request.remote or "", user)
        attempts = self._pairs.get(pair)
        if attempts is None:
            attempts = self._pairs[pair] = _Attempts()
        else:
            self._set_busy(pair, attempts)
        attempts.in_flight += 1
        try:
            async with attempts.turn:
                wait = attempts.next_try - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if await self._passwords.check(user, password):
                    attempts.failures, attempts.next_try = 0, 0.0
                    return user_principal(user)
                attempts.failures += 1
                attempts.next_try = time.monotonic() + min(0.1 * 2 ** (attempts.failures - 1), _MAX_DELAY)
                return None
        finally:
            attempts.in_flight -= 1
            if attempts.in_flight == 0:
                self._set_idle(pair, attempts)

    def _set_busy(self, pair: _Pair, attempts: _Attempts) -> None:
        """``pair`` has an attempt under way: it may not be forgotten."""
        if attempts.in_flight == 0 and attempts.failures:
            bucket = self._idle[attempts.failures]
            del bucket[pair]
            if not bucket:
                del self._idle[attempts.failures]

    def _set_idle(self, pair: _Pair, attempts: _Attempts) -> None:
        """``pair``'s last attempt is done: forget it after a success, else make it forgettable, and keep at most
        ``_MAX_TRACKED`` pairs with failures by forgetting the least failed ones."""
        if not attempts.failures:
            del self._pairs[pair]
            return
        self._idle.setdefault(attempts.failures, OrderedDict())[pair] = None
        while len(self._pairs) > _MAX_TRACKED and self._idle:
            fewest = min(self._idle)
            bucket = self._idle[fewest]
            forgotten, _ = bucket.popitem(last=False)
            if not bucket:
                del self._idle[fewest]
            del self._pairs[forgotten]


def _parse(header: str) -> tuple[str, str] | None:
    """(user, password) of a ``Basic`` Authorization header (None: absent or malformed)."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        text = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = text.partition(":")
    if not sep or not user:
        return None
    return user, password
