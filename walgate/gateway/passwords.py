"""Checking a user's password (SASL PLAIN, HTTP Basic) against the user store, off the event loop.

walgate never stores passwords: a password is right when the SCRAM StoredKey recomputed from it with the stored salt
and iterations (PBKDF2, :func:`walgate.security.scram.verify_password`) equals the stored one. The PBKDF2 runs on a
worker thread (``asyncio.to_thread``), never on the event loop. An unknown user costs the same work: the PBKDF2 of
its mock credential (:meth:`walgate.storage.users.Users.answer_credential`), whose hash and iterations are those of
a real user's, the same one for a name at every attempt, so timing does not tell whether a user exists. A verified (user, password) is remembered as an HMAC under a per-process random key,
with the StoredKey it matched, so the same password skips the PBKDF2 until the user's credential changes (at most
``_MAX_VERIFIED`` users, the least recently verified forgotten first).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from walgate.security.scram import ScramCredential, verify_password
from walgate.storage.engine import Engine

__all__ = ["PasswordChecker", "password_credential"]

_MAX_VERIFIED = 1_000


def password_credential(engine: Engine, user: str) -> tuple[ScramCredential, bool]:
    """(the credential passwords of ``user`` are checked against, True), or (its mock one, False) for a name that
    is no user's (storage thread)."""
    return engine.users.answer_credential(user)


class PasswordChecker:
    """``await check(user, password)``, ``await exists(user)``; ``lookup(user)`` reads :func:`password_credential` on the storage thread."""

    def __init__(self, lookup: Callable[[str], Awaitable[tuple[ScramCredential, bool]]]) -> None:
        self._lookup = lookup
        self._verified: OrderedDict[str, tuple[bytes, bytes]] = OrderedDict()  # user -> (HMAC, stored key)
        self._key = secrets.token_bytes(32)

    async def exists(self, user: str) -> bool:
        """Whether ``user`` is a user of the store."""
        _, exists = await self._lookup(user)
        return exists

    async def check(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s."""
        credential, exists = await self._lookup(user)
        if not exists:
            await asyncio.to_thread(verify_password, credential, password)
            return False
        mac = hmac.new(self._key, f"{user}\0{password}".encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
        verified = self._verified.get(user)
        if verified is not None and hmac.compare_digest(verified[0], mac) and verified[1] == credential.stored_key:
            self._verified.move_to_end(user)
            return True
        if not await asyncio.to_thread(verify_password, credential, password):
            return False
        self._verified[user] = (mac, credential.stored_key)
        self._verified.move_to_end(user)
        while len(self._verified) > _MAX_VERIFIED:
            self._verified.popitem(last=False)
        return True
