"""The cluster's node token as this node knows it (the secret that signs requests between nodes:
:mod:`walgate.security.node_token`; docs/security.md "Between cluster nodes").

The token lives in etcd at ``/walgate/<cluster>/node_token``, made by the first node that starts (a transaction that
writes it only when the key does not exist, so every node reads the same one). An operator rotates it by writing a
new value there (``etcdctl put``); each node reads it again when it signs after :data:`REFRESH_S` and, before
refusing a request whose signature fits none of the tokens it knows, once more (at most every
:data:`REREAD_S`). A node keeps accepting the token it knew before the last change it saw, so that requests signed
by nodes that have not read the new one yet are still accepted: a rotation needs no restart and refuses nothing, as
long as the next one waits :data:`REFRESH_S` at least.

Invariant: ``current`` is the value last read from etcd, ``previous`` the one read before it (or None).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from walgate.cluster.etcd import EtcdSession, tx
from walgate.cluster.model import ControlPlaneError
from walgate.security.node_token import new_token

__all__ = ["REFRESH_S", "REREAD_S", "NodeTokens"]

log = logging.getLogger("walgate.cluster")

REFRESH_S = 10.0
"""A token older than this is read again before it signs."""
REREAD_S = 1.0
"""A signature fitting no known token makes the node read the token again, at most this often."""


class NodeTokens:
    """The node token at ``key`` of the etcd of ``session`` (module docstring); used on the event loop."""

    def __init__(self, session: EtcdSession, key: bytes, clock: Callable[[], float] = time.monotonic) -> None:
        self._session = session
        self._key = key
        self._clock = clock
        self.current: str | None = None
        self.previous: str | None = None
        self._read_at = float("-inf")

    async def load(self) -> None:
        """Read the token, making it first when the cluster has none yet. Raises ControlPlaneError."""
        await self._session.txn([tx.Version(self._key) == 0], [tx.Put(self._key, new_token().encode())])
        await self._read()

    async def signing(self) -> str:
        """The token to sign with: read again when older than :data:`REFRESH_S` (etcd not answering: the one
        known)."""
        if self._clock() - self._read_at > REFRESH_S:
            try:
                await self._read()
            except ControlPlaneError as e:
                log.warning("the cluster's node token was not read again (%s): signing with the one known", e)
        if self.current is None:
            raise ControlPlaneError(f"the cluster's node token ({self._key.decode()}) was never read")
        return self.current

    def known(self) -> tuple[str, ...]:
        """The tokens a signature is accepted with: the current one and the one before it."""
        return tuple(t for t in (self.current, self.previous) if t is not None)

    async def verified(self, fits: Callable[[tuple[str, ...]], bool]) -> bool:
        """Whether ``fits`` accepts the tokens known, or, when it does not, those read again from etcd (at most
        every :data:`REREAD_S`: a new token another node already signs with)."""
        if fits(self.known()):
            return True
        if self._clock() - self._read_at < REREAD_S:
            return False
        try:
            await self._read()
        except ControlPlaneError as e:
            log.warning("the cluster's node token was not read again (%s)", e)
            return False
        return fits(self.known())

    async def _read(self) -> None:
        answer = await self._session.get(self._key)
        if answer is None:
            raise ControlPlaneError(f"the cluster's node token ({self._key.decode()}) is not in etcd")
        value = bytes(answer.value).decode()
        self._read_at = self._clock()
        if value != self.current:
            if self.current is not None:
                log.info("the cluster's node token changed: the one before it is still accepted")
            self.previous, self.current = self.current, value
