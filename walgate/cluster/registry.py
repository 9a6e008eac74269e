"""Node registration: ``nodes/<id>`` put on the node's etcd lease, kept alive while the node runs.

The broker epoch names a process start, not a lease (KIP-903: a broker's epoch changes only when it registers anew
after a restart, which may have lost unsynced data; a broker fenced for missed heartbeats comes back under the same
epoch, its log intact). It is the revision of the process's first registration (that ``nodes/<id>``'s
``create_revision``): each process start registers anew, so a restarted node gets a larger epoch. A registration the
same process makes again after its lease was lost (etcd unreachable or the process paused for a TTL) keeps that
epoch: it carries it in its value (``broker_epoch``, :func:`registration_value`), and readers take a registration's
epoch from :func:`broker_epoch`. While the lease is lost the node is not registered (not live: fenced); it comes
back unfenced under the same epoch. A node registers only as the data dir it has
(:func:`walgate.cluster.model.check_registration`): the data dir's incarnation id
(:mod:`walgate.cluster.incarnation`) is written in ``incarnations/<id>`` at the first registration, and a data dir
with another incarnation (emptied, or another node's) is refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging

from walgate.cluster.etcd import EtcdSession, tx
from walgate.cluster.model import ControlPlaneError, ControlPlaneUnavailable, Keys, NodeInfo, check_registration

__all__ = ["NodeRegistration", "registration_value", "broker_epoch"]

log = logging.getLogger("walgate.cluster")
_REGISTER_ATTEMPTS = 5
_EPOCH_FIELD = "broker_epoch"


def registration_value(info: NodeInfo, epoch: int | None) -> bytes:
    """``nodes/<id>``'s value: ``info``, plus ``broker_epoch`` when the registration is made again by the process
    whose first registration made epoch ``epoch`` (None for a process's first registration: its epoch is then the
    key's ``create_revision``, unknown before the write). :meth:`NodeInfo.decode` ignores the extra field."""
    if epoch is None:
        return info.encode()
    fields = json.loads(info.encode())
    fields[_EPOCH_FIELD] = epoch
    return json.dumps(fields, sort_keys=True).encode()


def broker_epoch(value: bytes, create_revision: int) -> int:
    """The broker epoch of the registration ``value`` whose key was created at ``create_revision``: the epoch the
    value carries (a registration made again by the same process), else ``create_revision`` (a process's first
    registration). Raises :class:`ControlPlaneError` when the value is not walgate's."""
    try:
        epoch = json.loads(value).get(_EPOCH_FIELD, create_revision)
    except (ValueError, AttributeError) as e:  # not JSON, or JSON but not an object
        raise ControlPlaneError(f"a node registration in etcd is not walgate's: {value[:200]!r} ({e})") from e
    if type(epoch) is not int or not 0 < epoch <= create_revision:
        raise ControlPlaneError(f"a node registration in etcd is not walgate's: {value[:200]!r}"
                                f" (broker epoch {epoch!r}: not a revision up to the key's creation)")
    return epoch


class NodeRegistration:
    """This process's registration (one object per process start). ``epoch`` and ``lease_id`` are None while it is
    not registered (before :meth:`register`, or once its lease was found expired, or not refreshed within ``ttl``
    seconds by this process's clock: then it must assume etcd let the lease go). Every registration after the first
    has a new ``lease_id`` and the first one's ``epoch``."""

    def __init__(self, session: EtcdSession, keys: Keys, info: NodeInfo, ttl: int = 9) -> None:
        if ttl < 2:
            raise ValueError("a registration's lease TTL is at least 2 s")
        self.session = session
        self.keys = keys
        self.info = info
        self.ttl = ttl
        self.epoch: int | None = None
        self.lease_id: int | None = None
        self._epoch: int | None = None  # this process's broker epoch, from its first registration on
        self._created = 0  # the revision that created the key of the registration held now (0: none held)
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

    async def wait_lost(self, lease_id: int | None) -> None:
        """Return once the registration on lease ``lease_id`` is no longer this node's (a registration made again
        has another lease, and the same epoch)."""
        while self.lease_id == lease_id:
            await self._changed.wait()

    async def register(self) -> int:
        """Register (a new lease, ``nodes/<id>`` created on it) and return the broker epoch: the first registration's
        revision, carried by every later one of this process (:func:`registration_value`). Raises
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
                tx.Put(node_key, registration_value(self.info, self._epoch), lease=lease_id),
                tx.Put(inc_key, self.info.incarnation.encode())])
            if ok:
                again = self._epoch is not None
                self._created = int(responses[0].response_put.header.revision)
                if self._epoch is None:
                    self._epoch = self._created
                self.epoch = self._epoch
                self.lease_id = lease_id
                log.info("node %d registered%s: broker epoch %d", self.info.node_id, " again" if again else "",
                         self.epoch)
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
        """Register, keep the lease alive every ``ttl / 3`` s, and register again (a new lease, the same epoch)
        whenever it was lost. Runs until cancelled; raises :class:`RegistrationRefused` (the data dir may not be this
        node).

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

    async def shut_down(self) -> bool:
        """Begin a controlled shutdown (KIP-631: Kafka's broker asks the controller for it and stays registered
        until its leaderships moved): ``nodes/<id>`` written again, on the same lease and under the same broker
        epoch, marked ``shutting_down`` (:class:`NodeInfo`), so that the controller elects other leaders, fences
        the node out of the ISRs and admits it to none, while it stays registered (named by Metadata, its lease
        kept alive by :meth:`run`, which marks a registration it makes again too). Whether the mark was written:
        False when the node holds no registration now, or it was replaced meanwhile (compared by the key's
        ``create_revision``). Raises :class:`ControlPlaneUnavailable` when etcd does not answer."""
        self.info = dataclasses.replace(self.info, shutting_down=True)
        lease_id, created = self.lease_id, self._created
        if lease_id is None:
            return False
        key = self.keys.node(self.info.node_id)
        ok, _ = await self.session.txn([tx.Create(key) == created],
                                       [tx.Put(key, registration_value(self.info, self._epoch), lease=lease_id)])
        if ok:
            log.info("node %d: controlled shutdown begun (still registered, broker epoch %s)", self.info.node_id,
                     self.epoch)
        return bool(ok)

    async def close(self) -> None:
        """Deregister (revoke the lease: ``nodes/<id>`` and its controller candidacy go at once)."""
        lease_id = self.lease_id
        if lease_id is not None:
            self._lose("closed", logging.INFO)  # a clean stop: nothing for an operator to look into
            await self.session.revoke(lease_id)
