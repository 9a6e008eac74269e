"""HTTP Basic authentication (RFC 7617) against walgate's users, as taosAdapter does for TDengine's REST API.

Every route except ``/healthz`` and ``/readyz`` needs ``Authorization: Basic base64(user:password)`` with the
password of a user of the store (:mod:`walgate.storage.users`, the same users SASL authenticates). A request
without valid credentials gets 401 with ``WWW-Authenticate: Basic realm="walgate"`` (a browser then asks for them
and sends them with every same-origin request, the console's ``fetch()`` calls included) and a TDengine-style JSON
body; the answer never tells whether the user exists. A handled request carries its principal in
``request[walgate.gateway.http_api.PRINCIPAL]`` (``User:name``), for authorization.

Failed logins are slowed down: after ``n`` consecutive failures of one (peer address, user name), the next attempt
of that pair waits ``min(0.1 * 2**(n-1), 5)`` seconds before it is checked (``asyncio.sleep``: the event loop runs
on); a success forgets the pair. At most ``_MAX_TRACKED`` pairs are remembered (the oldest forgotten first).
Passwords are checked by :class:`~walgate.gateway.passwords.PasswordChecker` (PBKDF2 off the event loop, verified
passwords remembered).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections import OrderedDict

from aiohttp import web

from walgate.gateway.passwords import PasswordChecker
from walgate.security.principals import user_principal

__all__ = ["BasicAuth", "UNAUTHENTICATED_PATHS", "AUTH_FAILURE"]

UNAUTHENTICATED_PATHS = frozenset({"/healthz", "/readyz"})
AUTH_FAILURE = 0x0357  # TDengine's TSDB_CODE_MND_AUTH_FAILURE ("Authentication failure")
_MAX_TRACKED = 10_000
_MAX_DELAY = 5.0


class BasicAuth:
    """Checks requests' Basic credentials (module docstring); one per application, used on the event loop."""

    def __init__(self, passwords: PasswordChecker) -> None:
        self._passwords = passwords
        self._failures: OrderedDict[tuple[str, str], tuple[int, float]] = OrderedDict()  # -> (count, next try)
    async def principal(self, request: web.Request) -> str | None:
        """``User:name`` of the request's valid credentials, else None (after the failure's delay)."""
        parsed = _parse(request.headers.get("Authorization", ""))
        if parsed is None:
            return None
        user, password = parsed
        pair = (request.remote or "", user)
        failed = self._failures.get(pair)
        if failed is not None:
            wait = failed[1] - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        if await self._passwords.check(user, password):
            self._failures.pop(pair, None)
            return user_principal(user)
        count = (failed[0] if failed else 0) + 1
        self._failures[pair] = (count, time.monotonic() + min(0.1 * 2 ** (count - 1), _MAX_DELAY))
        self._failures.move_to_end(pair)
        while len(self._failures) > _MAX_TRACKED:
            self._failures.popitem(last=False)
        return None


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
