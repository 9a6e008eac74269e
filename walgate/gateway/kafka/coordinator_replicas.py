"""A replicated cluster's group coordinators (``replication.enable``; docs/plans/replication-wiring.md, step 7):
coordinator partition p is partition p of the internal Kafka-native topic ``__consumer_offsets``, as in Kafka, and
the group coordinator of a group is the leader of its partition.

* **The topic** is made once, by the first node that needs a group's coordinator, through the cluster's catalog as
  CreateTopics makes a topic (:meth:`CoordinatorReplicas.ensure_topic`): the cluster's N partitions, replication
  factor ``offsets.topic.replication.factor`` (Kafka's default 3: while fewer nodes are live it is not made and
  groups answer COORDINATOR_NOT_AVAILABLE, as Kafka refuses to create it), ``cleanup.policy=compact``. Every node
  then holds its replicas and the controller elects their leaders like any topic's.
* **Who coordinates**: the leader its partition state names (:meth:`CoordinatorReplicas.placement`, the
  :class:`~walgate.cluster.coordinators.CoordinatorPlacement` of the leaders now: -1 for a partition without one).
* **Load** (Kafka's ``GroupMetadataManager.loadGroupsAndOffsets``): when the replica manager begins to lead p here,
  p's records, from its log start to its log end, are replayed into a
  :class:`~walgate.storage.replicated_coordinator_log.ReplicatedCoordinatorLog`, installed as the engine's
  coordinator partition p, and its groups rebuilt (:meth:`GroupService.load_groups
  <walgate.gateway.kafka.groups.GroupService.load_groups>`); until then the partition's groups answer
  COORDINATOR_LOAD_IN_PROGRESS (:meth:`CoordinatorReplicas.loading`).
* **Unload** (``onResignation``): when it stops leading p, p's log is replaced by one refusing every write and its
  groups are dropped, their parked requests answered NOT_COORDINATOR.
* **Writes**: each group-commit round of the log (the batch of the writes it covers) is appended to p on its lane,
  refused unless this node leads p in the epoch the log was loaded in (checked on the lane with the append), then
  waits for the append's fsync and for the high watermark to pass it (:meth:`ReplicaManager.acknowledged
  <walgate.gateway.replicas.ReplicaManager.acknowledged>`, at most :data:`WRITE_S`), on the event loop: a commit or
  group state is seen and answered only once every in-sync replica holds it, so a new leader loads it, and no lane
  or thread waits for it (a storage-lane call waiting for the coordinator lane never waits on it).

The transaction coordinator's part is the same (:meth:`TransactionService.install
<walgate.gateway.kafka.transactions.TransactionService.install>` and ``uninstall``): a transactional id's coordinator
is the leader of its partition, its state and the offsets the partition's groups hold for transactions are the
partition's records, written the same way; a new leader sends the markers of the transactions it loaded decided
(Prepare*), which the previous leader may not have sent.

The share coordinator's part: the share-partition states of p's share groups (records ``["s", ...]``) are loaded
into a :class:`~walgate.storage.replicated_coordinator_log.ReplicatedShareStateLog` with the rest
(:meth:`CoordinatorReplicas.share_log`), written the same way, for the share-partitions' leaders
(:mod:`walgate.gateway.kafka.share_persister`), and dropped when p is unloaded.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
from collections.abc import Callable
from typing import Final

from walgate.cluster.coordinators import CoordinatorPlacement
from walgate.cluster.model import ControlPlaneUnavailable
from walgate.cluster.placement import InvalidReplicationFactor, NoLiveNode
from walgate.gateway.group_commit import GroupCommit
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.replicas import ReplicaManager
from walgate.gateway.storage_thread import StorageThread
from walgate.replication.partition import NO_LEADER
from walgate.storage.coordinator_partitions import partition_for
from walgate.storage.coordinator_records import replay_records
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError, StorageUnavailable
from walgate.storage.group_committed_log import LogSync
from walgate.storage.lanes import VnodeKey
from walgate.storage.replicated_coordinator_log import (
    OFFSETS_TOPIC,
    ReplicatedCoordinatorLog,
    ReplicatedShareStateLog,
    ReplicatedTransactionLog,
    not_led,
)
from walgate.wire import batch_header
from walgate.wire.errors import ErrorCode

__all__ = ["CoordinatorReplicas", "WRITE_S"]

log = logging.getLogger("walgate.groups")

WRITE_S: Final = 10.0
"""The longest a coordinator write waits for the in-sync replicas (then refused: the client retries)."""


def split_batches(body: bytes) -> list[bytes]:
    """The record batches ``body`` concatenates (each framed by its own length, as a log holds them)."""
    out, pos = [], 0
    while pos < len(body):
        end = pos + 12 + batch_header(body, pos).length
        out.append(body[pos:end])
        pos = end
    return out


class CoordinatorReplicas:
    """This node's part in the replicated group coordinators (the module docstring); on the event loop."""

    def __init__(self, broker: Broker, engine: Engine, storage: StorageThread, coordinator: StorageThread,
                 group_commit: GroupCommit, manager: Callable[[], ReplicaManager | None], partitions: int,
                 factor: int) -> None:
        self._broker = broker
        self._engine = engine
        self._storage = storage
        self._coordinator = coordinator
        self._group_commit = group_commit
        self._manager = manager
        self.partitions = partitions
        self.factor = factor
        self._loop = asyncio.get_running_loop()
        self._made: asyncio.Lock = asyncio.Lock()
        self._unmade: str | None = None  # why the topic could not be made, as last logged
        self.loaded: dict[int, int] = {}  # partition -> the leader epoch its log was loaded in
        self._share_logs: dict[int, ReplicatedShareStateLog] = {}  # partition -> its share states, while loaded
        self._changes: dict[int, asyncio.Task[None]] = {}  # partition -> its load or unload running

    # ------------------------------------------------------------ who coordinates

    def _database(self) -> tuple[str, str] | None:
        """(name, id) of the topic's database, once this node knows the topic."""
        topics = self._engine.topics()
        found = topics.topic(OFFSETS_TOPIC)
        if found is None:
            return None
        vgroup = topics.replicated_vgroup(OFFSETS_TOPIC, 0)
        return None if vgroup is None else (found.db, vgroup[0])

    async def ensure_topic(self) -> tuple[str, str]:
        """The topic's database (name, id), the topic made first when no node made it yet; ControlPlaneUnavailable
        while it cannot be (fewer live nodes than its replication factor, the catalog refusing)."""
        known = self._database()
        if known is not None:
            return known
        async with self._made:
            known = self._database()
            if known is None:
                try:
                    await self._broker.call(_make_topic, self.partitions, self.factor)
                except (StorageError, InvalidReplicationFactor, NoLiveNode) as e:
                    if str(e) != self._unmade:  # (Kafka logs it at each lookup; once per reason here)
                        self._unmade = str(e)
                        log.warning("no group or transaction coordinator: the %s topic cannot be made now "
                                    "(offsets.topic.replication.factor %d): %s", OFFSETS_TOPIC, self.factor, e)
                    raise ControlPlaneUnavailable(f"the {OFFSETS_TOPIC} topic cannot be made now: {e}") from None
                known = self._database()
        if known is None:
            raise ControlPlaneUnavailable(f"the {OFFSETS_TOPIC} topic is not applied here yet")
        return known

    async def placement(self) -> CoordinatorPlacement:
        """Each coordinator partition's leader now (-1: none elected or no state read yet)."""
        _, db_id = await self.ensure_topic()
        manager = self._manager()
        states = [None if manager is None else manager.state_of(db_id, p) for p in range(self.partitions)]
        return CoordinatorPlacement(tuple(NO_LEADER if s is None else s.leader for s in states))

    def loading(self, group_id: str) -> bool:
        """Whether ``group_id``'s partition is not loaded here in the leader epoch its partition state names (asked
        of a node that state names leader: it began to lead it, or is about to)."""
        p = partition_for(group_id, self.partitions)
        known, manager = self._database(), self._manager()
        state = None if known is None or manager is None else manager.state_of(known[1], p)
        return state is None or self.loaded.get(p) != state.leader_epoch

    def share_log(self, p: int) -> ReplicatedShareStateLog | None:
        """Partition ``p``'s share-partition states while it is loaded here (used on the coordinator lane)."""
        return self._share_logs.get(p)

    # ------------------------------------------------------------ load and unload

    def leadership(self, key: VnodeKey, epoch: int | None) -> None:
        """The replica manager began to lead vnode ``key`` in ``epoch`` (None: stopped): a partition of the topic
        is loaded or unloaded, after the change of it running (in order)."""
        known = self._database()
        if known is None or key[0] != known[0]:
            return
        p = key[1]
        before = self._changes.get(p)
        self._changes[p] = asyncio.create_task(self._change(p, epoch, before), name=f"walgate-coordinator-{p}")

    async def _change(self, p: int, epoch: int | None, before: asyncio.Task[None] | None) -> None:
        if before is not None:
            await asyncio.gather(before, return_exceptions=True)
        try:
            await self._unload(p)
            if epoch is not None:
                await self._load(p, epoch)
        except Exception as e:  # noqa: BLE001 - logged; the partition's groups answer NOT_COORDINATOR / LOAD_IN_PROGRESS
            log.error("%s partition %d: not loaded in leader epoch %s: %s: %s", OFFSETS_TOPIC, p, epoch,
                      type(e).__name__, e)

    async def _unload(self, p: int) -> None:
        if self.loaded.pop(p, None) is None:
            return
        self._share_logs.pop(p, None)
        await self._coordinator.call(self._install, not_led(p))
        if self._broker.transactions is not None:
            await self._coordinator.call(self._broker.transactions.uninstall, p)
        await self._broker.groups.unload_groups(lambda g: partition_for(g, self.partitions) == p)
        log.info("%s partition %d: unloaded (led elsewhere now)", OFFSETS_TOPIC, p)

    async def _load(self, p: int, epoch: int) -> None:
        name, _ = await self.ensure_topic()
        key = (name, p)
        batches = await self._storage.call_on(frozenset([key]), functools.partial(_batches, self._engine, p))
        replayed = replay_records(batches, lambda what: log.error("%s partition %d: %s", OFFSETS_TOPIC, p, what))
        clock, unsynced, syncs = self._engine.clock.time_ms, self._engine.store.coordinator_unsynced, self._engine.syncs
        loaded = ReplicatedCoordinatorLog.loaded(p, replayed.offsets, clock, unsynced, syncs)
        states = ReplicatedTransactionLog.loaded(p, "t", replayed.transactions.records, clock, unsynced, syncs)
        held = ReplicatedTransactionLog.loaded(p, "h", replayed.held.records, clock, unsynced, syncs)
        shares = ReplicatedShareStateLog.loaded(p, replayed.shares.states(), clock, unsynced, syncs)
        self._group_commit.own(self._coordinator, [loaded, states, held, shares],
                               functools.partial(self._write_round, key, epoch))
        await self._coordinator.call(self._install, loaded)
        txns = self._broker.transactions
        decided = [] if txns is None else await self._coordinator.call(txns.install, p, states, held)
        await self._broker.groups.load_groups(loaded.groups())
        self._share_logs[p] = shares
        self.loaded[p] = epoch
        log.info("%s partition %d: loaded in leader epoch %d (%d offsets, %d groups, %d transactional ids, %d "
                 "holding offsets, %d share-partitions)", OFFSETS_TOPIC, p, epoch, sum(1 for _ in loaded.items()),
                 len(loaded.groups()), len(states.records), len(held.records), len(shares.states()))
        if txns is not None:
            txns.resume(decided)

    def _install(self, log_: ReplicatedCoordinatorLog) -> None:
        """On the coordinator lane: ``log_`` is the engine's coordinator partition ``log_.partition`` now."""
        self._engine.install_coordinator_log(log_.partition, log_)

    # ------------------------------------------------------------ writes

    async def _write_round(self, key: VnodeKey, epoch: int, sync: LogSync) -> None:
        """A group-commit round of partition ``key``'s log loaded in ``epoch``: its batch appended and waited on
        (:meth:`GroupCommit.own <walgate.gateway.group_commit.GroupCommit.own>`'s writer); its ``error`` set when
        the in-sync replicas did not take it."""
        try:
            code = await self._write(key, epoch, split_batches(sync.body))
        except StorageError as e:
            sync.error = OSError(errno.EAGAIN, e.message)
            return
        if code != ErrorCode.none:
            sync.error = OSError(errno.EAGAIN, f"not taken by the in-sync replicas: {ErrorCode(code).name}")

    async def _write(self, key: VnodeKey, epoch: int, batches: list[bytes]) -> int:
        manager = self._manager()
        if manager is None:
            return ErrorCode.not_coordinator
        appended, needs = await self._storage.call_on(frozenset([key]), functools.partial(
            _append, self._engine, self._broker.node_id, key, epoch, batches))
        await self._group_commit.wait(needs)
        return await manager.acknowledged(key, epoch, appended, WRITE_S)


