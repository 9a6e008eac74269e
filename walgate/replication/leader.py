"""The leader's view of one partition: its followers' positions, the ISR changes it proposes, the high watermark.

A :class:`LeaderView` lives while its replica leads one leader epoch. The shell tells it every follower fetch
(:meth:`LeaderView.on_fetch`), its own log end and durable end, the time, and every partition state it reads
from the control plane (:meth:`LeaderView.on_state`); the view answers with the error to return, the high
watermark, and at most one ISR change at a time to write by compare-and-swap (KIP-497).

Positions are offsets one past the last entry (log ends). A follower reports two: how far it has fetched and how
far its log is fsync'd (its durable end). Only durable ends count toward the high watermark, so an acknowledged
write survives the crash of every replica that acknowledged it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from walgate.replication.partition import AlterIsr, IsrMember, PartitionState, check_leader_epoch, same_incarnation
from walgate.wire.errors import ErrorCode

__all__ = ["FollowerState", "LeaderView", "high_watermark", "hw_position", "can_join_isr", "ack_status"]


@dataclass
class FollowerState:
    """What the leader knows of one follower incarnation (Kafka's ``Replica`` state on the leader)."""

    broker_epoch: int
    fetched_end: int
    durable_end: int
    last_caught_up_ms: int
    last_fetch_ms: int
    last_fetch_leader_end: int
    log_starts: Mapping[str, int] | None = None  # each topic's log start offset DeleteRecords set on the follower,
    # by topic id (hex; a topic absent: 0), as its last fetch reported them (Kafka's Replica.logStartOffset,
    # KIP-107); None: its fetches do not report them (WalFetch v0, an older release)


def hw_position(fetched_end: int, durable_end: int) -> int:
    """The position of a replica that counts toward the high watermark: its durable end (issue 25: the HW is the
    minimum durable position over the ISR; Kafka counts the fetched end and relies on replication alone)."""
    return min(fetched_end, durable_end)


def high_watermark(current: int, positions: list[int | None], isr_size: int, min_isr: int) -> int:
    """The new high watermark: the minimum of the ISR's positions, advancing only while the ISR has at least
    ``min_isr`` members (KIP-966) and every member's position is known; it never moves backwards (Kafka's
    ``Partition.maybeIncrementLeaderHW``)."""
    if isr_size < min_isr or not positions or any(p is None for p in positions):
        return current
    return max(current, min(p for p in positions if p is not None))


def can_join_isr(follower: FollowerState, hw: int, epoch_start: int) -> bool:
    """A follower outside the ISR may join once its durable end has reached the high watermark and the start of
    this leader epoch (Kafka's ``Partition.isFollowerInSync``, with the durable end for the fetched one): as a
    member it may be elected, and must then hold every acknowledged write."""
    return follower.durable_end >= max(hw, epoch_start)


def ack_status(hw: int, offset: int, isr_size: int, min_isr: int) -> ErrorCode | None:
    """An acks=all write at ``offset`` waiting for replication: None while the high watermark does not cover it;
    once it does, NONE if the ISR has ``min_isr`` members, NOT_ENOUGH_REPLICAS_AFTER_APPEND otherwise (Kafka's
    ``Partition.checkEnoughReplicasReachOffset``)."""
    if hw <= offset:
        return None
    return ErrorCode.none if isr_size >= min_isr else ErrorCode.not_enough_replicas_after_append


class LeaderView:
    """The leader ``replica`` (registered under ``broker_epoch``) of ``state.leader_epoch``, its log holding
    everything the epochs before wrote below ``epoch_start``.

    Invariants: ``hw`` never decreases; ``state`` is the newest partition state the view was told; at most one
    proposal is in flight (``pending``); a follower's state belongs to one broker epoch, and a fetch under a newer
    one starts it afresh.
    """

    def __init__(self, replica: int, broker_epoch: int, state: PartitionState, epoch_start: int, hw: int,
                 now_ms: int, lag_max_ms: int) -> None:
        if state.leader != replica:
            raise ValueError(f"replica {replica} is not the leader of {state}")
        self.replica = replica
        self.broker_epoch = broker_epoch
        self.state = state
        self.epoch_start = epoch_start
        self.hw = hw
        self.since_ms = now_ms
        self.lag_max_ms = lag_max_ms
        self.followers: dict[int, FollowerState] = {}
        self.pending: AlterIsr | None = None

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def deposed(self) -> bool:
        """The control plane moved leadership (another leader or leader epoch): this view must end."""
        return self.state.leader != self.replica

    def check_produce(self) -> ErrorCode | None:
        """Refuse an acks=all write before appending it while the ISR is below ``min_isr`` (NOT_ENOUGH_REPLICAS),
        or when this replica no longer leads (NOT_LEADER_OR_FOLLOWER)."""
        if self.deposed:
            return ErrorCode.not_leader_or_follower
        if len(self.state.isr) < self.state.min_isr:
            return ErrorCode.not_enough_replicas
        return None

    def on_state(self, state: PartitionState) -> None:
        """A partition state read from the control plane (a newer partition epoch replaces the view's; the answer
        to the pending proposal ends it). A follower that is no longer a replica (a reassignment completed without
        it, or cancelled while it was being added) is forgotten, as Kafka's ``Partition.updateAssignmentAndIsr``
        drops the removed replicas: else its last position, caught up once, would make it a joiner of every
        expansion :meth:`propose` makes, which the controller refuses (not a replica), over and over, and the
        replicas that did catch up would never rejoin the ISR."""
        if state.partition_epoch < self.state.partition_epoch:
            return
        self.state = state
        for gone in [r for r in self.followers if r not in state.replicas]:
            del self.followers[gone]
        if self.pending is not None and self.pending.partition_epoch < state.partition_epoch:
            self.pending = None

    def on_refused(self) -> None:
        """The pending proposal was refused: the shell re-reads the state; the next check may propose again."""
        self.pending = None

    def check_follower(self, follower: int, broker_epoch: int, registered_epoch: int | None) -> ErrorCode | None:
        """Whether ``follower`` under ``broker_epoch`` may fetch, recording nothing (what :meth:`on_fetch` checks
        after the leader epoch, and Kafka's leader before it reads for a follower, so before it answers a
        divergence): not a replica of the partition, NOT_LEADER_OR_FOLLOWER; a broker epoch older than the
        follower's registration (``registered_epoch``) or than one it already fetched with, STALE_BROKER_EPOCH."""
        if follower not in self.state.replicas or follower == self.replica:
            return ErrorCode.not_leader_or_follower
        known = self.followers.get(follower)
        if (registered_epoch is not None and broker_epoch < registered_epoch) or (
                known is not None and broker_epoch < known.broker_epoch):
            return ErrorCode.stale_broker_epoch
        return None

    def on_fetch(self, follower: int, broker_epoch: int, registered_epoch: int | None, leader_epoch: int,
                 fetch_offset: int, durable_end: int, log_end: int, now_ms: int,
                 log_starts: Mapping[str, int] | None = None) -> ErrorCode | None:
        """Validate and record a follower's fetch (``log_starts``: the log starts it reports, :class:`FollowerState`);
        None when the leader sends it entries from ``fetch_offset``.

        * a leader epoch other than this one: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH (KIP-320);
        * not a replica of the partition: NOT_LEADER_OR_FOLLOWER;
        * a broker epoch older than the follower's registration (``registered_epoch``) or than one it already
          fetched with: STALE_BROKER_EPOCH (a zombie of a restarted broker);
        * past this leader's log end: OFFSET_OUT_OF_RANGE (the follower truncates by epoch again).
        """
        error = check_leader_epoch(self.leader_epoch, leader_epoch) or self.check_follower(
            follower, broker_epoch, registered_epoch)
        if error is not None:
            return error
        known = self.followers.get(follower)
        if fetch_offset > log_end:
            return ErrorCode.offset_out_of_range
        if known is None or known.broker_epoch != broker_epoch:
            known = FollowerState(broker_epoch, 0, 0, self.since_ms, now_ms, 0)
            self.followers[follower] = known
        # Kafka's Replica.updateFetchState: caught up now, or since the previous fetch if it reached that end
        if fetch_offset >= log_end:
            known.last_caught_up_ms = now_ms
        elif fetch_offset >= known.last_fetch_leader_end:
            known.last_caught_up_ms = max(known.last_caught_up_ms, known.last_fetch_ms)
        known.fetched_end, known.durable_end = fetch_offset, min(durable_end, fetch_offset)
        known.last_fetch_ms, known.last_fetch_leader_end = now_ms, log_end
        known.log_starts = log_starts
        return None

    def low_watermark(self, topic_id: str, own: int, alive: Callable[[int], bool]) -> int:
        """Topic ``topic_id``'s low watermark over the partition's replicas (Kafka's ``Partition.lowWatermarkIfLeader``,
        what DeleteRecords waits for, KIP-107): the least of this leader's log start ``own`` and the log start each
        other replica that is ``alive`` (registered) reported with its last fetch (0 before it fetched: it has not
        learnt the leader's); a follower whose fetches report none (an older release's) is not counted."""
        low = own
        for replica in self.state.replicas:
            if replica == self.replica or not alive(replica):
                continue
            known = self.followers.get(replica)
            if known is None:
                return 0
            if known.log_starts is not None:
                low = min(low, known.log_starts.get(topic_id, 0))
        return low

    def _position(self, member: IsrMember, log_end: int, durable_end: int) -> int | None:
        if member.replica == self.replica:
            return hw_position(log_end, durable_end)
        known = self.followers.get(member.replica)
        if known is None or not same_incarnation(member.broker_epoch, known.broker_epoch):
            return None
        return hw_position(known.fetched_end, known.durable_end)

    def update_hw(self, log_end: int, durable_end: int) -> int:
        """Advance the high watermark from the positions known now: the minimum over the ISR as committed and as
        pending (the larger set: a replica counts from the moment it is proposed and until its removal is
        committed), while the committed ISR has ``min_isr`` members."""
        members = set(self.state.isr) | (set(self.pending.isr) if self.pending else set())
        positions = [self._position(m, log_end, durable_end) for m in sorted(members)]
        self.hw = high_watermark(self.hw, positions, len(self.state.isr), self.state.min_isr)
        return self.hw

    def _out_of_sync(self, member: IsrMember, now_ms: int) -> bool:
        """Kafka's ``Partition.getOutOfSyncReplicas``: not caught up for longer than replica.lag.time.max.ms."""
        if member.replica == self.replica:
            return False
        known = self.followers.get(member.replica)
        if known is None:
            return now_ms - self.since_ms > self.lag_max_ms
        if not same_incarnation(member.broker_epoch, known.broker_epoch):
            return True
        return now_ms - known.last_caught_up_ms > self.lag_max_ms

    def propose(self, now_ms: int, registered: Mapping[int, int]) -> AlterIsr | None:
        """The ISR change to write now, if any and none is in flight: remove members out of sync (shrink), or add
        followers that caught up under the broker epoch they are registered with (expand, KIP-903)."""
        if self.pending is not None or self.deposed:
            return None
        isr = set(self.state.isr)
        shrunk = {m for m in isr if not self._out_of_sync(m, now_ms)}
        if shrunk != isr:
            return self._pending(shrunk)
        joiners = {IsrMember(r, f.broker_epoch) for r, f in self.followers.items()
                   if r not in self.state.isr_ids and can_join_isr(f, self.hw, self.epoch_start)
                   and r in registered and same_incarnation(f.broker_epoch, registered[r])}
        return self._pending(isr | joiners) if joiners else None

    def _pending(self, isr: set[IsrMember]) -> AlterIsr:
        self.pending = AlterIsr(self.replica, self.leader_epoch, self.state.partition_epoch, tuple(sorted(isr)),
                                self.broker_epoch)
        return self.pending
