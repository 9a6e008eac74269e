"""The partition states in etcd (``partitions/<db id>/<vgroup>``): read, watched, changed by a vnode's leader and
reconciled by the controller. The codec and the rules are pure (:mod:`walgate.cluster.partition_codec`,
:mod:`walgate.replication.partition`); this module is their asyncio shell over :class:`EtcdSession`.

Every change is one etcd transaction comparing each changed key's ``mod_revision`` (its partition epoch), so two
writers never overwrite each other:

* the leader's ISR change (:meth:`PartitionStates.alter_isr`, KIP-497) also compares the proposer's and each
  joiner's ``nodes/<id>`` ``mod_revision`` with the one read when its registration was found live under the broker
  epoch it leads or joins under (KIP-903; :func:`~walgate.cluster.registry.broker_epoch`): a leader whose lease ran
  out changes nothing;
* the controller's (:class:`Reconciler`) also compares its controller epoch
  (:meth:`ControllerElection.fenced_txn`): a paused controller that was replaced writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from aetcd.utils import prefix_range_end

from walgate.cluster.election import ControllerElection
from walgate.cluster.elections import ElectionRequest, ElectionRequestDamaged, decide, decode_request, encode_outcome
from walgate.cluster.etcd import Compacted, EtcdSession, follow_prefix, tx
from walgate.cluster.model import (
    ControlPlaneError,
    ControlPlaneUnavailable,
    Keys,
    NodeInfo,
    NotController,
    encode_record,
)
from walgate.cluster.partition_codec import (
    MAX_STATES_PER_TXN,
    CatalogVnodes,
    PartitionId,
    PartitionStateDamaged,
    ReplicatedVnode,
    batches,
    decode_state,
    encode_state,
    missing_states,
    partition_id,
    partition_key,
    partitions_prefix,
    reconcile_all,
    reconfigured_states,
    unwanted_states,
)
from walgate.cluster.placement import place_vgroup_record
from walgate.cluster.reassignments import ReassignmentRequest, first_states
from walgate.cluster.registry import broker_epoch
from walgate.replication.elections import ElectionType, elect_leader, imbalanced
from walgate.replication.partition import NO_LEADER, AlterIsr, IsrMember, PartitionState, alter_partition
from walgate.wire.errors import ErrorCode

__all__ = ["PartitionStates", "AlterOutcome", "Snapshot", "Reconciler"]

log = logging.getLogger("walgate.cluster")

REREAD_S = 15.0
"""How long a node's watch of the partition states runs before they are read again (a change the watch never
delivered is taken then: :func:`~walgate.cluster.etcd.follow_prefix`)."""


@dataclass(frozen=True)
class AlterOutcome:
    """What became of a leader's ISR proposal. ``state``: the one written, or the key's state read after etcd
    refused the write (None when the key is gone), or the leader's own when the rules refused it before any write.
    ``error``: None when written, else INVALID_UPDATE_VERSION (the state changed since the leader read it: retry from
    ``state``), FENCED_LEADER_EPOCH (the proposer no longer leads in that epoch: it stops leading),
    STALE_BROKER_EPOCH (the proposer is not registered under the broker epoch it leads under: it stops leading),
    INELIGIBLE_REPLICA (a joiner is not registered under the broker epoch it fetched with) or INVALID_REQUEST."""

    state: PartitionState | None
    error: ErrorCode | None


class PartitionStates:
    """The partition states of one cluster; ``states`` and ``revision`` are what :meth:`read_all` or :meth:`follow`
    last saw (``revision`` 0: nothing read yet); ``isr_shrinks`` and ``isr_expands`` count the ISR changes
    :meth:`alter_isr` wrote that removed, or added, members (Kafka's IsrShrinksPerSec and IsrExpandsPerSec). A
    damaged value is logged at ERROR and left out by every read and by the watch alike (its vnode has no state,
    reported as None, until it is written again); a key that names no vnode is logged and ignored."""

    def __init__(self, session: EtcdSession, keys: Keys) -> None:
        self.session = session
        self.keys = keys
        self.states: dict[PartitionId, PartitionState] = {}
        self.revision = 0
        self.isr_shrinks = 0
        self.isr_expands = 0

    def _decode(self, kv: Any) -> tuple[PartitionId, PartitionState | None] | None:
        """(the vnode, its state or None when the value is damaged) of a ``partitions/`` key-value; None when the key
        names no vnode. Both damages are logged at ERROR."""
        try:
            pid = partition_id(self.keys, kv.key)
        except PartitionStateDamaged as e:
            log.error("partition states: %s", e)
            return None
        try:
            return pid, decode_state(kv.value, kv.mod_revision)
        except PartitionStateDamaged as e:
            log.error("partition state %r left out: %s", kv.key.decode(errors="replace"), e)
            return pid, None

    def load(self, revision: int, kvs: list[Any]) -> dict[PartitionId, PartitionState]:
        """Keep the states ``kvs`` (every ``partitions/`` key, read at ``revision``) hold, damaged ones left out."""
        decoded = (self._decode(kv) for kv in kvs)
        self.states = {pid: state for pid, state in (d for d in decoded if d is not None) if state is not None}
        self.revision = revision
        return self.states

    async def read_all(self) -> dict[PartitionId, PartitionState]:
        """Every state, read at one revision (kept in ``revision``)."""
        return self.load(*await self.session.get_prefix(partitions_prefix(self.keys)))

    async def read(self, pid: PartitionId) -> PartitionState | None:
        kv = await self.session.get(partition_key(self.keys, pid))
        decoded = None if kv is None else self._decode(kv)
        return None if decoded is None else decoded[1]

    def creation(self, pid: PartitionId, state: PartitionState) -> tuple[list[Any], list[Any]]:
        """(compares, operations) that create ``pid``'s key with ``state`` (refused when the key exists), for a
        controller transaction of at most :data:`~walgate.cluster.partition_codec.MAX_STATES_PER_TXN` creations."""
        key = partition_key(self.keys, pid)
        return [tx.Version(key) == 0], [tx.Put(key, encode_state(state))]

    async def follow(self, on_change: Callable[[PartitionId, PartitionState | None], object],
                     retry_delay: float = 0.5, reread_s: float = REREAD_S) -> None:
        """Call ``on_change(vnode, state or None when deleted or damaged)`` for every change after ``revision`` (from
        a :meth:`read_all` first when nothing was read), once per change, until cancelled
        (:func:`~walgate.cluster.etcd.follow_prefix`). A compacted watch, and every watch that ran ``reread_s``
        seconds, reads every state again and reports those that differ from what was seen (a change at or below
        the revision the watch had reached, which it never delivered, is logged at WARNING); a broken one resumes
        from ``revision`` after ``retry_delay``. An exception raised by ``on_change`` is logged at ERROR and
        following goes on (the change stays seen: it is not reported again)."""

        async def on_event(event: Any) -> None:
            self._seen(event, on_change)

        await follow_prefix(self.session, partitions_prefix(self.keys), start=lambda: self.revision,
                            read=lambda: self._read_again(on_change), on_event=on_event, what="partition states",
                            retry_delay=retry_delay, reread_s=reread_s)

    @staticmethod
    def _report(on_change: Callable[[PartitionId, PartitionState | None], object], pid: PartitionId,
                state: PartitionState | None) -> None:
        try:
            on_change(pid, state)
        except Exception as e:  # the caller's bug: reported, and the other vnodes' changes still delivered
            log.error("partition states: reporting %s/%d's change failed: %s: %s", pid.db_id, pid.vgroup,
                      type(e).__name__, e)

    async def _read_again(self, on_change: Callable[[PartitionId, PartitionState | None], object]) -> None:
        before, reached = self.states, self.revision
        after = await self.read_all()
        for pid in sorted(before.keys() | after.keys()):
            now = after.get(pid)
            if before.get(pid) == now:
                continue
            if now is not None and now.partition_epoch <= reached:
                log.warning("partition states: %s/%d's change at revision %d was never delivered by the watch, which"
                            " had reached revision %d: taken from a read", pid.db_id, pid.vgroup,
                            now.partition_epoch, reached)
            self._report(on_change, pid, now)

    def _seen(self, event: Any, on_change: Callable[[PartitionId, PartitionState | None], object]) -> None:
        """Take one watch event in. ``revision`` moves to the event's: a watch resumed from it (not after it) after
        a stream broke within one transaction's events gets all of them again, and those already seen change
        nothing and are not reported again."""
        self.revision = max(self.revision, event.kv.mod_revision)
        if event.kind == "DELETE":
            try:
                decoded: tuple[PartitionId, PartitionState | None] | None = (partition_id(self.keys, event.kv.key), None)
            except PartitionStateDamaged as e:
                log.error("partition states: %s", e)
                return
        else:
            decoded = self._decode(event.kv)
        if decoded is None:
            return
        pid, state = decoded
        if self.states.get(pid) != state:
            if state is None:
                del self.states[pid]
            else:
                self.states[pid] = state
            self._report(on_change, pid, state)

    async def alter_isr(self, known: PartitionState, pid: PartitionId, proposal: AlterIsr,
                        registered: Mapping[int, int]) -> AlterOutcome:
        """A leader's ISR change (KIP-497): ``alter_partition(known, proposal, registered)``, then the proposer's
        registration read (STALE_BROKER_EPOCH unless it is live under ``proposal.broker_epoch``: a leader whose
        lease ran out is fenced, and the controller elects another) and each joiner's (INELIGIBLE_REPLICA unless it
        is live under the broker epoch the joiner names and not in a controlled shutdown, KIP-841), then written in
        one transaction comparing the key's ``mod_revision`` with ``known``'s partition epoch and each of those
        ``nodes/<id>`` keys' ``mod_revision`` with the one read (its registration unchanged since). Refused by etcd:
        the key is read again and the outcome says whether the proposer still leads (INVALID_UPDATE_VERSION: retry
        from the new state; when the key is unchanged a registration changed: STALE_BROKER_EPOCH if the proposer's,
        else INELIGIBLE_REPLICA) or not (FENCED_LEADER_EPOCH)."""
        new = alter_partition(known, proposal, registered)
        if isinstance(new, ErrorCode):
            return AlterOutcome(known, new)
        key = partition_key(self.keys, pid)
        compare = [tx.Mod(key) == known.partition_epoch]
        checks = [(IsrMember(proposal.leader, proposal.broker_epoch), ErrorCode.stale_broker_epoch)]
        checks += [(m, ErrorCode.ineligible_replica) for m in new.isr if m not in known.isr]
        for member, refusal in checks:
            node_key = self.keys.node(member.replica)
            kv = await self.session.get(node_key)
            if kv is None or self._epoch_of(kv) != member.broker_epoch or (
                    refusal == ErrorCode.ineligible_replica and _shutting_down(kv.value)):
                return AlterOutcome(known, refusal)
            compare.append(tx.Mod(node_key) == kv.mod_revision)
        ok, responses = await self.session.txn(compare, [tx.Put(key, encode_state(new))])
        if ok:
            self.isr_shrinks += bool(set(known.isr) - set(new.isr))
            self.isr_expands += bool(set(new.isr) - set(known.isr))
            return AlterOutcome(replace(new, partition_epoch=int(responses[0].response_put.header.revision)), None)
        now = await self.read(pid)
        if now is None or now.leader != proposal.leader or now.leader_epoch != proposal.leader_epoch:
            return AlterOutcome(now, ErrorCode.fenced_leader_epoch)
        if now.partition_epoch == known.partition_epoch:  # the key is as read: a registration changed
            own = await self.session.get(self.keys.node(proposal.leader))
            live = own is not None and self._epoch_of(own) == proposal.broker_epoch
            return AlterOutcome(now, ErrorCode.ineligible_replica if live else ErrorCode.stale_broker_epoch)
        return AlterOutcome(now, ErrorCode.invalid_update_version)

    @staticmethod
    def _epoch_of(kv: Any) -> int | None:
        """A ``nodes/<id>`` registration's broker epoch; None (logged) when its value is not walgate's."""
        try:
            return broker_epoch(kv.value, kv.create_revision)
        except ControlPlaneError as e:
            log.error("registration %r ignored: %s", kv.key.decode(errors="replace"), e)
            return None


@dataclass(frozen=True)
class Snapshot:
    """The registrations and the partition states, read in one etcd transaction at ``revision``."""

    revision: int
    live: dict[int, int]
    states: dict[PartitionId, PartitionState]
    present: frozenset[PartitionId] = frozenset()  # every key's vnode, a damaged value's included
    catalog_seq: int = 0  # the catalog stream's last record appended at ``revision``
    requests: tuple[tuple[str, bytes, int], ...] = ()  # the election requests pending: (id, value, lease)


def _shutting_down(value: bytes) -> bool:
    """Whether the registration ``value`` (a walgate one: its broker epoch was read) is in a controlled shutdown."""
    try:
        return NodeInfo.decode(value).shutting_down
    except ControlPlaneError:  # (reported by the broker epoch's read already)
        return False


def _placed(state: PartitionState) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """What a ``place_vgroup`` record says of ``state``: its replicas, and the replicas its move adds and removes."""
    return state.replicas, state.adding, state.removing


def _retrieved(task: asyncio.Task[Any]) -> None:
    """A finished task's outcome (a watch's, a catalog question's), taken so that asyncio does not report it as never
    retrieved."""
    if not task.cancelled():
        task.exception()


class Reconciler:
    """The controller's reconciliation: while ``election`` holds the controller epoch, after every change of
    ``nodes/`` (registrations and their broker epochs) or ``partitions/``, the registrations and the states are read
    at one revision (:meth:`snapshot`), each state reconciled
    (``partition.reconcile``: brokers not registered (their lease lost: fenced until they register again, under
    the same broker epoch unless they restarted) or registered under another broker epoch than their ISR entry's
    (a restart, KIP-903) or in a controlled shutdown (KIP-631, :meth:`NodeRegistration.shut_down
    <walgate.cluster.registry.NodeRegistration.shut_down>`) fenced out, a leader elected
    from the ISR, then the ELR, then unclean only when allowed) and the changed states written (:meth:`write`) in
    fenced transactions of at most :data:`~walgate.cluster.partition_codec.MAX_STATES_PER_TXN`, each comparing every
    key's ``mod_revision`` and that no registration was made or changed since the read. A refused batch (a leader
    changed its ISR meanwhile, a node registered) does not stop the later ones; the pass then ends early and the
    next one, ``retry_delay`` later, reads again and writes only what still needs changing. A damaged state is
    left as it is, reported at ERROR on every pass (no state is invented for it: the value that named who is in sync
    is what was lost).

    **The catalog record is the truth** (issue 25, step 2): each pass also creates the state of every replicated
    vnode ``catalog`` names (the catalog's vgroups of more than one replica) whose key ``partitions/`` lacks and
    one of whose replicas is registered (a controller that died between a record and its states, a key an operator
    deleted; a vnode none of whose replicas is registered waits for the pass a registration wakes), with
    ``partition.initial_state``, in fenced transactions of at most 60 creations, each key compared absent and the
    registrations unchanged since the read, as the other writes; a vnode whose catalog entry makes no valid state
    is reported at ERROR on every pass, and the others are created. A state (a damaged one included) of a vnode the
    catalog does not hold (its database dropped) is deleted, in fenced transactions of at most 60, each key compared
    unchanged since the read; never one of a cluster database this node's catalog passes over because a database of
    the node's own holds the name (:class:`~walgate.cluster.partition_codec.CatalogVnodes`: ``unjudged``).
    ``catalog(seq)`` is awaited once per pass, after the read: the catalog's replicated
    vnodes once this node applied at least record ``seq`` of the catalog stream, the last one appended at the read's
    revision (:meth:`snapshot` reads ``catalog/seq`` in its transaction), so a database dropped, or made, before the
    read is never judged from an older catalog (a racing DROP DATABASE leaves no state behind, KIP-631's controller
    likewise deletes a topic's partitions in the record that deletes it). The elections are written first, from
    the snapshot, so failover never waits for the catalog (rv4 R2). A state whose topic's ``min.insync.replicas`` or
    ``unclean.leader.election.enable`` the catalog now has otherwise (AlterConfigs) takes them, its ELR cleared
    (``partition.reconfigure``, KIP-966), written as an election is, after the creations (a state elected in the same
    pass takes them in the next). A catalog that has not answered within
    ``catalog_wait_s``, or raised :class:`ControlPlaneUnavailable` (the node cannot catch up), holds back that
    pass's creations and deletions (a WARNING once per ``seq``); the pass then waits as a finished one does, and the
    catalog's answer, when it comes, wakes the next one (a stuck catalog makes no pass of its own but the next
    change's, or one lease TTL later). Each append to the catalog stream wakes the next
    pass at once, as a change of ``nodes/`` or ``partitions/`` does. Without ``catalog`` (None) no state is created or
    deleted. ``passes`` counts the reconciliations run, ``written`` the states written, ``created`` the states
    created, ``deleted`` the states deleted, ``unclean_elections`` the leaders it wrote that were neither in the
    ISR nor in the ELR before (Kafka's UncleanLeaderElectionsPerSec).

    **Elections and replica moves asked, and the rebalance** (issue 26): a pass whose reconciliation changed no
    state also makes the elections and replica moves (KIP-455) nodes asked for (``elections/requests/``, read in
    the same transaction as the states: :meth:`serve_elections`, :mod:`walgate.cluster.elections`,
    :mod:`walgate.cluster.reassignments`); a move in progress is completed by the reconciliation of the pass that
    finds its target replicas all in sync (``partition.settle``), counted in ``moves_completed``; and, when none is pending and
    ``rebalance_every`` (``leader.imbalance.check.interval.seconds``, ``leader.imbalance.per.broker.percentage``)
    is set, the preferred-leader rebalance once per interval of ``clock`` (:meth:`rebalance`); a request wakes a
    pass as a change of ``partitions/`` does, and the wait between passes ends when the rebalance is due.

    **The catalog follows every replica change** (issue 26): a transaction writing a state whose ``replicas`` change
    (a move begun: the target followed by the removing replicas; completed: the target; cancelled: the original
    replicas) also appends a ``place_vgroup`` catalog record of them per such state (:meth:`_placements`; with the
    move's adding and removing replicas while one is in progress, so that a state deleted mid-move is made again
    with its move and its adding replicas out of the ISR: ``partition.initial_state``), so the
    catalog's placement and the state change at one revision: a node is placed on a vnode exactly while its state
    names it (adding nodes open it empty, removed nodes delete their copy: :mod:`walgate.gateway.replicas`). The
    append compares ``catalog/seq``'s value with the one the pass read; a record appended meanwhile by another
    writer refuses the whole transaction, written again by the next pass."""

    def __init__(self, states: PartitionStates, election: ControllerElection, retry_delay: float = 0.5,
                 catalog: Callable[[int], Awaitable[CatalogVnodes]] | None = None,
                 catalog_wait_s: float = 2.0, rebalance_every: tuple[float, int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.states = states
        self.rebalance_every = rebalance_every
        self.clock = clock
        self._next_rebalance = clock() + rebalance_every[0] if rebalance_every is not None else 0.0
        self._elected: dict[str, dict[PartitionId, ErrorCode]] = {}  # requests partly written: their elections
        self.catalog_wait_s = catalog_wait_s
        self.election = election
        self.retry_delay = retry_delay
        self.catalog = catalog
        self._asked: tuple[int, asyncio.Task[CatalogVnodes]] | None = None  # seq, catalog(seq)
        self._warned = -1  # the last seq a WARNING named
        self.passes = 0
        self.written = 0
        self.created = 0
        self.deleted = 0
        self.unclean_elections = 0
        self.moves_completed = 0
        self._seq: tuple[int, int] = (0, 0)  # (a snapshot's revision, the catalog/seq this pass's appends reached)

    async def snapshot(self) -> Snapshot:
        """The registered nodes not in a controlled shutdown (node id -> broker epoch,
        :func:`~walgate.cluster.registry.broker_epoch`; a node shutting down is reconciled as one not registered:
        KIP-631's controller moves its leaderships and fences it out of the ISRs while it stays registered), the
        states and the catalog stream's last sequence number, read in one fenced transaction
        (:class:`NotController` when this node no longer is)."""
        keys, election_key = self.states.keys, self.election.key
        if election_key is None:
            raise NotController(f"node {self.election.registration.info.node_id} is not the controller")
        prefixes = (keys.nodes, partitions_prefix(keys), keys.elections)
        _, (own, nodes, parts, asked, seq) = await self.election.fenced_txn(
            [], [tx.Get(election_key), *(tx.Get(p, prefix_range_end(p)) for p in prefixes), tx.Get(keys.seq)])
        revision = int(own[0][1].header.revision)
        present: set[PartitionId] = set()
        for _, kv in parts:
            try:
                present.add(partition_id(keys, kv.key))
            except PartitionStateDamaged:  # not a vnode's key: reported by load, it names no vnode to create
                pass
        live: dict[int, int] = {}
        for _, kv in nodes:
            try:
                info = NodeInfo.decode(kv.value)
                epoch = broker_epoch(kv.value, kv.create_revision)
            except ControlPlaneError as e:  # not a live broker of ours: it holds no replica
                log.error("controller: registration %r ignored: %s", kv.key.decode(errors="replace"), e)
                continue
            if not info.shutting_down:  # (in a controlled shutdown: fenced out of the ISRs, its leaderships moved)
                live[info.node_id] = epoch
        requests = tuple((kv.key[len(keys.elections):].decode(errors="replace"), kv.value, kv.lease) for _, kv in asked)
        return Snapshot(revision, live, dict(self.states.load(revision, [kv for _, kv in parts])), frozenset(present),
                        int(seq[0][1].value) if seq else 0, requests)

    async def write(self, snapshot: Snapshot, changes: dict[PartitionId, PartitionState]) -> int:
        """Write ``changes`` (reconciled from ``snapshot``) batch by batch; the number of states refused (their
        key, or a registration, changed since the snapshot). Raises :class:`NotController` (nothing more written)."""
        nodes = self.states.keys.nodes
        registrations_unchanged = tx.Mod(nodes, prefix_range_end(nodes)) < snapshot.revision + 1
        refused = 0
        for batch in batches(changes):
            keys = [partition_key(self.states.keys, pid) for pid in batch]
            placed, appended = self._placements(snapshot, changes, batch)
            async with self.election.catalog_appends if placed else contextlib.nullcontext():
                ok, _ = await self.election.fenced_txn(
                    [registrations_unchanged, *placed[:1],
                     *(tx.Mod(k) == snapshot.states[pid].partition_epoch for k, pid in zip(keys, batch))],
                    [tx.Put(k, encode_state(changes[pid])) for k, pid in zip(keys, batch)] + placed[1:])
            if not ok:
                refused += len(batch)
                continue
            self._seq = (snapshot.revision, appended)
            self._wrote(snapshot.states, changes, batch)
        return refused

    def _placements(self, snapshot: Snapshot, writes: Mapping[PartitionId, PartitionState], batch: list[PartitionId],
                    before: Mapping[PartitionId, PartitionState] | None = None) -> tuple[list[Any], int]:
        """The catalog records a transaction writing ``batch`` of ``writes`` appends (the class docstring): [the
        compare of ``catalog/seq``, its put, a ``place_vgroup`` record per state whose replicas, or move's adding or
        removing replicas, change from ``before``'s (default: the snapshot's)], and the sequence number they reach;
        ([], the current one) when none change."""
        keys = self.states.keys
        seq = self._seq[1] if self._seq[0] == snapshot.revision else snapshot.catalog_seq
        old = snapshot.states if before is None else before
        moved = [pid for pid in batch if _placed(writes[pid]) != _placed(old[pid])]
        if not moved:
            return [], seq
        epoch = self.election.epoch or 0
        compare = tx.Version(keys.seq) == 0 if seq == 0 else tx.Value(keys.seq) == str(seq).encode()
        records = [tx.Put(keys.record(seq + 1 + i), encode_record(epoch, json.dumps(
            place_vgroup_record(pid.db_id, pid.vgroup, *_placed(writes[pid])), sort_keys=True).encode()))
            for i, pid in enumerate(moved)]
        return [compare, tx.Put(keys.seq, str(seq + len(moved)).encode()), *records], seq + len(moved)

    def _wrote(self, before: Mapping[PartitionId, PartitionState], changes: Mapping[PartitionId, PartitionState],
               batch: list[PartitionId]) -> None:
        """Count and log the states of ``batch`` written (``before``: each one's state before)."""
        self.written += len(batch)
        for pid in batch:
            old, new = before[pid], changes[pid]
            if new.replicas != old.replicas or new.moving != old.moving:
                done = old.moving and not new.moving and new.replicas == old.target
                self.moves_completed += done
                log.info("controller: %s/%d replicas %s -> %s%s", pid.db_id, pid.vgroup, list(old.replicas),
                         list(new.replicas), " (move completed)" if done else
                         f" (adding {list(new.adding)}, removing {list(new.removing)})" if new.moving else "")
            if new.leader != old.leader:
                log.info("controller: %s/%d leader %d -> %d (leader epoch %d)", pid.db_id, pid.vgroup,
                         old.leader, new.leader, new.leader_epoch)
                self.unclean_elections += new.leader != NO_LEADER and new.leader not in {*old.isr_ids, *old.elr}

    async def serve_elections(self, snapshot: Snapshot, one_copy: Mapping[PartitionId, ReplicatedVnode] | None
                              ) -> tuple[int, set[PartitionId]]:
        """Make the elections asked (:mod:`walgate.cluster.elections`) on ``snapshot``, one request after the other:
        its elected states written, the request deleted and its outcome put (on the asking node's lease) in one
        fenced transaction that also compares each key's ``mod_revision`` and that no registration changed since
        the read (more than :data:`~walgate.cluster.partition_codec.MAX_STATES_PER_TXN` elections: several, the
        outcome with the last; those written before a refusal are answered NONE when the request is served again).
        A move of a vgroup of ``one_copy`` (the catalog's vgroups of one copy with no state) starts from the state
        :func:`~walgate.cluster.reassignments.first_states` makes, and its moved state is created, its key compared
        absent (issue 26); without ``one_copy`` (None: this node's catalog did not answer in time) a request moving
        a partition with no state waits for a pass whose catalog answered (counted refused).
        A request naming a partition an earlier one of this pass changed waits for the next pass. Returns (the
        requests refused or deferred, the partitions written)."""
        keys = self.states.keys
        nodes = keys.nodes
        registrations_unchanged = tx.Mod(nodes, prefix_range_end(nodes)) < snapshot.revision + 1
        pending = {request_id for request_id, _, _ in snapshot.requests}
        self._elected = {r: done for r, done in self._elected.items() if r in pending}  # (withdrawn ones forgotten)
        refused = 0
        touched: set[PartitionId] = set()
        before: dict[PartitionId, PartitionState] = dict(snapshot.states)  # (and the first states of one-copy moves)
        for request_id, value, lease in snapshot.requests:
            request: ElectionRequest | ReassignmentRequest | None = None
            writes: dict[PartitionId, PartitionState] = {}
            answers: dict[PartitionId, ErrorCode] = {}
            try:
                request = decode_request(value)
            except ElectionRequestDamaged as e:  # answered with no result: the node asked reports its error
                log.error("controller: %s", e)
            else:
                if touched & set(request.partitions) or (
                        one_copy is None and isinstance(request, ReassignmentRequest)
                        and any(target is not None and pid not in before for pid, target in request.moves)):
                    refused += 1
                    continue
                if isinstance(request, ReassignmentRequest) and one_copy:
                    made = first_states(request, snapshot.states, one_copy, snapshot.live)
                    before.update((pid, state) for pid, state in made.items() if pid not in before)
                writes, answers = decide(request, before, snapshot.live)
            done = self._elected.setdefault(request_id, {})
            answers.update(done)
            key = keys.election(request_id)
            order = list(batches(writes, MAX_STATES_PER_TXN - 2)) or [[]]  # (room for the request's own two keys)
            for i, batch in enumerate(order):
                last = [tx.Delete(key), tx.Put(keys.election_outcome(request_id), encode_outcome(answers), lease=lease)]
                placed, appended = self._placements(snapshot, writes, batch, before)
                ok, _ = await self.election.fenced_txn(
                    [registrations_unchanged, tx.Version(key) > 0, *placed[:1],
                     *(tx.Mod(partition_key(keys, pid)) == snapshot.states[pid].partition_epoch
                       if pid in snapshot.states else tx.Version(partition_key(keys, pid)) == 0 for pid in batch)],
                    [*(tx.Put(partition_key(keys, pid), encode_state(writes[pid])) for pid in batch),
                     *(last if i == len(order) - 1 else []), *placed[1:]])
                if not ok:
                    refused += 1
                    break
                self._seq = (snapshot.revision, appended)
                self._wrote(before, writes, batch)
                touched.update(batch)
                done.update((pid, ErrorCode.none) for pid in batch)
            else:
                del self._elected[request_id]
                if isinstance(request, ReassignmentRequest):
                    log.info("controller: reassignment of %d partition(s): %d accepted", len(answers),
                             sum(code == ErrorCode.none for code in answers.values()))
                elif request is not None:
                    log.info("controller: %s election of %d partition(s): %d leader(s) moved",
                             request.election.name.lower(), len(answers),
                             sum(code == ErrorCode.none for code in answers.values()))
        return refused, touched

    async def rebalance(self, snapshot: Snapshot, touched: set[PartitionId]) -> int:
        """Kafka's automatic preferred-leader rebalance (``auto.leader.rebalance.enable``): once every
        ``leader.imbalance.check.interval.seconds`` (``rebalance_every``), the preferred replicas of the partitions
        :func:`~walgate.replication.elections.imbalanced` names elected (those in ``touched``, written this pass,
        left for the next check), written as the reconciliation's elections are. The states refused."""
        if self.rebalance_every is None or self.clock() < self._next_rebalance:
            return 0
        interval_s, percentage = self.rebalance_every
        self._next_rebalance = self.clock() + interval_s
        states = {pid: s for pid, s in snapshot.states.items() if pid not in touched}
        moves = {}
        for pid in imbalanced(states, percentage):
            new = elect_leader(states[pid], ElectionType.PREFERRED, snapshot.live)
            if isinstance(new, PartitionState):
                moves[pid] = new
        if not moves:
            return 0
        log.info("controller: preferred-leader rebalance of %d partition(s)", len(moves))
        touched.update(moves)
        return await self.write(snapshot, moves)

    async def create(self, snapshot: Snapshot, creations: dict[PartitionId, PartitionState]) -> int:
        """Create the states ``creations`` (missing at ``snapshot``) batch by batch; the number refused (a key
        made, or a registration changed, since the snapshot). Raises :class:`NotController` (nothing more
        created)."""
        nodes = self.states.keys.nodes
        registrations_unchanged = tx.Mod(nodes, prefix_range_end(nodes)) < snapshot.revision + 1
        refused = 0
        for batch in batches(creations):
            compares: list[Any] = [registrations_unchanged]
            puts: list[Any] = []
            for pid in batch:
                compare, put = self.states.creation(pid, creations[pid])
                compares += compare
                puts += put
            ok, _ = await self.election.fenced_txn(compares, puts)
            if not ok:
                refused += len(batch)
                continue
            self.created += len(batch)
            log.info("controller: %d partition state(s) created from the catalog (%s/%d ...)", len(batch),
                     batch[0].db_id, batch[0].vgroup)
        return refused

    async def delete(self, snapshot: Snapshot, gone: Collection[PartitionId]) -> int:
        """Delete the states of ``gone`` (present at ``snapshot``) batch by batch; the number refused (a key changed
        since the snapshot). Raises :class:`NotController` (nothing more deleted)."""
        refused = 0
        for batch in batches(gone):
            keys = [partition_key(self.states.keys, pid) for pid in batch]
            ok, _ = await self.election.fenced_txn([tx.Mod(k) < snapshot.revision + 1 for k in keys],
                                                   [tx.Delete(k) for k in keys])
            if not ok:
                refused += len(batch)
                continue
            self.deleted += len(batch)
            log.info("controller: %d partition state(s) of vnodes the catalog no longer holds deleted (%s/%d ...)",
                     len(batch), batch[0].db_id, batch[0].vgroup)
        return refused

    async def reconcile_once(self) -> int:
        """One pass: read, reconcile, write; returns the revision read at (changes after it need another pass), or
        0 when some batch was refused (read again after ``retry_delay``). Raises :class:`NotController` or
        :class:`ControlPlaneUnavailable`."""
        snapshot = await self.snapshot()
        self.passes += 1
        changes = reconcile_all(snapshot.states, snapshot.live)
        refused = await self.write(snapshot, changes)
        touched = set(changes)
        wanted = await self._wanted(snapshot.catalog_seq)  # (after the reconciliation written: failover never waits)
        if not changes:  # (asked elections and the rebalance start from states the reconciliation leaves as they are)
            one_copy = {} if self.catalog is None else None if wanted is None else wanted.one_copy
            served, touched = await self.serve_elections(snapshot, one_copy)
            refused += served
            if not snapshot.requests:
                refused += await self.rebalance(snapshot, touched)
        if wanted is not None:  # (a state just elected is refused its delete, as it changed: the next pass deletes it)
            refused += await self.delete(snapshot, unwanted_states(wanted, snapshot.present))
            creations, unbuildable = missing_states(wanted.vnodes, snapshot.present, snapshot.live,
                                                       snapshot.revision)
            for pid, why in unbuildable.items():
                log.error("controller: %s/%d has no partition state and none can be built from its catalog entry: "
                          "%s", pid.db_id, pid.vgroup, why)
            refused += await self.create(snapshot, creations)
            reconfigured = reconfigured_states(wanted.vnodes, {p: s for p, s in snapshot.states.items() if p not in touched})
            refused += await self.write(snapshot, reconfigured)
        if refused:
            log.info("controller: %d partition states changed during reconciliation; reading again", refused)
            return 0
        return snapshot.revision

    async def _wanted(self, seq: int) -> CatalogVnodes | None:
        """The catalog's replicated vnodes as of record ``seq`` or later; None without ``catalog``, or when this
        node's catalog does not reach ``seq`` within ``catalog_wait_s`` (this pass creates and deletes nothing from a
        catalog it may not have caught up with; the question stays asked, :meth:`_wait_change` wakes at its
        answer) or raised :class:`ControlPlaneUnavailable` (asked again by the next pass). Logged once per ``seq``."""
        if self.catalog is None:
            return None
        if self._asked is None or self._asked[0] != seq:
            self._forget_asked()
            self._asked = (seq, asyncio.ensure_future(self.catalog(seq)))
        task = self._asked[1]
        try:
            async with asyncio.timeout(self.catalog_wait_s):
                return await asyncio.shield(task)
        except (TimeoutError, ControlPlaneUnavailable) as e:
            if seq != self._warned:
                self._warned = seq
                log.warning("controller: the catalog up to record %d is not applied here yet (%s): partition states "
                            "neither created nor deleted until it is", seq, e or "timed out")
            return None
        finally:
            if task.done():  # (answered, or failed: the next question is a new one)
                self._asked = None

    def _forget_asked(self) -> None:
        """The catalog's question in flight, if any, cancelled (a newer seq is asked, or the reconciliation ends)."""
        if self._asked is not None:
            self._asked[1].cancel()
            self._asked[1].add_done_callback(_retrieved)
            self._asked = None

    async def _wait_change(self, revision: int) -> None:
        """Return at the first change of ``nodes/`` or ``partitions/``, or append to the catalog stream, after
        ``revision``, or the catalog's answer to a question still in flight (or after one lease TTL: the caller
        looks again either way)."""
        session, keys = self.states.session, self.states.keys

        async def first(prefix: bytes) -> None:
            watch = await session.watch_prefix(prefix, revision + 1)
            try:
                await session.next_event(watch.__aiter__())
            finally:
                await session.cancel_watch(watch)

        waits = [asyncio.create_task(first(p)) for p in (keys.nodes, partitions_prefix(keys), keys.seq, keys.elections)]
        asked = [self._asked[1]] if self._asked is not None else []
        timeout = float(self.election.registration.ttl)
        if self.rebalance_every is not None:
            timeout = max(0.0, min(timeout, self._next_rebalance - self.clock()))
        try:
            done, _ = await asyncio.wait([*waits, *asked], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for task in done - set(asked):
                task.result()  # a broken watch: ControlPlaneUnavailable
        finally:
            for task in waits:
                task.cancel()
                task.add_done_callback(_retrieved)
            # bounded: aetcd's watcher can swallow a cancellation (it awaits its stream's request handler under
            # `except CancelledError: pass`), and a watch task that never ends must not hold the controller's
            # reconciliation with it (seen: every later pass waited behind one, no ISR was ever changed again)
            _, stuck = await asyncio.wait(waits, timeout=session.timeout)
            if stuck:
                log.warning("controller: %d etcd watch(es) did not stop when cancelled; left behind", len(stuck))

    async def run(self) -> None:
        """Reconcile while this node is the controller, until cancelled. Losing the election, or etcd not
        answering (no quorum), stops writing; reconciliation resumes at once when it is back."""
        try:
            await self._run()
        finally:
            self._forget_asked()

    async def _run(self) -> None:
        """Each stop of the reconciliation is logged once ("reconciliation stopped"): a write of it refused
        (NotController), or the election found lost while it waited for a change (no write tried since)."""
        reconciling: int | None = None  # the controller epoch of the passes since the last stop
        while True:
            if reconciling is not None and self.election.epoch != reconciling:
                log.info("controller: reconciliation stopped: controller epoch %d is no longer this node's", reconciling)
            reconciling = await self.election.wait_elected()
            try:
                revision = await self.reconcile_once()
                if revision:
                    await self._wait_change(revision)
                else:
                    await asyncio.sleep(self.retry_delay)  # refused: whatever changed may change again at once
            except NotController as e:
                log.info("controller: reconciliation stopped: %s", e)
                reconciling = None
            except (ControlPlaneUnavailable, Compacted) as e:
                log.warning("controller: reconciliation interrupted: %s", e)
                await asyncio.sleep(self.retry_delay)