def _make_topic(engine: Engine, partitions: int, factor: int) -> None:
    """On the storage lane (a staged call: the cluster's catalog): the internal topic, unless made meanwhile."""
    if OFFSETS_TOPIC in engine.catalog.topics:
        return
    engine.create_kafka_topic(OFFSETS_TOPIC, partitions, {"cleanup.policy": "compact"}, {}, None, None, factor,
                              states=True)  # (a partition state also at factor 1: its leader is the coordinator)


def _batches(engine: Engine, p: int) -> list[bytes]:
    """On partition ``p``'s lane: its every stored batch, log start to log end."""
    return engine.partitions.all_batches(OFFSETS_TOPIC, p)


def _append(engine: Engine, node_id: int, key: VnodeKey, epoch: int, batches: list[bytes]) -> tuple[int, list]:
    """On the partition's lane: ``batches`` appended while this node leads it in ``epoch`` (NotLedNow else); the
    last WAL version written and what its durability needs."""
    vnode = engine.store.local_vnode(*key)
    if vnode.epochs.latest_epoch != epoch:
        raise StorageUnavailable(f"{OFFSETS_TOPIC} partition {key[1]} is not led here in epoch {epoch}")
    [result] = engine.partitions.append(OFFSETS_TOPIC, [(key[1], b"".join(batches))], engine.clock.time_ms(), node_id)
    if isinstance(result, Exception):
        raise result
    return vnode.wal.next_version - 1, result.needs
