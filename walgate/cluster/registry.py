"""Node registration: ``nodes/<id>`` put on the node's etcd lease, kept alive while the node runs.

The broker epoch is the registration's revision (the key's ``create_revision``): each registration creates the key
anew, so a node that re-registers (after its lease expired, or after a restart) gets a larger epoch. A node
registers only as the data dir it has (:func:`walgate.cluster.model.check_registration`): the data dir's incarnation
id (:mod:`walgate.cluster.incarnation`) is written in ``incarnations/<id>`` at the first registration, and a data dir
with another incarnation (emptied, or another node's) is refused.
"""

from __future__ import annotations

import asyncio
import logging

from walgate.cluster.etcd import EtcdSession, tx
from walgate.cluster.model import ControlPlaneError, ControlPlaneUnavailable, Keys, NodeInfo, check_registration

__all__ = ["NodeRegistration"]

log = logging.getLogger("walgate.cluster")
_REGISTER_ATTEMPTS = 5


class NodeRegistration:
    """This node's registration. ``epoch`` and ``lease_id`` are None while it is not registered (before
    :meth:`register`, or once its lease was found expired, or not refreshed within ``ttl`` seconds by this process's
    clock: then it must assume etcd let the lease go)."""

    def __init__(self, session: EtcdSession, keys: Keys, info: NodeInfo, ttl: int = 9) -> None:
        if ttl < 2:
            raise ValueError("a registration's lease TTL is at least 2 s")
        self.session = session
        self.keys = keys
        self.info = info
        self.ttl = ttl
        self.epoch: int | None = None
        self.lease_id: int | None = None
        self._granted = 0.0  # the event loop's time just before the lease was asked for: its TTL runs from later
        self._changed = asyncio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_registered(self) -> int:
        """The broker epoch, once registered."""
        while self.epoch is None:
            await self._changed.wait()
        return self.epoch

    async def wait_lost(self, epoch: int) -> None:
        """Return once registration ``epoch`` is no longer this node's."""
        while self.epoch == epoch:
            await self._changed.wait()

    async def register(self) -> int:
        """Register (a new lease, ``nodes/<id>`` created on it) and return the broker epoch. Raises
        :class:`RegistrationRefused` when this data dir may not be node ``info.node_id``,
        :class:`ControlPlaneUnavailable` when etcd does not answer. The lease is asked for after the reads, just
        before the write that puts the key on it: its TTL runs from then, and :meth:`run` keeps it alive from then."""
        node_key, inc_key = self.keys.node(self.info.node_id), self.keys.incarnation(self.info.node_id)
        for _ in range(_REGISTER_ATTEMPTS):
            live_kv = await self.session.get(node_key)
            inc_kv = await self.session.get(inc_key)
            live = NodeInfo.decode(live_kv.value) if live_kv is not None else None
            registered = inc_kv.value.decode() if inc_kv is not None else None
            if check_registration(self.info.node_id, self.info.incarnation, registered, live):
                assert live_kv is not None
                log.info("node %d: revoking this data dir's previous registration (epoch %d)", self.info.node_id,
                         live_kv.create_revision)
                await self.session.revoke(live_kv.lease)
                continue
            compare = [tx.Create(node_key) == 0,
                       tx.Version(inc_key) == 0 if registered is None else tx.Value(inc_key) == registered.encode()]
            self._granted = asyncio.get_running_loop().time()
            lease_id = await self.session.grant(self.ttl)
            ok, responses = await self.session.txn(compare, [
                tx.Put(node_key, self.info.encode(), lease=lease_id),
                tx.Put(inc_key, self.info.incarnation.encode())])
            if ok:
                self.epoch = int(responses[0].response_put.header.revision)
                self.lease_id = lease_id
                log.info("node %d registered: broker epoch %d", self.info.node_id, self.epoch)
                self._notify()
                return self.epoch
            await self.session.revoke(lease_id)
        raise ControlPlaneError(f"node {self.info.node_id}: its registration kept changing during"
                                f" {_REGISTER_ATTEMPTS} attempts to register")

    def _lose(self, why: str, level: int = logging.WARNING) -> None:
        log.log(level, "node %d: registration (broker epoch %s) lost: %s", self.info.node_id, self.epoch, why)
        self.epoch = None
        self.lease_id = None
        self._notify()

    async def run(self) -> None:
        """Register, keep the lease alive every ``ttl / 3`` s, and register again (a new epoch) whenever it was
        lost. Runs until cancelled; raises :class:`RegistrationRefused` (the data dir may not be this node).

        Keep-alives are timed from when the lease was asked for and from when each keep-alive was sent, never from
        when an answer came: a registration's round trips or a keep-alive over a slow link to etcd do not add to
        the interval etcd sees, so the lease is kept while a round trip stays well under the TTL. Started at once
        after :meth:`register`: the lease's TTL is running."""
        loop = asyncio.get_running_loop()
        last_ok = self._granted  # the last grant or keep-alive known to have reached etcd, at the latest when sent
        due = last_ok + self.ttl / 3
        while True:
            if self.lease_id is None:
                try:
                    await self.register()
                except ControlPlaneUnavailable as e:
                    log.warning("node %d: cannot register yet: %s", self.info.node_id, e)
                    await asyncio.sleep(self.ttl / 3)
                    continue
                last_ok = self._granted
                due = last_ok + self.ttl / 3
                continue
            await asyncio.sleep(max(0.0, due - loop.time()))
            lease_id = self.lease_id
            sent = loop.time()
            due = sent + self.ttl / 3
            try:
                left = await self.session.keepalive(lease_id)
            except ControlPlaneUnavailable as e:
                if loop.time() - last_ok >= self.ttl and self.lease_id == lease_id:
                    self._lose(f"no keep-alive answered for {self.ttl} s ({e})")
                continue
            if self.lease_id != lease_id:
                continue
            if left <= 0:
                self._lose("etcd let the lease expire (the process was paused or cut off for longer than its TTL)")
            else:
                last_ok = sent

    async def close(self) -> None:
        """Deregister (revoke the lease: ``nodes/<id>`` and its controller candidacy go at once)."""
        lease_id = self.lease_id
        if lease_id is not None:
            self._lose("closed", logging.INFO)  # a clean stop: nothing for an operator to look into
            await self.session.revoke(lease_id)
