"""The data of one KIP-848 consumer group: its members, epochs, target assignment and who holds which partition.

Kafka's ``ConsumerGroup`` / ``ConsumerGroupMember`` (``group-coordinator/.../modern/consumer/``) with their names in
snake case. The protocol that changes these objects is :mod:`walgate.coordinator.consumer_group`.

Invariants kept by the operations here and by their callers:

* ``partition_owner`` maps each (topic, partition) that a member holds — assigned to it or pending its revocation —
  to that one member; :meth:`ConsumerGroup.set_member_ownership` refuses to record a partition for a second
  member, so no partition is ever given to two members at once;
* ``static_members`` maps each instance id to the member that has it, and only members of ``members`` appear;
* the group's state is derived, never stored (:attr:`ConsumerGroup.state`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "Assignment",
    "ClassicMetadata",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "MemberState",
    "MemberUpdate",
    "OwnedPartitions",
    "clean_assignment",
    "partition_pairs",
]

LEAVE_GROUP_MEMBER_EPOCH: Final = -1
"""The member epoch of a heartbeat that leaves the group."""
LEAVE_GROUP_STATIC_MEMBER_EPOCH: Final = -2
"""The member epoch of a static member's heartbeat that leaves until it rejoins with its instance id."""

Assignment = dict[str, frozenset[int]]
"""Topic name -> partitions (topics with no partition are left out)."""

OwnedPartitions = Sequence[tuple[str, Sequence[int]]]
"""What a heartbeat says the member owns: (topic name, partitions) pairs."""


class MemberState(enum.Enum):
    """Kafka's ``MemberState``: how far a member is from its target assignment."""

    STABLE = "stable"
    """At the assignment epoch with everything its target gives it."""
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    """Must give up partitions it still owns; stays at its old epoch until its heartbeat no longer lists them."""
    UNRELEASED_PARTITIONS = "unreleased_partitions"
    """At the assignment epoch, but partitions of its target are still held by other members."""


class ConsumerGroupState(enum.Enum):
    """Kafka's ``ConsumerGroup.ConsumerGroupState``; the value is Kafka's name (ConsumerGroupDescribe, ListGroups)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """What a classic-protocol member (JoinGroup) of a consumer group declared (Kafka's ``ClassicMemberMetadata``)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(slots=True, eq=False)
class ConsumerGroupMember:
    """One member of a consumer group (a KIP-848 consumer, or a classic member when ``classic`` is set)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    subscribed_topic_names: tuple[str, ...] = ()
    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    assignment_epochs: dict[tuple[str, int], int] = field(default_factory=dict)
    """(topic, partition) of ``assigned`` or ``pending_revocation`` -> the member epoch at which the member was given
    it (KIP-1251): a commit at an older member epoch is accepted for the partitions the member already had then."""
    last_heartbeat_ms: int = 0
    classic: ClassicMetadata | None = None
    """Set for members that speak the classic protocol (JoinGroup / SyncGroup / Heartbeat)."""

    def update_member_epoch(self, epoch: int) -> None:
        """Kafka's ``Builder.updateMemberEpoch``: the old epoch becomes the previous one."""
        self.previous_member_epoch = self.member_epoch
        self.member_epoch = epoch


@dataclass(frozen=True, slots=True)
class MemberUpdate:
    """What one heartbeat (or a classic member's JoinGroup) says about its member; None / -1: unchanged."""

    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: Sequence[str] | None
    server_assignor: str | None
    owned: OwnedPartitions | None
    client_id: str
    client_host: str


@dataclass(slots=True, eq=False)
class ConsumerGroup:
    """One consumer group: its epochs, members, target assignment and partition holders."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    """Instance id -> member id."""
    target: dict[str, Assignment] = field(default_factory=dict)
    """Member id -> target assignment (of the assignment epoch)."""
    partition_owner: dict[tuple[str, int], str] = field(default_factory=dict)
    """(topic, partition) -> the member that holds it (assigned or pending revocation)."""
    subscription_metadata: dict[str, int] = field(default_factory=dict)
    """Subscribed topic -> partition count, as of the last epoch bump."""

    @property
    def state(self) -> ConsumerGroupState:
        """Kafka's ``ConsumerGroup.maybeUpdateGroupState``."""
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.state is not MemberState.STABLE or member.member_epoch != self.assignment_epoch:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def set_member_ownership(self, member: ConsumerGroupMember, old: Iterable[tuple[str, int]]) -> None:
        """Kafka's ``maybeUpdatePartitionEpoch``: drop *old* holdings of *member*, record its current ones."""
        for key in old:
            if self.partition_owner.get(key) == member.member_id:
                del self.partition_owner[key]
        for key in partition_pairs(member.assigned, member.pending_revocation):
            holder = self.partition_owner.get(key)
            if holder is not None and holder != member.member_id:
                raise AssertionError(f"{key} is held by {holder}, cannot be given to {member.member_id}")
            self.partition_owner[key] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        """Remove *member_id* with its holdings, target and instance id; the member, or None if there is none."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        for key in list(partition_pairs(member.assigned, member.pending_revocation)):
            if self.partition_owner.get(key) == member_id:
                del self.partition_owner[key]
        self.target.pop(member_id, None)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member

    def subscribed_topics(self) -> set[str]:
        """The union of the members' subscriptions."""
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


def partition_pairs(*assignments: Assignment) -> Iterable[tuple[str, int]]:
    """Every (topic, partition) of *assignments*."""
    for assignment in assignments:
        for topic, partitions in assignment.items():
            for p in partitions:
                yield (topic, p)


def clean_assignment(assignment: Mapping[str, Iterable[int]]) -> Assignment:
    """*assignment* as an :data:`Assignment` (frozensets, topics without partitions left out)."""
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}
