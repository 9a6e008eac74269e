"""The transaction coordinator wired to the coordinator lane and the event loop (``broker.transactions``).

The state machine (:class:`~walgate.coordinator.transactions.TransactionCoordinator`) and its durable log
(:class:`~walgate.storage.transactions_log.TransactionLog`) are only touched on the coordinator lane
(``walgate-coordinator``, beside the group coordinator, so TxnOffsetCommit reads both in one call), so they never race
and a slow storage-lane call never delays them. Every change is written and fsynced to the log before it is
applied and before the request is answered (:meth:`TransactionService.decide`). What the storage lane owns is reached
by storage-lane calls of their own: the markers (data partitions), the transactions partitions hold open at start;
partitions are checked against the topics snapshot the storage lane publishes; producer ids are shared (locked).

Ending a transaction (EndTxn, a fenced or timed-out one) takes three steps, each durable before the next:

1. the Prepare* state is written (the decision: from here on the transaction commits, or aborts, whatever happens);
2. on the storage lane, ``Engine.write_txn_markers`` writes a commit or abort marker into each of its partitions
   placed on this node; in cluster mode each other node holding some of them is sent WriteTxnMarkers
   (:mod:`.txn_remote`) and answers once its markers are durable; then, on commit, on the coordinator lane, the offsets TxnOffsetCommit gave are committed to their groups through
   the consumer groups' own offset path; each call returns once what it wrote is durable (group commit waits for its
   fsyncs). An offset the
   group has committed since the TxnOffsetCommit gave it (a commit time not earlier; Kafka lets the later append
   to the offsets log win) is left as it is, which also makes this step idempotent: run again, it never rolls back
   what the group committed since its first run, nor writes its own offsets twice;
3. the Complete* state is written.

A failure in step 2 (the disk refused a marker or an offset, another node is down or did not write its markers)
leaves the transaction in Prepare*: clients get CONCURRENT_TRANSACTIONS (retriable), steps 2 and 3 run again after
0.2 s, then waiting twice as long each time up to 2 s, until they succeed (Kafka never drops a marker: a node that is
down gets them once it is back), and the periodic check (every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``) runs them too, as does the start of a node that
stopped between steps 1 and 3 (:meth:`TransactionService.open`). Writing a marker twice is harmless (a
partition where the producer has no ongoing transaction still takes it, as in Kafka). A transaction version 2
Prepare* record holds the bumped epoch (and, when the epoch is exhausted, the next producer id), so the markers
written again after a restart carry the epoch the client was answered. The same periodic check aborts ongoing
transactions past their timeout (with an epoch bump, fencing the producer) and forgets idle transactional ids past ``transactional.id.expiration.ms``. A check that raises is logged
in one line and runs again at the next interval.

EndTxn is answered once step 3 is done (or, when step 2 failed, once the decision is durable: the answer is NONE,
the transaction ends later), so a consumer reading right after a commit sees it.

Replicated transaction coordinators (a cluster with ``replication.enable``; docs/plans/replication-wiring.md step 7):
a transactional id's coordinator is the leader of its ``__consumer_offsets`` partition
(:mod:`.coordinator_replicas`), and its state is that partition's records (``["t", id]``), written as the group
coordinator's are: queued, one batch per round, applied in memory at once but answered only once the in-sync
replicas hold it; a round they refused takes back what its writes changed
(:meth:`.transaction_logs.PartitionLogs.restore`: Kafka's coordinator keeps a pending state until its append is
acknowledged). TxnOffsetCommit's offsets are always
held by the group's partition (records ``["h", id]``, a proxy :class:`~walgate.coordinator.transactions.Txn`), also
when this node coordinates the id: they move with the group's partition, and the transaction's marker for that
partition ends them here as another node's marker does (:meth:`TransactionService.end_proxies`). A node that begins
to lead a partition loads its states and held offsets (:meth:`TransactionService.install`; the clients get
COORDINATOR_LOAD_IN_PROGRESS until then) and ends the transactions it finds decided (:meth:`TransactionService.resume`:
the previous leader may have stopped before their markers); one that stops leading it drops them
(:meth:`TransactionService.uninstall`). No transaction a partition holds open is an orphan there: the leader of
its id's partition, wherever that is now, ends it.

Cluster mode (docs/cluster.md, "Transaction coordinators"): a transactional id is coordinated by the node of its
group coordinator partition; the handlers answer NOT_COORDINATOR for another node's. A transactional Produce to this
node's partition of an id another node coordinates is added or verified by asking that node
(:meth:`TransactionService.add_implicitly`, :meth:`TransactionService.verify`). A transaction's offsets given to
another node, the group's coordinator, are held there (:meth:`TransactionService.join_remote` or
:meth:`TransactionService.verify_group` first, a proxy
:class:`~walgate.coordinator.transactions.Txn`) and ended by a marker for the group's coordinator partition
(:data:`OFFSETS_TOPIC`) sent with the others (:meth:`TransactionService.end_proxies` there), or dropped by the
periodic check once that node says their transaction is not open (:meth:`TransactionService.check`). At start, the open
transactions of producer ids another node gave are left to their coordinator (it sends their markers), not ended as
orphans.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Final, TypeVar

from walgate.cluster.model import ControlPlaneError
from walgate.coordinator.offsets import OffsetCommitRecord
from walgate.coordinator.store import EngineOffsetStore
from walgate.coordinator.transactions import (
    MAX_EPOCH,
    Orphan,
    PendingOffset,
    Step,
    TransactionCoordinator,
    Txn,
    TxnState,
)
from walgate.gateway.kafka.group_coordinators import GroupCoordinators
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.led_vnodes import LedVnodes
from walgate.gateway.kafka.node_links import NodeLinks, NodeUnreachable
from walgate.gateway.kafka.transaction_logs import OneFile, PartitionLogs, TransactionLogs
from walgate.gateway.kafka.txn_remote import add_offsets, add_partitions, write_markers
from walgate.gateway.storage_thread import StorageThread
from walgate.replication.partition import NO_LEADER
from walgate.storage.coordinator_partitions import partition_for
from walgate.storage.engine import Engine
from walgate.storage.errors import NotFound, NotHere, StorageUnavailable
from walgate.storage.led_appends import LedAppend, recording
from walgate.storage.producers import ProducerIds
from walgate.storage.replicated_coordinator_log import OFFSETS_TOPIC, ReplicatedTransactionLog
from walgate.wire.errors import ErrorCode

__all__ = ["TransactionService", "COORDINATOR_EPOCH", "abortable_for_version", "for_version",
           "partition_errors", "OFFSETS_TOPIC", "MARKER_ACK_S", "written_markers", "acknowledged"]

log = logging.getLogger("walgate.transactions")

T = TypeVar("T")

COORDINATOR_EPOCH: Final = 0
"""The coordinator epoch markers carry: a transactional id's coordinator partition never moves to another node."""
_RETRY_S: Final = (0.2, 2.0)
"""The first and the longest wait before ending a decided transaction again after a node did not write its markers."""


