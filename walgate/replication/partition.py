"""A partition's state in the control plane, the changes to it and who may make them.

:class:`PartitionState` is what etcd keeps for a vgroup (``partitions/<db id>/<vgroup>``): the replicas, the leader
and its leader epoch, the in-sync replicas with the broker epoch each was admitted under, the eligible leader
replicas, and the partition epoch (the key's ``mod_revision``) that every change compares. Two writers change it,
each by a compare-and-swap on the partition epoch:

* the leader, which shrinks and expands the ISR (:func:`alter_partition`, Kafka's AlterPartition: KIP-497);
* the controller, which fences brokers whose registration ended or changed, completes replica moves and elects
  leaders (:func:`reconcile`: KIP-841, KIP-903, KIP-966, KIP-455).

A partition whose replicas are being moved (KIP-455's reassignment, :mod:`walgate.replication.reassignment` starts
and cancels one) carries ``adding`` and ``removing``: ``replicas`` is then the target replicas followed by the
removing ones (Kafka's ``PartitionReassignmentReplicas``), so the preferred leader is the target's first. An adding
replica starts with an empty log and fetches like any follower; the leader admits it to the ISR once caught up
(:func:`alter_partition`), and the controller then completes the move (:func:`complete_reassignment`).

Every request that names a leader epoch is checked against the current one by :func:`check_leader_epoch` (KIP-320).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from walgate.wire.errors import ErrorCode

__all__ = ["NO_LEADER", "IsrMember", "PartitionState", "AlterIsr", "initial_state", "moves_valid", "reconfigure",
           "check_leader_epoch", "same_incarnation", "leads", "leader_live", "change_isr", "alter_partition", "elect",
           "complete_reassignment", "settle", "reconcile"]

NO_LEADER = -1
"""The leader of a partition that has none (no eligible replica is alive: the partition is offline)."""


@dataclass(frozen=True, order=True)
class IsrMember:
    """An in-sync replica and the broker epoch it was admitted under (KIP-903): the same replica id back under
    another broker epoch (a restart, an empty disk) is not this member."""

    replica: int
    broker_epoch: int


@dataclass(frozen=True)
class PartitionState:
    """One partition's state as the control plane holds it.

    Invariants: ``leader`` is :data:`NO_LEADER` or a member of ``isr``; ``isr`` and ``elr`` are disjoint subsets of
    ``replicas``; ``elr`` is empty while ``isr`` has at least ``min_isr`` members (KIP-966); ``partition_epoch``
    grows with every change and ``leader_epoch`` with every election. ``adding`` and ``removing`` (KIP-455: empty
    unless replicas are being moved) are disjoint subsets of ``replicas``, ``removing`` its last members, and the
    target replicas (``replicas`` without ``removing``) are never empty.
    """

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[IsrMember, ...]
    elr: tuple[int, ...]
    min_isr: int
    unclean_election: bool = False
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def isr_ids(self) -> frozenset[int]:
        return frozenset(m.replica for m in self.isr)

    @property
    def moving(self) -> bool:
        """Whether a reassignment is in progress (Kafka's ``isReassignmentInProgress``)."""
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas once the move completes (``replicas`` itself when none is in progress)."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """The replicas a cancellation goes back to (Kafka's ``originalReplicas``: ``replicas`` without ``adding``)."""
        return tuple(r for r in self.replicas if r not in self.adding)

    def member(self, replica: int) -> IsrMember | None:
        """The ISR entry of ``replica``, or None when it is not in the ISR."""
        return next((m for m in self.isr if m.replica == replica), None)


@dataclass(frozen=True)
class AlterIsr:
    """A leader's proposed ISR (KIP-497's AlterPartition): applied only if the partition and leader epochs are still
    the ones the leader read, and the leader is still registered under ``broker_epoch``, the broker epoch it leads
    under (AlterPartition's BrokerEpoch)."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[IsrMember, ...]
    broker_epoch: int


def initial_state(replicas: tuple[int, ...], registered: Mapping[int, int], min_isr: int,
                  unclean_election: bool = False, adding: tuple[int, ...] = (),
                  removing: tuple[int, ...] = (), leader_epoch: int = 0) -> PartitionState:
    """A partition's state made by the controller from its catalog entry alone: every replica registered now is in
    sync, the first of them leads in ``leader_epoch`` (NO_LEADER when none is registered). A new partition's replicas
    all hold the same (empty) log.

    A state made again while the catalog places the vgroup on a move's replicas (``adding`` and ``removing``: the
    ``place_vgroup`` record the move began with, its key since deleted) carries the move, so that it completes, and
    keeps the adding replicas out of the ISR and the leadership: KIP-455, an adding replica joins the ISR only once
    the leader found it caught up, and nothing the controller holds says whether it did (Kafka's controller, which
    keeps the adding replicas in the topic's assignment for this, never counts them in sync either). The replicas the
    move started from are taken as holding the log, as every replica of a state made again is: the catalog knows no
    more of them. Raises ValueError for replicas empty or repeated, ``leader_epoch`` negative, ``min_isr`` out of range, or a
    move that is not one (``adding`` and ``removing`` repeated, not replicas, overlapping, the removing ones not last,
    or all)."""
    if not replicas or len(set(replicas)) != len(replicas):
        raise ValueError(f"replicas {replicas}: at least one, all distinct")
    if leader_epoch < 0:
        raise ValueError(f"leader epoch {leader_epoch}: not negative")
    if not 1 <= min_isr <= len(replicas):
        raise ValueError(f"min.insync.replicas {min_isr}: between 1 and the replication factor {len(replicas)}")
    if not moves_valid(replicas, adding, removing):
        raise ValueError(f"a move of replicas {replicas} adding {adding} and removing {removing}: each distinct, "
                         "disjoint replicas, the removing ones last and not all of them")
    eligible = [r for r in replicas if r in registered and r not in adding]
    isr = tuple(sorted(IsrMember(r, registered[r]) for r in eligible))
    return PartitionState(replicas, eligible[0] if eligible else NO_LEADER, leader_epoch, 0, isr, (), min_isr,
                          unclean_election, adding, removing)


def moves_valid(replicas: tuple[int, ...], adding: tuple[int, ...], removing: tuple[int, ...]) -> bool:
    """Whether ``adding`` and ``removing`` are a move of ``replicas`` (:class:`PartitionState`'s invariant): each
    distinct, disjoint subsets of them, the removing ones the last replicas and not all of them."""
    add, rem = set(adding), set(removing)
    return (len(add) == len(adding) and len(rem) == len(removing) and not add & rem
            and add | rem <= set(replicas) and len(removing) < len(replicas)
            and replicas[len(replicas) - len(removing):] == removing)


def check_leader_epoch(current: int, requested: int) -> ErrorCode | None:
    """KIP-320's fencing of a request that names a leader epoch (Fetch, ListOffsets, OffsetForLeaderEpoch,
    a follower's fetch): an older epoch is FENCED_LEADER_EPOCH (the sender must refresh its metadata), a newer one
    UNKNOWN_LEADER_EPOCH (this replica has not heard of it yet)."""
    if requested < current:
        return ErrorCode.fenced_leader_epoch
    if requested > current:
        return ErrorCode.unknown_leader_epoch
    return None


def same_incarnation(member_epoch: int, broker_epoch: int) -> bool:
    """KIP-903: a replica counts as the ISR member admitted under ``member_epoch`` only while it is registered
    under that very broker epoch; a replica that restarted (perhaps with an empty disk, or without its unsynced
    tail) registers under a new one and must catch up and be admitted anew. A broker epoch names a process start:
    a registration made again after a lost lease keeps it (:mod:`walgate.cluster.registry`)."""
    return member_epoch == broker_epoch


def leads(state: PartitionState, replica: int, broker_epoch: int) -> bool:
    """Whether ``replica``, registered under ``broker_epoch``, is the leader ``state`` names: the leader's ISR entry
    must be this incarnation (KIP-903). A leader that restarted before its lease ran out reads itself as leader
    under its old broker epoch and must wait for the controller's next election instead of serving a log that may
    have lost its unsynced tail."""
    member = state.member(replica)
    return state.leader == replica and member is not None and same_incarnation(member.broker_epoch, broker_epoch)


def leader_live(state: PartitionState, registered: Mapping[int, int]) -> bool:
    """Whether ``state`` has a leader registered (``registered``: node id -> broker epoch) under the broker epoch of
    its ISR entry: not when there is none, nor when it lost its lease or restarted, until the controller elects
    again (KIP-903). A partition whose leader is not live is offline (Kafka's OfflinePartitionsCount)."""
    epoch = registered.get(state.leader)
    return epoch is not None and leads(state, state.leader, epoch)


def change_isr(state: PartitionState, isr: tuple[IsrMember, ...], wiped: frozenset[int] = frozenset()) -> PartitionState:
    """``state`` with ``isr`` as its ISR and the ELR it implies (KIP-966; Kafka's
    ``PartitionChangeBuilder.populateTargetElr``), partition epoch bumped.

    While the ISR has at least ``min_isr`` members the ELR is empty. Below that the high watermark cannot advance
    (:func:`walgate.replication.leader.high_watermark`), so every replica that leaves the ISR still holds, durably,
    everything up to the high watermark: it joins the ELR. A replica whose disk was lost (``wiped``: registered
    again with another data dir incarnation) holds nothing and leaves the ELR; since the high watermark counts
    durable positions only, a crash that loses an unsynced tail does not.
    """
    isr = tuple(sorted(isr))
    ids = frozenset(m.replica for m in isr)
    if len(ids) >= state.min_isr:
        elr: tuple[int, ...] = ()
    else:
        keep = (set(state.elr) | state.isr_ids) - ids - wiped
        elr = tuple(r for r in state.replicas if r in keep)
    return replace(state, isr=isr, elr=elr, partition_epoch=state.partition_epoch + 1)


def reconfigure(state: PartitionState, min_isr: int, unclean_election: bool) -> PartitionState:
    """``state`` under a topic's new ``min.insync.replicas`` and ``unclean.leader.election.enable``, its ELR
    cleared and partition epoch bumped (KIP-966: a change of the min ISR config clears the ELR of the partitions it
    applies to, as Kafka's controller does, since the ELR was built under the old value); ``state`` itself when
    neither changed."""
    if (state.min_isr, state.unclean_election) == (min_isr, unclean_election):
        return state
    return replace(state, min_isr=min_isr, unclean_election=unclean_election, elr=(),
                   partition_epoch=state.partition_epoch + 1)


def alter_partition(state: PartitionState, proposal: AlterIsr, registered: Mapping[int, int]) -> PartitionState | ErrorCode:
    """Apply a leader's proposed ISR, or refuse it (the compare-and-swap KIP-497 makes of AlterPartition; in etcd a
    transaction comparing the key's ``mod_revision``, the proposer's registration and each joiner's, read live under
    their broker epochs).

    * another partition epoch: INVALID_UPDATE_VERSION (the leader read an older state; it re-reads and retries);
    * another leader or leader epoch: FENCED_LEADER_EPOCH (a deposed leader);
    * a proposer not registered under the broker epoch it names, or not the leader's ISR entry under it:
      STALE_BROKER_EPOCH (Kafka's controller refuses AlterPartition from a stale or fenced broker: a leader whose
      lease ran out is fenced, and the controller is about to elect another; it must not shrink the ISR to itself);
    * a joiner that is not a replica, or not registered under the broker epoch it fetched with:
      INELIGIBLE_REPLICA (KIP-903);
    * the leader left out of its own ISR: INVALID_REQUEST.
    """
    if proposal.partition_epoch != state.partition_epoch:
        return ErrorCode.invalid_update_version
    if proposal.leader != state.leader or proposal.leader_epoch != state.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    own = registered.get(proposal.leader)
    if own is None or not same_incarnation(proposal.broker_epoch, own) or not leads(state, proposal.leader, own):
        return ErrorCode.stale_broker_epoch
    if proposal.leader not in {m.replica for m in proposal.isr}:
        return ErrorCode.invalid_request
    for joiner in proposal.isr:
        if joiner in state.isr:
            continue
        epoch = registered.get(joiner.replica)
        if joiner.replica not in state.replicas or epoch is None or not same_incarnation(joiner.broker_epoch, epoch):
            return ErrorCode.ineligible_replica
    return change_isr(state, proposal.isr)


def _fence(state: PartitionState, live: Mapping[int, int], wiped: frozenset[int]) -> PartitionState:
    """Remove from the ISR every member whose broker is not registered, or registered under another broker epoch
    (KIP-841: fenced brokers leave the ISR; KIP-903), and drop wiped replicas from the ELR."""
    isr = tuple(m for m in state.isr
                if m.replica in live and same_incarnation(m.broker_epoch, live[m.replica]))
    if isr == state.isr and not wiped & set(state.elr):
        return state
    return change_isr(state, isr, wiped)


def elect(state: PartitionState, live: Mapping[int, int]) -> PartitionState:
    """The controller's election (Kafka's ``PartitionChangeBuilder.electLeader``), on a state already fenced.

    The current leader stays while it is an ISR member. Otherwise the first replica, in assignment order, that is
    in the ISR; else the first live one in the ELR (KIP-966: it becomes the only ISR member); else, only when the
    topic allows unclean election, the first live replica that is not being added (an adding replica that never
    joined the ISR may hold nothing at all; the ISR and the ELR restart from it); else no leader.
    Every election, even of no leader, bumps the leader epoch and the partition epoch.
    """
    if state.leader != NO_LEADER and state.leader in state.isr_ids:
        return state
    in_isr = [r for r in state.replicas if r in state.isr_ids]
    in_elr = [r for r in state.replicas if r in state.elr and r in live]
    bumped = replace(state, leader_epoch=state.leader_epoch + 1, partition_epoch=state.partition_epoch + 1)
    if in_isr:
        return replace(bumped, leader=in_isr[0])
    if in_elr:
        leader = in_elr[0]
        return replace(bumped, leader=leader, isr=(IsrMember(leader, live[leader]),),
                       elr=tuple(r for r in state.elr if r != leader))
    alive = [r for r in state.replicas if r in live and r not in state.adding]
    if state.unclean_election and alive:
        return replace(bumped, leader=alive[0], isr=(IsrMember(alive[0], live[alive[0]]),), elr=())
    if state.leader == NO_LEADER:
        return state
    return replace(bumped, leader=NO_LEADER)


def complete_reassignment(state: PartitionState) -> PartitionState:
    """``state`` with its replica move completed when every target replica is in the ISR (KIP-455; Kafka's
    ``PartitionReassignmentReplicas.maybeCompleteReassignment``): ``replicas`` := the target, the ISR shrunk to it
    (so it holds every target replica, at least ``min_isr`` of them, and the ELR empties), ``adding`` and
    ``removing`` cleared. The leader is left as it was: when it was a removed replica :func:`elect` then elects one
    of the target. ``state`` itself when no move is in progress or it cannot complete yet, and when the target is
    smaller than ``min_isr`` (the request refuses such a target; a ``min.insync.replicas`` raised during the move
    keeps it from completing until lowered again)."""
    target = state.target
    if not state.moving or not set(target) <= state.isr_ids or len(target) < state.min_isr:
        return state
    moved = replace(state, replicas=target, adding=(), removing=())
    return change_isr(moved, tuple(m for m in state.isr if m.replica in target))


def settle(state: PartitionState, live: Mapping[int, int], wiped: frozenset[int] = frozenset()) -> PartitionState:
    """The controller's rules applied to ``state`` in order, given the registered brokers (``live``: replica ->
    broker epoch) and the replicas that registered with a lost disk: the ISR and ELR fenced, a move completed
    when it can be, and a leader elected when the current one is no longer an ISR member (one leader epoch bump at
    most, whatever of these happened)."""
    return elect(complete_reassignment(_fence(state, live, wiped)), live)


def reconcile(state: PartitionState, live: Mapping[int, int], wiped: frozenset[int] = frozenset()) -> PartitionState | None:
    """What the controller writes for this partition (:func:`settle`); None when nothing changes."""
    new = settle(state, live, wiped)
    return None if new == state else new
