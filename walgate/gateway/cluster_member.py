"""This node's membership of a walgate cluster (``cluster.etcd.endpoints`` set; docs/cluster.md).

The asyncio shell over :mod:`walgate.cluster`: at start the node reads (or makes) the cluster's Kafka cluster id,
then, once its Kafka listeners are bound, registers (:class:`~walgate.cluster.registry.NodeRegistration`, with the
data dir's incarnation and its advertised listeners ``NAME://host:port``), stands for controller
(:class:`~walgate.cluster.election.ControllerElection`), keeps its lease alive and re-reads the membership (live
nodes, nodes that ever registered, the controller) every third of ``broker.session.timeout.ms`` and the cluster's
node token every :data:`~walgate.gateway.node_tokens.REFRESH_S`. A clean stop
revokes the lease: the node leaves at once, its candidacy with it; a controlled shutdown
(:meth:`ClusterMember.shut_down`) first marks the registration, while it is still held, so that the controller
moves the node's leaderships first.

A refused registration (:class:`~walgate.cluster.model.RegistrationRefused`: an emptied data dir, an id another
live node has), a damaged ``node.incarnation`` or etcd not answering stops the start with the error's message.
Once started, etcd going away is waited out: what the node knows stays as it last read it (``view``), and the
registration loop registers again (a new lease, the same broker epoch: the process did not restart) when its
lease was lost.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from walgate.cluster.election import ControllerElection
from walgate.cluster.etcd import EtcdAccess, EtcdSession, tx
from walgate.cluster.incarnation import IncarnationError, load_or_create
from walgate.cluster.model import (
    ControlPlaneError,
    ControlPlaneRefused,
    ControlPlaneUnavailable,
    Keys,
    Membership,
    NodeInfo,
    endpoint_for,
    membership,
    parse_endpoints,
)
from walgate.cluster.registry import NodeRegistration, broker_epoch
from walgate.gateway.node_tokens import NodeTokens
from walgate.storage.show import Dnode
from walgate.wire.internal import VERSIONS as INTERNAL_VERSIONS

__all__ = ["ClusterMember", "ClusterStartError", "dnodes", "stop_tasks"]

log = logging.getLogger("walgate.cluster")


CANCEL_AGAIN_AFTER_S = 15.0
"""How long :func:`stop_tasks` waits for a cancelled task before it cancels it again (every ``CANCEL_AGAIN_S`` from
then on). aetcd's watcher swallows a cancellation that meets its stream's request handler (``except CancelledError:
pass``; :meth:`Reconciler._wait_change <walgate.cluster.partition_states.Reconciler._wait_change>` bounds its own
watches for it), and a loop around a watch then went on as if it had not been asked to stop, so a node's shutdown
waited for it forever (the likely cause of a node SIGKILLed 60 s after its SIGTERM in a CI run of 2026-12-02,
tests/jepsen/test_replicated_controller.py::test_zombie_controller[1]: elected controller during its shutdown, it
logged nothing more). Not sooner: a task's own cleanup on cancellation must not be cut short (the replica manager
resigns its leaderships, freezes its vnodes and writes their high watermark checkpoints, through storage calls and
fsyncs that a loaded machine may take seconds over)."""
CANCEL_AGAIN_S = 0.5


async def stop_tasks(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait until they ended, cancelling again one that has not after
    :data:`CANCEL_AGAIN_AFTER_S`, then every :data:`CANCEL_AGAIN_S`; a loop that had ended on an error it did not
    expect is logged."""
    for task in tasks:
        task.cancel()
    _, running = await asyncio.wait(tasks, timeout=CANCEL_AGAIN_AFTER_S) if tasks else (set(), set())
    for task in running:
        log.warning("%s did not end %g s after it was cancelled: cancelled again until it does", task.get_name(),
                    CANCEL_AGAIN_AFTER_S)
    while running:
        for task in running:
            task.cancel()
        _, running = await asyncio.wait(running, timeout=CANCEL_AGAIN_S)
    for task in tasks:
        error = None if task.cancelled() else task.exception()
        if isinstance(error, Exception):
            log.error("%s had stopped: %s", task.get_name(), error)


def dnodes(view: Membership) -> tuple[Dnode, ...]:
    """``SHOW DNODES``' rows of ``view``: every node that ever registered, by id; a live one ``ready`` with the
    Kafka endpoint of its first listener, the others ``offline`` (their endpoint is not kept once they left)."""
    live = {n.node_id: n for n in view.nodes}
    rows = []
    for node_id in view.known:
        info = live.get(node_id)
        address = endpoint_for(info, "") if info is not None else None
        rows.append(Dnode(node_id, f"{address[0]}:{address[1]}" if address else "", "ready" if info else "offline",
                          "controller" if node_id == view.controller else ""))
    return tuple(rows)