ABORTABLE_SINCE: Final[Mapping[str, int]] = {"produce": 11, "txn_offset_commit": 4}
"""The first version of each API that may answer TRANSACTION_ABORTABLE (KIP-890); older ones get INVALID_TXN_STATE
(Kafka's AddPartitionsToTxnManager for its ``defaultError`` callers)."""


def abortable_for_version(code: int, api: str, api_version: int) -> int:
    """``code`` as a request of ``api`` at ``api_version`` may be answered: TRANSACTION_ABORTABLE is
    INVALID_TXN_STATE below :data:`ABORTABLE_SINCE`."""
    if code == ErrorCode.transaction_abortable and api_version < ABORTABLE_SINCE[api]:
        return ErrorCode.invalid_txn_state
    return code


def for_version(code: int, api_version: int, fenced_since: int) -> int:
    """``code`` as a request of ``api_version`` may be answered: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below
    ``fenced_since``, the version that introduced it (KIP-588)."""
    if code == ErrorCode.producer_fenced and api_version < fenced_since:
        return ErrorCode.invalid_producer_epoch
    return code


MARKER_ACK_S: Final = 5.0
"""How long a marker in a replicated partition waits for its in-sync replicas before it counts as not written (a
node's WriteTxnMarkers answer is bounded by 10 s; the coordinator tries again)."""


def written_markers(engine: Engine, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                    partitions: list[tuple[str, int]]) -> list[Exception | LedAppend | None]:
    """On the storage lane: :meth:`Engine.write_txn_markers` of ``partitions``, each answered: the exception that
    refused it, the append to wait for when it went to a replicated vnode led here (Kafka appends markers with
    acks=all: :func:`acknowledged`), else None (durable: done)."""
    with recording() as appended:
        errors = engine.write_txn_markers(producer_id, producer_epoch, coordinator_epoch, commit, partitions)
    by_vnode = {a.key: a for a in appended}
    out: list[Exception | LedAppend | None] = []
    for (topic, partition), error in zip(partitions, errors):
        t = engine.catalog.topics.get(topic)
        out.append(error if error is not None or t is None else by_vnode.get((t.db, partition)))
    return out


async def acknowledged(led: LedVnodes | None, wait: LedAppend | None) -> ErrorCode:
    """NONE once a marker's append ``wait`` (None: nothing to wait for) is held by its vnode's in-sync replicas,
    else the error its wait ended on (:meth:`LedVnodes.writes_acknowledged`, at most :data:`MARKER_ACK_S`)."""
    if wait is None or led is None:
        return ErrorCode.none
    return await led.writes_acknowledged([wait], MARKER_ACK_S)


def partition_errors(engine: Engine, partitions: Iterable[tuple[str, int]],
                     writable: set[str]) -> dict[tuple[str, int], int]:
    """On the coordinator lane: the partitions a transaction may not take, with their error (TOPIC_AUTHORIZATION_FAILED
    for a topic not in ``writable``, UNKNOWN_TOPIC_OR_PARTITION, UNSUPPORTED_FOR_MESSAGE_FORMAT for a TDengine topic,
    whose rows cannot take markers), by the published topics snapshot."""
    topics = engine.topics()
    out: dict[tuple[str, int], int] = {}
    for topic, partition in partitions:
        if topic not in writable:
            out[topic, partition] = ErrorCode.topic_authorization_failed
        elif not topics.has_partition(topic, partition):
            out[topic, partition] = ErrorCode.unknown_topic_or_partition
        elif not topics.is_native(topic):
            out[topic, partition] = ErrorCode.unsupported_for_message_format
    return out


