"""The cluster's node token as this node knows it (the secret that signs requests between nodes:
:mod:`walgate.security.node_token`; docs/security.md "Between cluster nodes").

The token lives in etcd at ``/walgate/<cluster>/node_token``, made by the first node that starts (a transaction that
writes it only when the key does not exist, so every node reads the same one). Every node begins a read of it every
:data:`REFRESH_S` (:meth:`NodeTokens.follow`), and, before refusing a request whose signature fits none of the tokens
it knows, reads it once more, a read begun after the request arrived (such reads at most every :data:`REREAD_S`;
concurrent requests share one read). Rotation (an operator
writing a new value, ``etcdctl put``): a node that sees the value change keeps accepting the one before it for
:data:`GRACE_S` from then, so that requests signed by nodes that have not read the new one yet are accepted; after
that only the new one is. Revocation (``etcdctl del`` then ``etcdctl put``, the key made again: a new
``create_revision``): the one before is accepted no longer, with no grace; while the key is missing, the node knows
no token (it signs nothing and accepts nothing). A value that is not UTF-8 or shorter than :data:`MIN_CHARS` is
refused (logged; a starting node stops with the message): the tokens known are kept, unless the key was made again
(a revocation with a mistyped value: then no token is known, as while the key is missing).

Invariant: ``current`` is the last valid value read from etcd (None once the key was read missing, or made again
with a value refused), ``previous``
the one before it, accepted (:meth:`NodeTokens.known`) until ``GRACE_S`` after the change was seen.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from walgate.cluster.etcd import EtcdSession, tx
from walgate.cluster.model import ControlPlaneError
from walgate.security.node_token import new_token

__all__ = ["GRACE_S", "MIN_CHARS", "REFRESH_S", "REREAD_S", "NodeTokens"]

log = logging.getLogger("walgate.cluster")

REFRESH_S = 5.0
"""Every node reads the token again this often (while etcd answers)."""
GRACE_S = 15.0
"""How long after a node saw the token change (not revoked) it still accepts the one before."""
REREAD_S = 1.0
"""A signature fitting no known token makes the node read the token again, at most this often."""
MIN_CHARS = 32
"""The shortest token accepted (the one walgate makes has 43 characters: 32 random bytes)."""


class NodeTokens:
    """The node token at ``key`` of the etcd of ``session`` (module docstring); used on the event loop."""

    def __init__(self, session: EtcdSession, key: bytes, clock: Callable[[], float] = time.monotonic) -> None:
        self._session = session
        self._key = key
        self._clock = clock
        self.current: str | None = None
        self.previous: str | None = None
        self._changed_at = float("-inf")  # when ``current`` replaced ``previous``
        self._made = 0  # the key's create_revision when read (0: never read)
        self._checked_at = float("-inf")  # the last read a signature fitting no known token began
        self._reading: asyncio.Future[None] | None = None

    async def load(self) -> None:
        """Read the token, making it first when the cluster has none yet. Raises ControlPlaneError."""
        await self._session.txn([tx.Version(self._key) == 0], [tx.Put(self._key, new_token().encode())])
        await self._read()
        if self.current is None:
            raise ControlPlaneError(f"the cluster's node token ({self._key.decode()}) is not in etcd")

    def signing(self) -> str:
        """The token to sign with. Raises ControlPlaneError when the node knows none (the key was deleted)."""
        if self.current is None:
            raise ControlPlaneError(f"the cluster's node token ({self._key.decode()}) is not in etcd: an operator "
                                    "deleted it and has not put a new one")
        return self.current

    def known(self) -> tuple[str, ...]:
        """The tokens a signature is accepted with: the current one, and the one before it until :data:`GRACE_S`
        after the change was seen."""
        previous = self.previous if self._clock() - self._changed_at <= GRACE_S else None
        return tuple(t for t in (self.current, previous) if t is not None)

    async def verified(self, fits: Callable[[tuple[str, ...]], bool]) -> bool:
        """Whether ``fits`` accepts the tokens known, or, when it does not, those of a read of etcd begun after it
        was called (a new token another node already signs with): a read under way when it is called began before
        and may predate the token, so it is awaited and, when that does not do, a read begun after (shared by every
        request waiting for it). Such reads begin at most every :data:`REREAD_S` (the periodic ones of
        :meth:`follow` do not count), so that forged signatures cost at most one read per interval."""
        if fits(self.known()):
            return True
        if self._reading is not None:  # begun before this call
            await self.refresh()
            if fits(self.known()):
                return True
        if self._reading is None:  # else one begun after this call, by another request: joined
            if self._clock() - self._checked_at < REREAD_S:
                return False
            self._checked_at = self._clock()
        await self.refresh()
        return fits(self.known())

    async def refresh(self) -> None:
        """Read the token again (joining a read under way); etcd not answering or a bad value is logged and the
        tokens known are kept."""
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read_logged())
        reading = self._reading
        try:
            await asyncio.shield(reading)
        finally:
            if reading.done() and self._reading is reading:
                self._reading = None

    async def follow(self) -> None:
        """Begin a read of the token every :data:`REFRESH_S` (or, when one took longer, as soon as it ended),
        forever (cancelled when the node stops); an unexpected error is logged and the next read still begun."""
        loop = asyncio.get_running_loop()
        due = loop.time() + REFRESH_S
        while True:
            await asyncio.sleep(max(0.0, due - loop.time()))
            due = loop.time() + REFRESH_S
            try:
                await self.refresh()
            except Exception:
                log.exception("the cluster's node token was not read again: the tokens known are kept")

    async def _read_logged(self) -> None:
        try:
            await self._read()
        except ControlPlaneError as e:
            log.warning("the cluster's node token was not read again (%s): the tokens known are kept", e)

    async def _read(self) -> None:
        """Read the key: its value becomes ``current`` (module docstring). Raises ControlPlaneError (etcd not
        answering, a value that is no token)."""
        answer = await self._session.get(self._key)
        if answer is None:
            if self.current is not None:
                log.warning("the cluster's node token (%s) was deleted: no request between nodes is signed or "
                            "accepted until a new one is put", self._key.decode())
            self.current = self.previous = None
            self._made = 0
            return
        made = int(answer.create_revision)
        revoked = self._made != 0 and made != self._made
        self._made = made
        try:
            value = bytes(answer.value).decode()
        except UnicodeDecodeError:
            value = ""
        if len(value) < MIN_CHARS:
            if revoked:  # the key made again: the tokens before are revoked even though the new value is refused
                self.current = self.previous = None
            raise ControlPlaneError(f"the cluster's node token ({self._key.decode()}) in etcd is not UTF-8 of "
                                    f"{MIN_CHARS} characters at least: put a new one (etcdctl put "
                                    f"{self._key.decode()} \"$(openssl rand -base64 32)\")"
                                    + (": no token is known until then" if revoked else ""))
        if value != self.current or revoked:
            if self.current is not None:
                log.info("the cluster's node token changed: %s", "the one before it is no longer accepted"
                         if revoked else f"the one before it is accepted for {GRACE_S:.0f} s more")
            self.previous = None if revoked else self.current
            self.current = value
            self._changed_at = self._clock()