class ClusterStartError(Exception):
    """The node cannot join its cluster; the message says why and what to do."""


class ClusterMember:
    """Node ``node_id``'s membership of cluster ``name`` over the etcd at ``endpoints``. ``view`` is the membership
    as last read, ``broker_epochs`` the registered nodes' broker epochs read with it; ``registered`` whether the node
    holds a live registration (as far as its lease tells)."""

    def __init__(self, endpoints: str, name: str, node_id: int, data_dir: Path, session_timeout_ms: int,
                 access: EtcdAccess | None = None) -> None:
        self.session = EtcdSession(parse_endpoints(endpoints), access=access)
        self.keys = Keys(name)
        self.tokens = NodeTokens(self.session, self.keys.node_token)  # loaded by kafka_cluster_id
        self.node_id = node_id
        self.data_dir = data_dir
        self.ttl = max(2, session_timeout_ms // 1000)
        self.view = Membership()
        self.broker_epochs: dict[int, int] = {}  # registered node id -> its broker epoch, as last read (KIP-903)
        self.registration: NodeRegistration | None = None
        self.election: ControllerElection | None = None  # once joined
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()
        self._others: dict[str, tuple[Membership, Mapping[int, tuple[str, int]]]] = {}  # by listener: of that view

    def others(self, listener: str) -> Mapping[int, tuple[str, int]]:
        """The live nodes of :attr:`view` other than this one, each with the endpoint it advertises on the Kafka
        listener named ``listener`` (a node without one left out: a client of that listener cannot reach it);
        read-only, made once per view and listener (Metadata, Produce, Fetch and FindCoordinator ask at every
        request; a view is never changed, only replaced)."""
        kept = self._others.get(listener)
        if kept is None or kept[0] is not self.view:
            kept = self._others[listener] = (self.view, MappingProxyType({
                n.node_id: address for n in self.view.nodes
                if n.node_id != self.node_id and (address := endpoint_for(n, listener)) is not None}))
        return kept[1]

    @property
    def registered(self) -> bool:
        return self.registration is not None and self.registration.epoch is not None

    @property
    def eligible_epochs(self) -> dict[int, int]:
        """``broker_epochs`` of the registered nodes not in a controlled shutdown: those a leader may admit to an ISR
        (KIP-841)."""
        shutting_down = {n.node_id for n in self.view.nodes if n.shutting_down}
        return {n: e for n, e in self.broker_epochs.items() if n not in shutting_down}

    async def shut_down(self) -> bool:
        """Begin a controlled shutdown: the registration marked shutting down, still held
        (:meth:`NodeRegistration.shut_down <walgate.cluster.registry.NodeRegistration.shut_down>`); :meth:`deregister`
        ends it. Whether it began: False (logged when etcd did not answer) when the node is not registered, or the
        mark was not written."""
        registration = self.registration
        if registration is None:
            return False
        try:
            return await registration.shut_down()
        except ControlPlaneError as e:
            log.warning("node %d: controlled shutdown not begun (etcd did not answer): %s", self.node_id, e)
            return False

    async def kafka_cluster_id(self, made: str | None = None) -> str:
        """The cluster's Kafka cluster id (Kafka's 22-character base64 UUID form), made by the first node to ask:
        ``made`` when given (a single node's data dir's own id, so that its clients see the same cluster after it
        became the cluster's first node), else a new one; the cluster's node token (``tokens``) is read (or made)
        too."""
        made = made or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        key = self.keys.kafka_cluster_id
        try:
            await self.session.txn([tx.Version(key) == 0], [tx.Put(key, made.encode())])
            current = await self.session.get(key)
        except ControlPlaneRefused as e:
            raise ClusterStartError(f"cannot reach the cluster's etcd: {e}") from None
        except ControlPlaneUnavailable as e:
            raise ClusterStartError(f"cannot reach the cluster's etcd: {e}; {self._reach_hint()}") from None
        except ControlPlaneError as e:
            raise ClusterStartError(f"cannot reach the cluster's etcd: {e}") from None
        try:
            await self.tokens.load()
        except ControlPlaneError as e:
            raise ClusterStartError(str(e)) from None
        if current is None:
            raise ClusterStartError(f"etcd ({self.session.describe()}) lost the key {key.decode()} it just wrote")
        return bytes(current.value).decode()

    def _reach_hint(self) -> str:
        """What to check when etcd does not answer at start-up: most often how the node reaches it."""
        if self.session.access.tls:
            return ("check that etcd's certificate chains to cluster.etcd.ssl.cafile and, when etcd runs with "
                    "--client-cert-auth, that cluster.etcd.ssl.certfile/keyfile are a certificate it trusts")
        return "check that etcd is up and serves these http:// endpoints (a TLS etcd needs https:// and cluster.etcd.ssl.*)"

    async def join(self, endpoints: tuple[str, ...], http: str | None = None, rack: str | None = None) -> None:
        """Register as this node with its advertised Kafka ``endpoints`` (``NAME://host:port``), the base URL of
        its HTTP API (``http``: where other nodes forward SQL writes) and its ``broker.rack`` (``rack``), then stand
        for controller and follow the membership and the cluster's node token in the background. Raises
        :class:`ClusterStartError`."""
        try:
            incarnation = await asyncio.to_thread(load_or_create, self.data_dir)
        except IncarnationError as e:
            raise ClusterStartError(str(e)) from None
        info = NodeInfo(self.node_id, incarnation, endpoints, rack=rack, http=http,
                        internal=tuple((key, high) for key, (_, high) in sorted(INTERNAL_VERSIONS.items())))
        registration = NodeRegistration(self.session, self.keys, info, ttl=self.ttl)
        try:
            await registration.register()
        except ControlPlaneError as e:
            raise ClusterStartError(f"node {self.node_id} cannot join cluster {self.keys.cluster_id!r}: {e}") from None
        self.registration = registration
        # kept alive from now: the lease's TTL runs from its grant, and the reads below take round trips too
        self._tasks = [asyncio.create_task(self._keep_registered(registration), name="walgate-cluster-lease")]
        self.election = election = ControllerElection(self.session, self.keys, registration)
        try:
            await self.refresh()
        except ControlPlaneError as e:  # read again by the membership task
            log.warning("cluster %s: membership not read: %s", self.keys.cluster_id, e)
        self._tasks += [asyncio.create_task(election.run(), name="walgate-cluster-election"),
                        asyncio.create_task(self._follow(), name="walgate-cluster-members"),
                        asyncio.create_task(self.tokens.follow(), name="walgate-cluster-node-token")]

    async def _keep_registered(self, registration: NodeRegistration) -> None:
        try:
            await registration.run()
        except ControlPlaneError as e:  # registering again was refused: the id is another data dir's now
            log.error("node %d left the cluster: %s; restart it to join again", self.node_id, e)

    async def refresh(self) -> Membership:
        """Read the membership from etcd into ``view``."""
        _, nodes = await self.session.get_prefix(self.keys.nodes)
        _, known = await self.session.get_prefix(self.keys.incarnations)
        _, candidates = await self.session.get_prefix(self.keys.candidates)
        ids = [int(kv.key[len(self.keys.incarnations):]) for kv in known
               if kv.key[len(self.keys.incarnations):].isdigit()]
        view = membership([kv.value for kv in nodes], ids,
                          [(kv.key, kv.create_revision, kv.value) for kv in candidates])
        self.broker_epochs = {NodeInfo.decode(kv.value).node_id: broker_epoch(kv.value, kv.create_revision)
                              for kv in nodes}
        if view != self.view:
            log.info("cluster %s: nodes %s, controller %s", self.keys.cluster_id,
                     ",".join(str(n.node_id) for n in view.nodes) or "none",
                     "none" if view.controller is None else view.controller)
            self.view = view
            self._changed.set()
            self._changed = asyncio.Event()
        return self.view

    async def changed(self) -> None:
        """Return once ``view`` changed."""
        await self._changed.wait()

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                await self.refresh()
            except ControlPlaneError as e:
                log.warning("cluster %s: membership not read: %s", self.keys.cluster_id, e)

    async def deregister(self) -> bool:
        """Stop following and keeping the lease, and deregister (revoke it: ``nodes/<id>`` and the controller
        candidacy go at once); the etcd session stays open (the node's other watches go on until :meth:`leave`).
        Whether it deregistered now: False when it was not registered, or etcd did not answer (logged: the lease then
        expires by itself within ``broker.session.timeout.ms``)."""
        await stop_tasks(self._tasks)
        self._tasks = []
        registration, self.registration = self.registration, None
        if registration is None:
            return False
        try:
            await registration.close()
        except ControlPlaneError as e:
            log.warning("node %d: deregistering failed (its lease expires within %d s): %s", self.node_id, self.ttl, e)
            return False
        log.info("node %d left cluster %s", self.node_id, self.keys.cluster_id)
        return True

    async def leave(self) -> None:
        """:meth:`deregister` (unless done already), then close the etcd session."""
        try:
            await self.deregister()
        finally:
            try:
                await self.session.close()
            except (Exception, TimeoutError) as e:  # a broken channel: nothing left to close
                log.debug("closing the etcd session: %r", e)