class TransactionService:
    """The node's transaction coordinator (see the module docstring); :meth:`open` before use."""

    def __init__(self, engine: Engine, lane: StorageThread, storage: StorageThread,
                 coordinator: TransactionCoordinator, check_interval_ms: int = 10_000,
                 coordinators: GroupCoordinators | None = None, links: NodeLinks | None = None,
                 led: Callable[[], LedVnodes | None] | None = None, replicated: bool = False) -> None:
        """``lane``: the coordinator lane (the state machine and its log); ``storage``: the storage lane (markers);
        cluster mode: ``coordinators`` places transactional ids as groups, ``links`` reaches the other nodes, ``led``
        the node's replica manager (None until it runs): a replicated partition's marker goes to its leader and
        counts once its in-sync replicas hold it; ``replicated``: the states are kept in the coordinator partitions
        this node leads (:class:`.PartitionLogs`; a replicated cluster: "Replicated transaction coordinators" in the
        module docstring), else in one file (:class:`.OneFile`)."""
        self.coordinators = coordinators
        coordinator.kept_apart = replicated
        self.links = links
        self._led = led
        self.coordinator = coordinator
        self.lane = lane
        self.storage = storage
        self._engine = engine  # its markers on the storage lane; its topics snapshot, producer ids, offsets on the lane
        self._offsets = EngineOffsetStore(engine)
        self._logs: TransactionLogs = OneFile(engine, coordinator) if not replicated else PartitionLogs(
            coordinator, lambda key: partition_for(key, self._placed().partitions), engine.damage_log)
        self._check_interval_ms = check_interval_ms
        self._completing: set[str] = set()  # transactional ids whose markers are being written
        self._orphans: list[Orphan] = []  # open transactions no transactional id runs (storage lane)
        self._task: asyncio.Task[None] | None = None
        self._retries: dict[str, asyncio.Task[None]] = {}  # decided transactions ended again soon (a node refused)
        self._resuming: set[asyncio.Task[None]] = set()  # decided transactions a new leader loaded, being ended
        self._failures: dict[str, str] = {}  # why each of them was not ended, as last logged
        # per decided transaction (by id, for its producer id, epoch, decision and start): the partitions whose markers are
        # durable already (this node's and other nodes' that answered), which a retry does not write or send again
        self._written: dict[str, tuple[tuple[int, int, TxnState, int], set[tuple[str, int]]]] = {}

    # ------------------------------------------------------------------ lane parts

    def _ongoing(self) -> dict[int, list[tuple[str, int]]]:
        """On the storage lane: the transactions partitions hold open, by producer id."""
        return {pid: [(t, p) for t, p, _ in parts] for pid, parts in self._engine.ongoing_transactions().items()}

    async def _reconcile(self) -> None:
        """At start: the transactions partitions hold open that the coordinator is not running
        (:meth:`TransactionCoordinator.orphans`), ended now or, a producer id nobody owns, once its timeout must have
        passed (:meth:`_end_orphans`, run again by every check)."""
        ongoing = await self.storage.call(self._ongoing)
        if self.coordinators is not None:  # another node's producer ids: its coordinator ends them (WriteTxnMarkers)
            node = self.coordinators.member.node_id
            ongoing = {pid: tps for pid, tps in ongoing.items() if pid % ProducerIds.NODES == node}
        self._orphans = await self.lane.call(self.coordinator.orphans, ongoing, now_ms())
        for orphan in self._orphans:
            log.warning("producer %d has a transaction open in %s that no transactional id runs: it is %s",
                        orphan.producer_id, ", ".join(f"{t}-{p}" for t, p in orphan.partitions),
                        ("committed" if orphan.commit else "aborted") + (
                            "" if orphan.epoch != MAX_EPOCH else
                            f" in {self.coordinator.max_timeout_ms} ms (transaction.max.timeout.ms); until then "
                            "read_committed consumers stop before it"))
        await self.storage.call(self._end_orphans)

    def _end_orphans(self) -> None:
        """On the storage lane: write the markers of the orphans that are due; a partition that refuses is logged
        and tried again at the next check (its last stable offset stays until then)."""
        now, kept = now_ms(), []
        for orphan in self._orphans:
            if orphan.due_ms > now:
                kept.append(orphan)
                continue
            partitions = list(orphan.partitions)
            errors = self._engine.write_txn_markers(orphan.producer_id, orphan.epoch, COORDINATOR_EPOCH, orphan.commit,
                                                    partitions)
            refused = tuple(tp for tp, error in zip(partitions, errors)
                            if error is not None and not isinstance(error, NotFound))
            if len(refused) < len(partitions):
                log.info("producer %d's transaction that no transactional id runs is %s in %s", orphan.producer_id,
                         "committed" if orphan.commit else "aborted",
                         ", ".join(f"{t}-{p}" for t, p in partitions if (t, p) not in refused))
            if refused:
                log.error("the marker ending producer %d's transaction in %s could not be written (%s); tried again "
                          "at the next check", orphan.producer_id, ", ".join(f"{t}-{p}" for t, p in refused),
                          next(e for e in errors if e is not None and not isinstance(e, NotFound)))
                kept.append(replace(orphan, partitions=refused))
        self._orphans = kept

    def record(self, changes: Iterable[tuple[str, Txn | None]], proxy: bool = False) -> None:
        """On the coordinator lane: make ``changes`` (``proxy``: of offsets held for other nodes' transactions)
        durable, then apply them (StorageUnavailable: nothing changed). Replicated: the writes are queued to their
        coordinator partitions and applied at once; the lane call returns once the in-sync replicas hold them, or
        raises StorageUnavailable, and what they changed is taken back (:meth:`.PartitionLogs.restore`)."""
        changes = list(changes)
        self._logs.write(changes, proxy)
        for tid, txn in changes:
            self.coordinator.apply(tid, txn, proxy)

    @property
    def holds_own_offsets(self) -> bool:
        """Whether TxnOffsetCommit's offsets for this node's groups are held apart also when this node coordinates
        the transaction (replicated: they are records of the group's partition, :mod:`.transaction_logs`)."""
        return self._logs.holds_own_offsets

    def _placed(self) -> GroupCoordinators:
        assert self.coordinators is not None, "a replicated transaction coordinator is a cluster's"
        return self.coordinators

    def _decided(self, decide: Callable[[TransactionCoordinator, Engine], Step]) -> Step:
        step = decide(self.coordinator, self._engine)
        if step.txn is not None:
            self.record([(step.txn.transactional_id, step.txn)])
        return step

    def _prepared(self, tid: str) -> Txn | None:
        """On the coordinator lane: ``tid``'s transaction when it is in Prepare* (None: already completed)."""
        txn = self.coordinator.txns.get(tid)
        if txn is None or txn.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return None
        return txn

    def _markers(self, txn: Txn, partitions: list[tuple[str, int]]
                 ) -> tuple[dict[int, list[tuple[str, int]]], list[tuple[str, int]], dict[tuple[str, int], LedAppend],
                            str | None]:
        """On the storage lane: step 2's markers for ``txn`` (in Prepare*) in those of ``partitions`` on this node.
        Returns the partitions on other nodes, by node (cluster mode: a replicated one's leader, :meth:`_node_of`),
        those done here (durable, or deleted: no marker needed), those written to a replicated vnode led here, with
        the append to wait for (:func:`acknowledged`), and why one refused its marker (None: none did)."""
        commit = txn.state is TxnState.PREPARE_COMMIT
        answers = written_markers(self._engine, txn.producer_id, txn.producer_epoch, COORDINATOR_EPOCH, commit,
                                  partitions)
        elsewhere: dict[int, list[tuple[str, int]]] = {}
        done: list[tuple[str, int]] = []
        waits: dict[tuple[str, int], LedAppend] = {}
        refused: str | None = None
        for (topic, partition), error in zip(partitions, answers):
            if isinstance(error, NotHere):
                elsewhere.setdefault(self._node_of(topic, partition, error.node), []).append((topic, partition))
            elif isinstance(error, LedAppend):
                waits[topic, partition] = error
            elif error is None or isinstance(error, NotFound):  # a deleted partition needs no marker
                done.append((topic, partition))
            elif refused is None:
                refused = (f"the {'commit' if commit else 'abort'} marker of transaction {txn.transactional_id!r} "
                           f"could not be written to {topic}-{partition}: {error}")
        return elsewhere, done, waits, refused

    def _node_of(self, topic: str, partition: int, placed: int) -> int:
        """The node a partition's marker is sent to: a replicated partition's leader, as the partition state this
        node read names it (Kafka sends markers to each partition's leader), else ``placed`` (where the partition is
        placed, or its first replica while no leader is known: it answers NOT_LEADER_OR_FOLLOWER and the marker is
        sent again). Any lane."""
        led = None if self._led is None else self._led()
        vgroup = self._engine.topics().replicated_vgroup(topic, partition)
        state = None if led is None or vgroup is None else led.state_of(*vgroup)
        return placed if state is None or state.leader == NO_LEADER else state.leader

    async def _held_offsets(self, txn: Txn) -> tuple[dict[int, list[tuple[str, int]]], list[int]]:
        """Cluster mode: the coordinator partitions of ``txn``'s groups that hold the offsets TxnOffsetCommit gave
        them apart from ``txn``, which its marker ends (Kafka's marker in ``__consumer_offsets``): those of other
        nodes, as :data:`OFFSETS_TOPIC` partitions by node (a marker is sent there), and this node's when it holds
        its own groups' offsets apart too (:attr:`holds_own_offsets`; :meth:`end_proxies` ends them here)."""
        if self.coordinators is None or not txn.groups:
            return {}, []
        placement = await self.coordinators.placement()
        elsewhere: dict[int, list[tuple[str, int]]] = {}
        here: list[int] = []
        for group in sorted(txn.groups):
            node, partition = placement.owner(group), placement.partition(group)
            if node != self.coordinators.member.node_id:
                if (OFFSETS_TOPIC, partition) not in elsewhere.setdefault(node, []):
                    elsewhere[node].append((OFFSETS_TOPIC, partition))
            elif self.holds_own_offsets and partition not in here:
                here.append(partition)
        return elsewhere, here

    async def _remote_markers(self, txn: Txn, elsewhere: Mapping[int, list[tuple[str, int]]],
                              written: set[tuple[str, int]]) -> None:
        """Step 2's markers in the partitions of other nodes, every node asked at once with WriteTxnMarkers (one
        failing node delays no other, as Kafka's queue per broker); the partitions a node wrote join ``written``.
        Raises (:class:`StorageUnavailable`) when a node did not answer or did not write every marker."""
        failures = [f for f in await asyncio.gather(*(self._node_markers(txn, node, partitions, written)
                                                      for node, partitions in sorted(elsewhere.items())))
                    if f is not None]
        if failures:
            raise StorageUnavailable("; ".join(failures))

    async def _node_markers(self, txn: Txn, node: int, partitions: list[tuple[str, int]],
                            written: set[tuple[str, int]]) -> str | None:
        """Node ``node``'s markers of ``txn`` in ``partitions``: those it wrote join ``written``; why it did not
        write them all (None: it did)."""
        if self.links is None:
            return f"partitions {_names(partitions)} are on node {node} and this node reaches no other"
        try:
            codes = await write_markers(self.links, node, txn.producer_id, txn.producer_epoch, COORDINATOR_EPOCH,
                                        txn.state is TxnState.PREPARE_COMMIT, partitions)
        except NodeUnreachable as e:
            return f"the markers of transaction {txn.transactional_id!r} in {_names(partitions)} were not written: {e}"
        written.update(tp for tp, code in codes.items() if code == ErrorCode.none or self._deleted(tp, code))
        refused = {tp: code for tp, code in codes.items() if tp not in written}
        if not refused:
            return None
        return (f"node {node} did not write the markers of transaction {txn.transactional_id!r}: " +
                ", ".join(f"{t}-{p} {_code_name(c)}" for (t, p), c in refused.items()))

    def _deleted(self, partition: tuple[str, int], code: int) -> bool:
        """Whether a node's answer ``code`` for ``partition``'s marker means it needs none: UNKNOWN_TOPIC_OR_PARTITION
        for a partition this node's topics no longer have either (deleted). While this node still knows it, the
        answer is retriable, as Kafka's ``TransactionMarkerRequestCompletionHandler`` retries it (a node restarting or
        taking the partition over may not know it yet) and drops a marker only when its own metadata has no such
        partition (``TransactionMarkerChannelManager``)."""
        return code == ErrorCode.unknown_topic_or_partition and not self._engine.topics().has_partition(*partition)

    def _commit_offsets(self, txn: Txn) -> None:
        """On the coordinator lane: step 2's offsets of committed ``txn``; raises when a group refused them."""
        records = [OffsetCommitRecord(o.group, o.topic, o.partition, o.offset, o.leader_epoch, o.metadata,
                                      o.commit_ms) for o in txn.offsets if not self._committed_since(o)]
        for r, error in zip(records, self._offsets.commit(records)):
            if error is not None and not isinstance(error, NotFound):
                raise StorageUnavailable(f"the offsets of transaction {txn.transactional_id!r} could not be committed "
                                         f"to group {r.group_id!r}: {error}")

    def _committed_since(self, o: PendingOffset) -> bool:
        """Whether the group has an offset for ``o``'s partition committed since ``o`` was given (by a commit of its
        own, or by this transaction's earlier step 2): commit times in ms, so a commit in the same millisecond counts
        as later (Kafka orders by position in the offsets log; a plain commit that close is taken to follow)."""
        committed = self._offsets.fetch(o.group, o.topic, o.partition)
        return committed is not None and committed.commit_timestamp_ms >= o.commit_ms

    def _complete(self, tid: str) -> None:
        txn = self.coordinator.txns.get(tid)
        if txn is not None and txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            self.record([(tid, self.coordinator.complete(tid, now_ms()))])

    # ------------------------------------------------------------------ event-loop API

    async def open(self) -> None:
        """Load the durable state, end the transactions partitions hold open that no transactional id runs (now, or
        once due), finish the transactions a stop left decided, start the periodic check. Replicated: the states
        come with the coordinator partitions this node leads (:meth:`install`), and no transaction a partition
        holds open is an orphan (its coordinator may be any node, which sends its markers)."""
        if await self.lane.call(self._logs.load):
            await self._reconcile()
            await self._finish_decided()
        self._task = asyncio.get_running_loop().create_task(self._checks(), name="walgate-txn-timer")

    def install(self, partition: int, states: ReplicatedTransactionLog, held: ReplicatedTransactionLog) -> list[str]:
        """On the coordinator lane, replicated: coordinator partition ``partition`` is led here and loaded, its
        transaction states and held offsets in ``states`` and ``held`` (Kafka's
        ``TransactionStateManager.loadTransactionsForTxnTopicPartition``); the ids of its transactions decided and
        not complete, whose markers the caller sends (:meth:`finish`). A state that does not read is reported and
        skipped."""
        self._partition_logs().install(partition, states, held)
        return [tid for tid in states.records if self._prepared(tid) is not None]

    def resume(self, tids: Iterable[str]) -> None:
        """Replicated, on the event loop: end the decided transactions of ``tids`` (steps 2 and 3, as
        :meth:`finish`) in the background: a new leader of their partition sends their markers, which the previous
        one may not have sent."""
        for tid in tids:
            task = asyncio.get_running_loop().create_task(self.finish(tid), name=f"walgate-txn-resume-{tid}")
            self._resuming.add(task)
            task.add_done_callback(self._resuming.discard)

    def uninstall(self, partition: int) -> None:
        """On the coordinator lane, replicated: coordinator partition ``partition`` is no longer led here: its
        transactional ids' states and the offsets its groups hold are dropped from memory (Kafka's
        ``removeTransactionsForTxnTopicPartition``); the transactions being ended stop at their next step."""
        for tid in self._partition_logs().uninstall(partition):
            self._written.pop(tid, None)

    def _partition_logs(self) -> PartitionLogs:
        logs = self._logs
        assert isinstance(logs, PartitionLogs), "only a replicated transaction coordinator has coordinator partitions"
        return logs

    async def call(self, fn: Callable[[TransactionCoordinator], T]) -> T:
        """A read of the coordinator's state on the coordinator lane."""
        return await self.lane.call(fn, self.coordinator)

    async def decide(self, decide: Callable[[TransactionCoordinator, Engine], Step]) -> Step:
        """Run ``decide(coordinator, engine)`` on the coordinator lane (``engine``: for its topics snapshot and
        producer ids only) and make the state it returns durable before returning; when that state is Prepare*, end
        the transaction (steps 2 and 3) before returning too."""
        step = await self.lane.call(self._decided, decide)
        if step.txn is not None and step.txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            await self.finish(step.txn.transactional_id)
        return step

    async def finish(self, tid: str) -> None:
        """Steps 2 and 3 for ``tid``; when step 2 fails (logged) the transaction stays in Prepare*."""
        if tid in self._completing:
            return
        self._completing.add(tid)
        try:
            txn = await self.lane.call(self._prepared, tid)
            if txn is not None:  # each call returns once what it wrote is durable
                written = self._written_of(txn)
                pending = sorted(txn.partitions - written)
                elsewhere, done, waits, refused = await self.storage.call(self._markers, txn, pending) if pending \
                    else ({}, [], {}, None)
                led = None if self._led is None else self._led()
                for tp, code in zip(waits, await asyncio.gather(*(acknowledged(led, w) for w in waits.values()))):
                    if code == ErrorCode.none:
                        done.append(tp)
                    elif refused is None:
                        refused = (f"the marker of transaction {tid!r} in {tp[0]}-{tp[1]} was not acknowledged by its "
                                   f"in-sync replicas ({code.name})")
                written.update(done)
                held_elsewhere, held_here = await self._held_offsets(txn)
                for node, partitions in held_elsewhere.items():
                    elsewhere.setdefault(node, []).extend(tp for tp in partitions if tp not in written)
                here = [(OFFSETS_TOPIC, p) for p in held_here if (OFFSETS_TOPIC, p) not in written]
                if here:  # offsets this node's groups hold, ended as another node's marker ends them
                    await self.end_proxies(txn.producer_id, txn.producer_epoch,
                                           txn.state is TxnState.PREPARE_COMMIT, [p for _, p in here])
                    written.update(here)
                await self._remote_markers(txn, {n: ps for n, ps in elsewhere.items() if ps}, written)
                if refused is not None:
                    raise StorageUnavailable(refused)
                if txn.state is TxnState.PREPARE_COMMIT and txn.offsets:
                    await self.lane.call(self._commit_offsets, txn)
                await self.lane.call(self._complete, tid)
                self._written.pop(tid, None)
        except Exception as exc:  # noqa: BLE001 - retried soon, and by the periodic check
            why = f"{type(exc).__name__}: {exc}"
            if self._failures.get(tid) != why:  # logged when it changes, not at every retry
                self._failures[tid] = why
                log.warning("transaction %r stays decided but not complete (%s); it is tried again until it is",
                            tid, why)
            if tid not in self._retries:
                self._retries[tid] = asyncio.get_running_loop().create_task(self._retry(tid),
                                                                            name=f"walgate-txn-retry-{tid}")
        finally:
            self._completing.discard(tid)

    def _written_of(self, txn: Txn) -> set[tuple[str, int]]:
        """The partitions whose markers for ``txn``'s decision are durable already (empty for a new decision)."""
        key = (txn.producer_id, txn.producer_epoch, txn.state, txn.start_ms)
        known = self._written.get(txn.transactional_id)
        if known is None or known[0] != key:
            known = self._written[txn.transactional_id] = (key, set())
        return known[1]

    async def _retry(self, tid: str) -> None:
        """End ``tid``'s decided transaction again, waiting longer each time (up to the longest of
        :data:`_RETRY_S`), until it is complete: Kafka never drops a marker, a node that is down gets it once back."""
        wait = _RETRY_S[0]
        try:
            while await self.lane.call(self._prepared, tid) is not None:
                await asyncio.sleep(wait)
                wait = min(wait * 2, _RETRY_S[1])
                await self.finish(tid)
            log.info("transaction %r is complete: every node wrote its markers", tid)
        except Exception as exc:  # noqa: BLE001 - the periodic check goes on with it
            log.error("retrying transaction %r stopped (%s: %s); the periodic check goes on", tid,
                      type(exc).__name__, exc)
        finally:
            self._retries.pop(tid, None)
            self._failures.pop(tid, None)

    async def _finish_decided(self) -> None:
        for txn in await self.call(lambda c: c.preparing()):
            await self.finish(txn.transactional_id)

    async def check(self) -> None:
        """The periodic check: abort timed-out transactions, forget expired ids, end the orphans that are due, finish
        decided transactions, drop held offsets whose transaction is no longer open (cluster mode)."""
        def expire() -> list[tuple[str, Txn | None]]:
            changes = self.coordinator.expire(now_ms())
            self.record(changes)
            return changes

        changes = await self.lane.call(expire)
        await self.storage.call(self._end_orphans)
        for tid, txn in changes:
            if txn is None:
                log.info("transactional id %r expired", tid)
            else:
                log.info("transaction %r of producer %d timed out after %d ms: aborted, epoch bumped to %d",
                         tid, txn.producer_id, txn.timeout_ms, txn.producer_epoch)
        await self._finish_decided()
        await self._drop_stale_proxies()

    async def _drop_stale_proxies(self) -> None:
        """Cluster mode: the held offsets (proxies) past their timeout whose transaction their coordinator no longer
        has open (it answers that no group of theirs is in an ongoing transaction of that producer id and epoch, or
        that it does not know the producer id: its markers were all sent, so none will come for them) are dropped,
        as an abort. One that changed meanwhile (a new TxnOffsetCommit) is kept; while the coordinator cannot be
        asked, or answers anything else (a transaction being ended, a later epoch), it is kept."""
        for proxy in await self.call(lambda c: c.proxies_due(now_ms())):
            try:
                node = await self.coordinator_of(proxy.transactional_id)
            except ControlPlaneError:
                return
            if node is None:
                continue
            answers = [await self.verify_group(node, proxy.transactional_id, proxy.producer_id,
                                               proxy.producer_epoch, group) for group in sorted(proxy.groups)]
            if not all(a in (ErrorCode.transaction_abortable, ErrorCode.invalid_producer_id_mapping) for a in answers):
                continue

            def drop(seen: Txn = proxy) -> bool:
                if self.coordinator.proxies.get(seen.transactional_id) != seen:
                    return False
                self.record([(seen.transactional_id, None)], proxy=True)
                return True

            if await self.lane.call(drop):
                log.warning("transactional id %r: offsets held for groups %s of producer %d (epoch %d) dropped, its "
                            "coordinator (node %d) has no such transaction open", proxy.transactional_id,
                            ", ".join(sorted(proxy.groups)), proxy.producer_id, proxy.producer_epoch, node)

    async def _checks(self) -> None:
        while True:
            await asyncio.sleep(self._check_interval_ms / 1000)
            try:
                await self.check()
            except Exception as exc:  # noqa: BLE001 - logged, the next interval tries again
                log.error("transaction check failed (%s: %s); next in %d ms", type(exc).__name__, exc,
                          self._check_interval_ms)

    async def add_implicitly(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """KIP-890 part 2, for a transactional Produce v12+: the partitions join the producer's transaction (starting
        one; durable before returning), as Kafka's broker asks its coordinator with AddPartitionsToTxn
        (``verify_only`` false). Per partition, NONE or the code refusing it, as Produce answers it: a partition
        that does not exist UNKNOWN_TOPIC_OR_PARTITION, one of a TDengine topic UNSUPPORTED_FOR_MESSAGE_FORMAT (not
        added); a fenced epoch INVALID_PRODUCER_EPOCH; the coordinator's retriable answers (CONCURRENT_TRANSACTIONS
        while the previous transaction's markers are written) as they are."""
        remote = await self._remote(transactional_id, producer_id, producer_epoch, partitions, verify_only=False)
        if remote is not None:
            return {tp: ErrorCode.invalid_producer_epoch if code == ErrorCode.producer_fenced else code
                    for tp, code in remote.items()}
        refused: dict[tuple[str, int], int] = {}

        def add(c: TransactionCoordinator, engine: Engine) -> Step:
            refused.update(partition_errors(engine, partitions, {t for t, _ in partitions}))
            wanted = [tp for tp in partitions if tp not in refused]
            if not wanted:
                return Step(ErrorCode.none)
            return c.add_partitions(transactional_id, producer_id, producer_epoch, wanted, now_ms(), tv=2)

        code = (await self.decide(add)).error
        if code == ErrorCode.producer_fenced:
            code = ErrorCode.invalid_producer_epoch
        return {tp: refused.get(tp, code) for tp in partitions}

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[tuple[str, int]], api_version: int) -> dict[tuple[str, int], int]:
        """KIP-890 part 1, for Produce at ``api_version``: per (topic, partition) of ``partitions``, the error code
        refusing a transactional batch of ``producer_id`` at ``producer_epoch``, or NONE when the partition is in that
        producer's ongoing transaction (a partition not added is TRANSACTION_ABORTABLE, INVALID_TXN_STATE before v11;
        another epoch INVALID_PRODUCER_EPOCH, as Produce answers them; CONCURRENT_TRANSACTIONS while the transaction
        is being ended, which Produce retries). One question for all of them: one AddPartitionsToTxn to a coordinator
        on another node, as Kafka's ``AddPartitionsToTxnManager`` batches them per node."""
        codes = await self._remote(transactional_id, producer_id, producer_epoch, partitions, verify_only=True)
        if codes is None:
            codes = await self.call(lambda c: c.verify(transactional_id, producer_id, producer_epoch, partitions))
        return {tp: ErrorCode.invalid_producer_epoch if code == ErrorCode.producer_fenced else
                abortable_for_version(code, "produce", api_version) for tp, code in codes.items()}

    async def _remote(self, tid: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]],
                      verify_only: bool) -> dict[tuple[str, int], int] | None:
        """None when this node coordinates ``tid`` and has loaded its coordinator partition; COORDINATOR_LOAD_IN_PROGRESS
        for every partition while it loads it (its state is not known yet: Kafka's coordinator answers that, which its
        ``AddPartitionsToTxnManager`` turns into a Produce's retriable NOT_ENOUGH_REPLICAS); else the answers of its
        coordinator, another node, asked with AddPartitionsToTxn v5 (COORDINATOR_NOT_AVAILABLE when the coordinators'
        placement cannot be read now)."""
        try:
            owner = await self.coordinator_of(tid)
        except ControlPlaneError as e:
            log.warning("the coordinator of transactional id %r is not known: %s", tid, e)
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        if owner is None:
            replicated = None if self.coordinators is None else self.coordinators.replicated
            if replicated is not None and replicated.loading(tid):
                return dict.fromkeys(partitions, ErrorCode.coordinator_load_in_progress)
            return None
        if self.links is None:  # another node's id and no way to ask it
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        return await add_partitions(self.links, owner, tid, producer_id, producer_epoch, partitions, verify_only)

    async def coordinator_of(self, tid: str) -> int | None:
        """The node coordinating ``tid`` when it is another (cluster mode), else None; raises
        :class:`ControlPlaneError` when the coordinators' placement cannot be read now."""
        if self.coordinators is None:
            return None
        owner = await self.coordinators.owner(tid)
        return None if owner == self.coordinators.member.node_id else owner

    async def join_remote(self, node: int, tid: str, producer_id: int, producer_epoch: int, group: str) -> int:
        """Cluster mode, for a TxnOffsetCommit v5 to this node (the group's coordinator) of ``tid``, which ``node``
        coordinates: ``group`` joins the producer's transaction there (AddOffsetsToTxn; already in it: NONE). The
        coordinator's answer, COORDINATOR_NOT_AVAILABLE when it could not be asked."""
        if self.links is None:
            return ErrorCode.coordinator_not_available
        try:
            return await add_offsets(self.links, node, tid, producer_id, producer_epoch, group)
        except NodeUnreachable as e:
            log.warning("transactional id %r: its coordinator, node %d, could not be asked: %s", tid, node, e)
            return ErrorCode.coordinator_not_available

    async def verify_group(self, node: int, tid: str, producer_id: int, producer_epoch: int, group: str) -> int:
        """Cluster mode, for a TxnOffsetCommit v0–v4 to this node (the group's coordinator) of ``tid``, which ``node``
        coordinates: whether ``group`` is in the producer's ongoing transaction there (AddPartitionsToTxn v5
        ``verify_only`` for the group's :data:`OFFSETS_TOPIC` partition, as Kafka's group coordinator verifies it; it
        never adds the group, which the client's AddOffsetsToTxn did). NONE, the coordinator's refusal
        (TRANSACTION_ABORTABLE when the group is not in an ongoing transaction), COORDINATOR_NOT_AVAILABLE when it
        could not be asked."""
        if self.links is None or self.coordinators is None:
            return ErrorCode.coordinator_not_available
        try:
            offsets_partition = (OFFSETS_TOPIC, (await self.coordinators.placement()).partition(group))
        except ControlPlaneError:
            return ErrorCode.coordinator_not_available
        codes = await add_partitions(self.links, node, tid, producer_id, producer_epoch, [offsets_partition],
                                     verify_only=True)
        code = codes[offsets_partition]
        return ErrorCode.coordinator_not_available if code == ErrorCode.network_exception else code

    async def end_proxies(self, producer_id: int, epoch: int, commit: bool, partitions: list[int]) -> None:
        """Cluster mode, for a marker another node sent to this node's coordinator ``partitions``: the offsets this
        node holds for that producer's transaction (:meth:`TransactionCoordinator.proxy_offsets`) committed to their
        groups (``commit``) or dropped, durable before returning. Raises (StorageUnavailable) when a group refused
        them: the sender tries again."""
        assert self.coordinators is not None
        placement = await self.coordinators.placement()
        wanted = set(partitions)
        missing = self._logs.not_loaded(wanted)
        if missing:  # led elsewhere, or not loaded yet: the sender retries
            raise StorageUnavailable(f"{OFFSETS_TOPIC} partitions {missing} are not led and loaded here")

        def end() -> list[Txn]:
            self.coordinator.marker_arrived(producer_id)
            ended = self.coordinator.proxies_ended(producer_id, epoch, lambda g: placement.partition(g) in wanted)
            if commit:
                for txn in ended:
                    self._commit_offsets(txn)
            return ended

        def drop(ended: list[Txn]) -> None:
            self.record([(t.transactional_id, None) for t in ended
                         if self.coordinator.proxies.get(t.transactional_id) == t], proxy=True)

        # the offsets durable first, then the proxies dropped: a refusal in between leaves them to the sender's retry
        await self.lane.call(drop, await self.lane.call(end))

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for task in (*self._retries.values(), *self._resuming):
            task.cancel()
        if self.links is not None:
            self.links.close()


def _names(partitions: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in partitions)


def _code_name(code: int) -> str:
    """Kafka's name of error ``code``, or the number when it is none known (another node's newer code)."""
    return ErrorCode(code).name.upper() if code in ErrorCode._value2member_map_ else f"error {code}"
