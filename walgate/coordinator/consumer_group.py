"""KIP-848 consumer groups (ConsumerGroupHeartbeat / ConsumerGroupDescribe) as a pure state machine.

This is the TDengine mnode model in Kafka's words: the server owns the
assignment. Members send heartbeats carrying their subscription and the
partitions they own; the coordinator keeps the group epoch, computes the
target assignment (an even split of every subscribed topic's partitions over
the members subscribed to it: 4 partitions and 3 members -> 2, 1, 1; 5 members
-> one idle) and moves each member towards its target, revoking before
assigning: a partition still owned by one member is not given to another until
the first one's heartbeat no longer lists it.

It follows Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``,
``CurrentAssignmentBuilder`` and ``ConsumerGroup`` / ``ConsumerGroupMember``
(``group-coordinator/.../modern/consumer/``) with their names in snake case.
Like :mod:`walgate.coordinator.classic` it is synchronous and pure: it never
reads the clock, every call takes ``now_ms``, timers (session timeout, rebalance
timeout) live in a :class:`~walgate.coordinator.timer.KeyedTimer` fired by
:meth:`ConsumerGroups.tick`; :meth:`ConsumerGroups.next_deadline` tells the
gateway when to call it. Heartbeats are answered at once: there are no parked
requests.

Topics are names here; the gateway converts topic ids to names (request) and
back (response) with its catalog.

Epochs
------
* group epoch: bumped when a member joins, leaves or is removed, when a
  subscription changes, and when the partition count of a subscribed topic
  changes (the ``topic_partitions`` callable is asked on every heartbeat).
* assignment epoch: the group epoch the target assignment was computed for;
  the target is recomputed on the next heartbeat of any member after a bump
  (in between the group is ``Assigning``, as in Kafka).
* member epoch: a member reaches the assignment epoch once it has revoked what
  it must give up (``UNREVOKED_PARTITIONS`` until then, at its old epoch);
  partitions still owned by others are withheld (``UNRELEASED_PARTITIONS``)
  and handed over on a later heartbeat once released.

Member states (Kafka's ``MemberState``)::

    STABLE ──target changed, must revoke──► UNREVOKED_PARTITIONS ──owned no longer lists them──┐
      ▲  └──target changed, some partitions still held by others──► UNRELEASED_PARTITIONS     │
      └───────────────── everything released and assigned ◄──────────────────┘ ◄──────────────┘

Group states (``ConsumerGroupDescribe``'s ``group_state``): ``Empty`` (no
members), ``Assigning`` (group epoch > assignment epoch), ``Reconciling``
(a member is not at the assignment epoch or not STABLE), ``Stable``.

Errors (where Kafka returns them)
---------------------------------
* INVALID_REQUEST: empty group id, instance id or rack id; empty member id
  with epoch > 0 or -1; a join (epoch 0) without rebalance timeout, with owned
  partitions that are not an empty list, or without subscribed topic names;
  epoch -2 without instance id; epoch < -2.
* UNSUPPORTED_ASSIGNOR: ``server_assignor`` other than ``uniform``.
* GROUP_ID_NOT_FOUND: the group id is used by a classic group with members
  (Kafka 4: "Group g is not a consumer group"; online upgrade is not done).
* GROUP_MAX_SIZE_REACHED: a new member beyond ``max_group_size``.
* UNKNOWN_MEMBER_ID: heartbeat / leave of a member id the group does not
  have, or of an unknown static instance id.
* FENCED_MEMBER_EPOCH: epoch ahead of the member's, or behind it unless it is
  the previous epoch and the owned partitions are a subset of the assignment
  (the response bumping the epoch was lost).
* UNRELEASED_INSTANCE_ID: a static member joins with an instance id whose
  holder has not left with epoch -2.
* FENCED_INSTANCE_ID: the instance id is held by another member id.

Decisions (where walgate differs from Kafka, and why)
-----------------------------------------------------
* Soft state, as for classic groups: nothing is written to the WAL. After a
  walgate restart a heartbeat with epoch > 0 (or a leave) for a group this
  node does not know gets UNKNOWN_MEMBER_ID, not Kafka's GROUP_ID_NOT_FOUND,
  so clients rejoin (epoch 0) instead of failing.
* A join (epoch 0) from a member id the group already has is accepted as a
  rejoin (clients keep their member id after FENCED_MEMBER_EPOCH and rejoin
  with epoch 0, owning nothing); it gets its current assignment in full.
* One server assignor, ``uniform``: for each subscribed topic an even split
  over the members subscribed to it, sticky (a member keeps partitions of its
  previous target as far as its quota allows). Kafka's ``range`` is refused.
* The rebalance timeout applies while a member must revoke partitions
  (UNREVOKED_PARTITIONS): it starts when the member enters that state; a
  member still at that epoch when it fires is removed.
* A static member that left with epoch -2 keeps its partitions until it
  rejoins with the same instance id or its session timeout expires.
* Member ids generated here are ``uuid4`` strings (v0); the gateway enforces
  that v1 requests carry a client-generated member id.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode

from walgate.coordinator.classic import AdoptedMember, ConsumerInfo
from walgate.coordinator.consumer_protocol import (
    PROTOCOL_TYPE,
    assigned_partitions,
    encode_assignment,
    encode_subscription,
    subscription,
)
from walgate.coordinator.errors import ConsumerProtocolError
from walgate.coordinator.group import join_response
from walgate.coordinator.timer import KeyedTimer

__all__ = [
    "ConsumerGroups",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "MemberState",
    "ConsumerGroupState",
    "Assignment",
    "uniform_assignment",
    "GROUP_TYPE",
    "UNIFORM_ASSIGNOR",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
]

GROUP_TYPE: Final = "consumer"
"""ListGroups' ``group_type`` of these groups (Kafka's ``Group.GroupType.CONSUMER``)."""

UNIFORM_ASSIGNOR: Final = "uniform"
_CLASSIC_MEMBER, _CONSUMER_MEMBER = 0, 1  # ConsumerGroupDescribe v1 member_type
LEAVE_GROUP_MEMBER_EPOCH: Final = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH: Final = -2

Assignment = dict[str, frozenset[int]]
"""Topic name -> partitions (topics with no partition are left out)."""

OwnedPartitions = Sequence[tuple[str, Sequence[int]]]


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


class _HeartbeatError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """What a classic-protocol member (JoinGroup) of a consumer group declared (Kafka's ``ClassicMemberMetadata``)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(slots=True, eq=False)
class ConsumerGroupMember:
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
        for key in _pairs(member.assigned, member.pending_revocation):
            holder = self.partition_owner.get(key)
            if holder is not None and holder != member.member_id:
                raise AssertionError(f"{key} is held by {holder}, cannot be given to {member.member_id}")
            self.partition_owner[key] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        for key in list(_pairs(member.assigned, member.pending_revocation)):
            if self.partition_owner.get(key) == member_id:
                del self.partition_owner[key]
        self.target.pop(member_id, None)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


def _pairs(*assignments: Assignment) -> Iterable[tuple[str, int]]:
    for assignment in assignments:
        for topic, partitions in assignment.items():
            for p in partitions:
                yield (topic, p)


def _clean(assignment: Mapping[str, Iterable[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def uniform_assignment(
    members: Sequence[ConsumerGroupMember],
    partition_counts: Mapping[str, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """The target assignment: per topic, an even split over the members subscribed to it, sticky.

    Members are taken in *members* order (join order). For a topic of n
    partitions and k subscribed members every member gets n // k partitions
    and n % k of them one more: those that held the most of the topic in
    *previous* (the last target), then those with the fewest partitions so far
    (balance across topics), then join order. Each member keeps as many of its
    previous partitions as its quota allows (lowest ids first); the rest is
    dealt out in partition order.
    """
    result: dict[str, dict[str, list[int]]] = {m.member_id: {} for m in members}
    totals = {m.member_id: 0 for m in members}
    for topic in sorted(partition_counts):
        n = partition_counts[topic]
        subscribers = [m for m in members if topic in m.subscribed_topic_names]
        if n <= 0 or not subscribers:
            continue
        k = len(subscribers)
        base, extra = divmod(n, k)
        held = {
            m.member_id: sorted(p for p in previous.get(m.member_id, {}).get(topic, ()) if p < n) for m in subscribers
        }
        order = {m.member_id: i for i, m in enumerate(subscribers)}
        ranked = sorted(subscribers, key=lambda m: (-len(held[m.member_id]), totals[m.member_id], order[m.member_id]))
        quota = {m.member_id: base + (1 if i < extra else 0) for i, m in enumerate(ranked)}
        taken: set[int] = set()
        chosen: dict[str, list[int]] = {}
        for m in subscribers:
            keep = held[m.member_id][: quota[m.member_id]]
            chosen[m.member_id] = keep
            taken.update(keep)
        free = iter(p for p in range(n) if p not in taken)
        for m in subscribers:
            mine = chosen[m.member_id]
            while len(mine) < quota[m.member_id]:
                mine.append(next(free))
            if mine:
                result[m.member_id][topic] = sorted(mine)
                totals[m.member_id] += len(mine)
    return {mid: _clean(a) for mid, a in result.items()}


def _response_assignment(assignment: Assignment) -> dict[str, Any]:
    return {
        "topic_partitions": [
            {"topic_name": topic, "partitions": sorted(assignment[topic])} for topic in sorted(assignment)
        ]
    }


def _error(error: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "error_code": error,
        "error_message": message,
        "member_id": None,
        "member_epoch": 0,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


def _session_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("session", group_id, member_id)


def _rebalance_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("rebalance", group_id, member_id)


def _uuid4() -> str:
    return str(uuid.uuid4())


class ConsumerGroups:
    """Every consumer-protocol (KIP-848) group of this coordinator.

    Keyword arguments are Kafka's broker settings:
    ``group.consumer.heartbeat.interval.ms`` (5000),
    ``group.consumer.session.timeout.ms`` (45000), ``group.consumer.max.size``.
    *is_classic_group_in_use* tells whether a group id is taken by a classic
    group with members (such ids are refused with GROUP_ID_NOT_FOUND);
    *new_member_id* makes server-generated member ids (tests inject a counter).
    """

    def __init__(
        self,
        *,
        heartbeat_interval_ms: int = 5_000,
        session_timeout_ms: int = 45_000,
        max_group_size: int = 2**31 - 1,
        is_classic_group_in_use: Callable[[str], bool] = lambda group_id: False,
        new_member_id: Callable[[], str] = _uuid4,
    ) -> None:
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.max_group_size = max_group_size
        self._is_classic_group_in_use = is_classic_group_in_use
        self._new_member_id = new_member_id
        self._groups: dict[str, ConsumerGroup] = {}
        self._timer: KeyedTimer[tuple[str, str] | None] = KeyedTimer()

    # ------------------------------------------------------------------ time

    def group(self, group_id: str) -> ConsumerGroup | None:
        return self._groups.get(group_id)

    def next_deadline(self) -> int | None:
        return self._timer.next_deadline()

    def tick(self, now_ms: int) -> list[tuple[str, str]]:
        """Fire due timers; returns the (group id, member id) of the members removed."""
        removed = []
        for operation in self._timer.expired(now_ms):
            gone = operation(now_ms)
            if gone is not None:
                removed.append(gone)
        return removed

    def _session_expired_op(self, group_id: str, member_id: str) -> Callable[[int], tuple[str, str] | None]:
        def expire(now_ms: int) -> tuple[str, str] | None:
            group = self._groups.get(group_id)
            if group is None or member_id not in group.members:
                return None
            self._fence_member(group, member_id)
            return (group_id, member_id)

        return expire

    def _rebalance_expired_op(
        self, group_id: str, member_id: str, member_epoch: int
    ) -> Callable[[int], tuple[str, str] | None]:
        def expire(now_ms: int) -> tuple[str, str] | None:
            group = self._groups.get(group_id)
            member = None if group is None else group.members.get(member_id)
            if group is None or member is None or member.member_epoch != member_epoch:
                return None
            self._fence_member(group, member_id)
            return (group_id, member_id)

        return expire

    def _fence_member(self, group: ConsumerGroup, member_id: str) -> None:
        """Kafka's ``consumerGroupFenceMember``: remove the member and bump the group epoch."""
        group.remove_member(member_id)
        self._timer.cancel(_session_key(group.group_id, member_id))
        self._timer.cancel(_rebalance_key(group.group_id, member_id))
        group.group_epoch += 1
        group.subscription_metadata = {
            t: c for t, c in group.subscription_metadata.items() if t in group.subscribed_topics()
        }

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(
        self,
        *,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed_topic_names: Sequence[str] | None,
        server_assignor: str | None,
        topic_partitions: Callable[[str], int | None],
        owned: OwnedPartitions | None,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> dict[str, Any]:
        """A ConsumerGroupHeartbeat; returns the response body (see the module docstring)."""
        update = MemberUpdate(instance_id, rack_id, rebalance_timeout_ms, subscribed_topic_names, server_assignor,
                              owned, client_id, client_host)
        try:
            self._validate_request(group_id, member_id, member_epoch, update)
            if member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(group_id, member_id, member_epoch, instance_id)
            return self._heartbeat(group_id, member_id, member_epoch, update, topic_partitions, now_ms)
        except _HeartbeatError as exc:
            return _error(exc.error, exc.message)

    @staticmethod
    def _validate_request(group_id: str, member_id: str, member_epoch: int, update: MemberUpdate) -> None:
        """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid`` (without the v1 member-id rule)."""
        def invalid(message: str) -> _HeartbeatError:
            return _HeartbeatError(ErrorCode.invalid_request, message)

        if (member_epoch > 0 or member_epoch == LEAVE_GROUP_MEMBER_EPOCH) and member_id == "":
            raise invalid("MemberId can't be empty.")
        if group_id == "":
            raise invalid("GroupId can't be empty.")
        if update.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if update.rack_id == "":
            raise invalid("RackId can't be empty.")
        if member_epoch == 0:
            if update.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if update.owned is None or len(update.owned) != 0:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if update.subscribed_topic_names is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        elif member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if update.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if update.server_assignor is not None and update.server_assignor != UNIFORM_ASSIGNOR:
            raise _HeartbeatError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {update.server_assignor} is not supported. Supported assignors: {UNIFORM_ASSIGNOR}.",
            )

    def _get_or_maybe_create_group(self, group_id: str, member_id: str, create: bool) -> ConsumerGroup:
        group = self._groups.get(group_id)
        if create and self._is_classic_group_in_use(group_id):
            raise _HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group")
        if group is None:
            if not create:
                # Kafka: GROUP_ID_NOT_FOUND; walgate's groups are soft state (see Decisions).
                raise _HeartbeatError(
                    ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}."
                )
            group = ConsumerGroup(group_id)
            self._groups[group_id] = group
        return group

    @staticmethod
    def _throw_if_member_epoch_is_invalid(
        member: ConsumerGroupMember, received: int, owned: OwnedPartitions | None
    ) -> None:
        if received > member.member_epoch:
            raise _HeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a greater member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )
        if received < member.member_epoch:
            if received != member.previous_member_epoch or not _is_subset(owned, member.assigned):
                raise _HeartbeatError(
                    ErrorCode.fenced_member_epoch,
                    f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
                    f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and "
                    "rejoin.",
                )

    def _unknown_member(self, group: ConsumerGroup, member_id: str) -> _HeartbeatError:
        return _HeartbeatError(
            ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}."
        )

    def _heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        update: MemberUpdate,
        topic_partitions: Callable[[str], int | None],
        now_ms: int,
    ) -> dict[str, Any]:
        joining = member_epoch == 0
        existed = group_id in self._groups
        group = self._get_or_maybe_create_group(group_id, member_id, joining)
        try:
            return self._heartbeat_in(group, member_id, member_epoch, update, topic_partitions, now_ms)
        except _HeartbeatError:
            if not existed and not group.members:
                del self._groups[group_id]
            raise

    def _heartbeat_in(
        self,
        group: ConsumerGroup,
        member_id: str,
        member_epoch: int,
        update: MemberUpdate,
        topic_partitions: Callable[[str], int | None],
        now_ms: int,
    ) -> dict[str, Any]:
        joining = member_epoch == 0
        instance_id, owned = update.instance_id, update.owned
        if joining and member_id == "":
            member_id = self._new_member_id()
        # throwIfConsumerGroupIsFull
        if len(group.members) >= self.max_group_size and member_id not in group.members:
            raise _HeartbeatError(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of {self.max_group_size} members.",
            )

        # Get or create the member.
        is_new = False
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise self._unknown_member(group, member_id)
                member = ConsumerGroupMember(member_id)
                is_new = True
            elif not joining:
                self._throw_if_member_epoch_is_invalid(member, member_epoch, owned)
        else:
            existing_id = group.static_members.get(instance_id)
            existing = None if existing_id is None else group.members[existing_id]
            if joining:
                if existing is None:
                    member = group.members.get(member_id) or ConsumerGroupMember(member_id)
                    is_new = member_id not in group.members
                else:
                    if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise _HeartbeatError(
                            ErrorCode.unreleased_instance_id,
                            f"Static member {member_id} with instance id {instance_id} cannot join the group "
                            f"because the instance id is owned by {existing.member_id} member.",
                        )
                    member = self._replace_static_member(group, existing, member_id)
            else:
                if existing is None:
                    raise _HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
                if existing.member_id != member_id:
                    raise _HeartbeatError(
                        ErrorCode.fenced_instance_id,
                        f"Static member {member_id} with instance id {instance_id} was fenced by member "
                        f"{existing.member_id}.",
                    )
                self._throw_if_member_epoch_is_invalid(existing, member_epoch, owned)
                member = existing

        old_assigned = dict(member.assigned)
        self._update_member(group, member, is_new, update, topic_partitions, now_ms)
        self._schedule_session(group, member, self.session_timeout_ms, now_ms)

        full_request = joining or (
            update.rebalance_timeout_ms != -1 and update.subscribed_topic_names is not None and owned is not None
        )
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "member_id": member.member_id,
            "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "assignment": (
                _response_assignment(member.assigned)
                if full_request or member.assigned != old_assigned
                else None
            ),
        }

    def _schedule_session(self, group: ConsumerGroup, member: ConsumerGroupMember, timeout_ms: int, now_ms: int) -> None:
        self._timer.schedule(
            _session_key(group.group_id, member.member_id),
            now_ms + timeout_ms,
            self._session_expired_op(group.group_id, member.member_id),
        )

    def _update_member(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        is_new: bool,
        update: MemberUpdate,
        topic_partitions: Callable[[str], int | None],
        now_ms: int,
    ) -> None:
        """Kafka's heartbeat steps 1-3 (shared by both protocols' members)."""
        # 1. Create or update the member; bump the group epoch on membership / subscription changes.
        bump = group.group_epoch == 0 or is_new
        if update.instance_id is not None:
            member.instance_id = update.instance_id
            group.static_members[update.instance_id] = member.member_id
        if update.rack_id is not None:
            member.rack_id = update.rack_id
        if update.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = update.rebalance_timeout_ms
        if update.server_assignor is not None:
            member.server_assignor = update.server_assignor
        if update.subscribed_topic_names is not None:
            names = tuple(dict.fromkeys(update.subscribed_topic_names))
            if set(names) != set(member.subscribed_topic_names):
                bump = True
            member.subscribed_topic_names = names
        member.client_id = update.client_id
        member.client_host = update.client_host
        member.last_heartbeat_ms = now_ms
        if is_new:
            group.members[member.member_id] = member

        metadata = {}
        for topic in sorted(group.subscribed_topics()):
            count = topic_partitions(topic)
            if count is not None and count > 0:
                metadata[topic] = count
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            bump = True
        if bump:
            group.group_epoch += 1

        # 2. Update the target assignment if the group epoch is ahead of it.
        if group.group_epoch > group.assignment_epoch:
            group.target = uniform_assignment(list(group.members.values()), group.subscription_metadata, group.target)
            group.assignment_epoch = group.group_epoch

        # 3. Reconcile the member towards its target.
        self._maybe_reconcile(group, member, update.owned)

    def _replace_static_member(
        self, group: ConsumerGroup, existing: ConsumerGroupMember, member_id: str
    ) -> ConsumerGroupMember:
        """A static member rejoins under a new member id: it inherits the old one's assignment and target."""
        target = group.target.get(existing.member_id)
        group.remove_member(existing.member_id)
        self._timer.cancel(_session_key(group.group_id, existing.member_id))
        self._timer.cancel(_rebalance_key(group.group_id, existing.member_id))
        member = ConsumerGroupMember(
            member_id,
            instance_id=existing.instance_id,
            rack_id=existing.rack_id,
            client_id=existing.client_id,
            client_host=existing.client_host,
            rebalance_timeout_ms=existing.rebalance_timeout_ms,
            server_assignor=existing.server_assignor,
            subscribed_topic_names=existing.subscribed_topic_names,
            state=existing.state,
            member_epoch=0,
            previous_member_epoch=0,
            assigned=dict(existing.assigned),
            pending_revocation=dict(existing.pending_revocation),
            classic=existing.classic,
        )
        group.members[member_id] = member
        if target is not None:
            group.target[member_id] = target
        group.set_member_ownership(member, ())
        return member

    def _maybe_reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember, owned: OwnedPartitions | None) -> None:
        """Kafka's ``maybeReconcile`` + ``CurrentAssignmentBuilder.build``."""
        if member.state is MemberState.STABLE and member.member_epoch == group.assignment_epoch:
            return
        if member.state is MemberState.UNREVOKED_PARTITIONS and _owns_any(owned, member.pending_revocation):
            return
        before = (member.state, member.member_epoch, member.assigned, member.pending_revocation)
        old_pairs = list(_pairs(member.assigned, member.pending_revocation))
        self._compute_next_assignment(group, member, owned)
        group.set_member_ownership(member, old_pairs)
        after = (member.state, member.member_epoch, member.assigned, member.pending_revocation)
        if after != before:
            key = _rebalance_key(group.group_id, member.member_id)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._timer.schedule(
                    key,
                    member.last_heartbeat_ms + max(member.rebalance_timeout_ms, 0),
                    self._rebalance_expired_op(group.group_id, member.member_id, member.member_epoch),
                )
            else:
                self._timer.cancel(key)

    @staticmethod
    def _compute_next_assignment(group: ConsumerGroup, member: ConsumerGroupMember, owned: OwnedPartitions | None) -> None:
        """``CurrentAssignmentBuilder.computeNextAssignment`` (topics by name)."""
        target = group.target.get(member.member_id, {})
        subscribed = set(member.subscribed_topic_names)
        has_unreleased = False
        new_assigned: dict[str, frozenset[int]] = {}
        new_pending_revocation: dict[str, frozenset[int]] = {}
        new_pending_assignment: dict[str, frozenset[int]] = {}
        for topic in sorted(set(target) | set(member.assigned)):
            tgt = target.get(topic, frozenset()) if topic in subscribed else frozenset()
            current = member.assigned.get(topic, frozenset())
            assigned = current & tgt
            revoke = current - assigned
            pending = tgt - assigned
            # A partition held by another member (assigned or being revoked) is unreleased.
            unreleased = {p for p in pending if group.partition_owner.get((topic, p)) not in (None, member.member_id)}
            if unreleased:
                has_unreleased = True
                pending = pending - unreleased
            if assigned:
                new_assigned[topic] = assigned
            if revoke:
                new_pending_revocation[topic] = revoke
            if pending:
                new_pending_assignment[topic] = pending

        if new_pending_revocation and _owns_any(owned, new_pending_revocation):
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.update_member_epoch(member.member_epoch)
            member.assigned = new_assigned
            member.pending_revocation = new_pending_revocation
            return
        for topic, partitions in new_pending_assignment.items():
            new_assigned[topic] = new_assigned.get(topic, frozenset()) | partitions
        member.state = MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE
        member.update_member_epoch(group.assignment_epoch)
        member.assigned = new_assigned
        member.pending_revocation = {}

    # ------------------------------------------------------------------ leave

    def _leave(self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None) -> dict[str, Any]:
        """Kafka's ``consumerGroupLeave`` (-1: leave, -2: static member leaves temporarily)."""
        group = self._groups.get(group_id)
        if group is None:
            raise _HeartbeatError(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
        if instance_id is None:
            if member_id not in group.members:
                raise self._unknown_member(group, member_id)
            self._fence_member(group, member_id)
        else:
            existing_id = group.static_members.get(instance_id)
            if existing_id is None:
                raise _HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
            if existing_id != member_id:
                raise _HeartbeatError(
                    ErrorCode.fenced_instance_id,
                    f"Static member {member_id} with instance id {instance_id} was fenced by member {existing_id}.",
                )
            if member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                member = group.members[member_id]
                member.update_member_epoch(LEAVE_GROUP_STATIC_MEMBER_EPOCH)
                self._timer.cancel(_rebalance_key(group_id, member_id))
            else:
                self._fence_member(group, member_id)
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "member_id": member_id,
            "member_epoch": member_epoch,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }

    # ------------------------------------------------------------------ classic members

    def adopt(self, group_id: str, generation_id: int, members: Sequence[AdoptedMember], now_ms: int) -> None:
        """Kafka's online upgrade (``ConsumerGroup.fromClassicGroup``): a classic group becomes a consumer group.

        The epochs continue from the classic generation, every member keeps its
        current assignment (which is also the target until the next epoch bump)
        and becomes a classic member of the new group; undecodable subscription or
        assignment bytes count as empty.
        """
        group = ConsumerGroup(group_id, group_epoch=generation_id, assignment_epoch=generation_id)
        self._groups[group_id] = group
        for m in members:
            try:
                topics, _ = subscription(m.subscription)
            except ConsumerProtocolError:
                topics = ()
            try:
                assigned = _clean(assigned_partitions(m.assignment))
            except ConsumerProtocolError:
                assigned = {}
            member = ConsumerGroupMember(
                m.member_id, instance_id=m.instance_id, client_id=m.client_id, client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms, subscribed_topic_names=topics,
                member_epoch=generation_id, previous_member_epoch=generation_id, assigned=assigned,
                last_heartbeat_ms=now_ms, classic=ClassicMetadata(m.session_timeout_ms, m.protocols),
            )
            group.members[m.member_id] = member
            if m.instance_id is not None:
                group.static_members[m.instance_id] = m.member_id
            group.target[m.member_id] = dict(assigned)
            group.set_member_ownership(member, ())
            self._schedule_session(group, member, m.session_timeout_ms, now_ms)
        group.subscription_metadata = {}  # recomputed (and the epoch bumped) by the next heartbeat

    def classic_join(
        self,
        *,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_member_id: bool,
        topic_partitions: Callable[[str], int | None],
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> dict[str, Any]:
        """Kafka's ``classicGroupJoinToConsumerGroup``: a JoinGroup answered at once by the server's assignment.

        The member's subscription and owned partitions come from its first
        protocol's metadata; it is reconciled like any member and answered with
        its member epoch as the generation and no leader (so it does not assign:
        SyncGroup hands it the server's assignment).
        """
        group = self._groups[group_id]
        try:
            if protocol_type != PROTOCOL_TYPE or not protocols or not self._supports_protocols(group, protocols):
                raise _HeartbeatError(ErrorCode.inconsistent_group_protocol, "protocols do not match the group's")
            try:
                topics, owned_map = subscription(protocols[0][1])
            except ConsumerProtocolError as exc:
                raise _HeartbeatError(ErrorCode.inconsistent_group_protocol, str(exc)) from None
            is_new = False
            if instance_id is not None and instance_id in group.static_members:
                existing = group.members[group.static_members[instance_id]]
                if member_id not in ("", existing.member_id):
                    raise _HeartbeatError(ErrorCode.fenced_instance_id, f"instance id {instance_id} is held")
                if member_id == "":
                    member = self._replace_static_member(group, existing, self._new_member_id())
                else:
                    member = existing
            elif member_id == "":
                member_id = self._new_member_id()
                if require_known_member_id and instance_id is None:
                    return join_response(ErrorCode.member_id_required, member_id)
                member, is_new = ConsumerGroupMember(member_id), True
            else:
                # Like Kafka, a member id the group does not have is a new member: there are no pending
                # members here, the id may be the one MEMBER_ID_REQUIRED handed out.
                found = group.members.get(member_id)
                if found is not None and found.classic is None:
                    raise self._unknown_member(group, member_id)
                member, is_new = (found, False) if found is not None else (ConsumerGroupMember(member_id), True)
            if is_new and len(group.members) >= self.max_group_size:
                raise _HeartbeatError(ErrorCode.group_max_size_reached, "the group is full")
        except _HeartbeatError as exc:
            return join_response(exc.error, member_id)
        member.classic = ClassicMetadata(session_timeout_ms, tuple(protocols))
        update = MemberUpdate(instance_id, None, rebalance_timeout_ms, topics, None, list(owned_map.items()),
                              client_id, client_host)
        self._update_member(group, member, is_new, update, topic_partitions, now_ms)
        self._schedule_session(group, member, session_timeout_ms, now_ms)
        return join_response(ErrorCode.none, member.member_id, generation_id=member.member_epoch,
                             protocol_type=PROTOCOL_TYPE, protocol_name=protocols[0][0])

    @staticmethod
    def _supports_protocols(group: ConsumerGroup, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Every classic member of the group shares a protocol name with *protocols*."""
        names = {name for name, _ in protocols}
        return all(
            names & {name for name, _ in m.classic.protocols} for m in group.members.values() if m.classic is not None
        )

    def _classic_member(self, group_id: str, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
        group = self._groups[group_id]
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            raise self._unknown_member(group, member_id)
        if instance_id is not None and member.instance_id != instance_id:
            raise _HeartbeatError(ErrorCode.fenced_instance_id, f"instance id {instance_id} is not {member_id}'s")
        return member

    def classic_sync(
        self,
        *,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        now_ms: int,
    ) -> dict[str, Any]:
        """Kafka's ``classicGroupSyncToConsumerGroup``: the member's current assignment, in consumer-protocol bytes."""
        try:
            member = self._classic_member(group_id, member_id, instance_id)
            assert member.classic is not None
            if generation_id != member.member_epoch:
                raise _HeartbeatError(ErrorCode.illegal_generation, "generation is not the member epoch")
            names = [name for name, _ in member.classic.protocols]
            if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != names[0]
            ):
                raise _HeartbeatError(ErrorCode.inconsistent_group_protocol, "protocol does not match the join")
        except _HeartbeatError as exc:
            return {"error_code": exc.error, "protocol_type": None, "protocol_name": None, "assignment": b""}
        member.last_heartbeat_ms = now_ms
        self._schedule_session(self._groups[group_id], member, member.classic.session_timeout_ms, now_ms)
        return {
            "error_code": ErrorCode.none,
            "protocol_type": PROTOCOL_TYPE,
            "protocol_name": names[0],
            "assignment": encode_assignment({t: sorted(ps) for t, ps in sorted(member.assigned.items())}),
        }

    def classic_heartbeat(
        self, *, group_id: str, member_id: str, instance_id: str | None, generation_id: int, now_ms: int
    ) -> ErrorCode:
        """Kafka's ``classicGroupHeartbeatToConsumerGroup``: REBALANCE_IN_PROGRESS once the member must rejoin.

        It must rejoin when the group epoch moved past its epoch (its target may
        have changed) or it is still revoking / waiting for partitions.
        """
        try:
            member = self._classic_member(group_id, member_id, instance_id)
            assert member.classic is not None
            if generation_id != member.member_epoch:
                raise _HeartbeatError(ErrorCode.illegal_generation, "generation is not the member epoch")
        except _HeartbeatError as exc:
            return exc.error
        group = self._groups[group_id]
        member.last_heartbeat_ms = now_ms
        self._schedule_session(group, member, member.classic.session_timeout_ms, now_ms)
        if member.state is not MemberState.STABLE or member.member_epoch != group.group_epoch:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def classic_leave(self, *, group_id: str, members: Sequence[tuple[str, str | None]]) -> dict[str, Any]:
        """Kafka's ``classicGroupLeaveToConsumerGroup``: each (member id, instance id) leaves; per-member errors."""
        group = self._groups[group_id]
        answers = []
        for member_id, instance_id in members:
            target = member_id or (group.static_members.get(instance_id or "") if instance_id else None)
            member = None if target is None else group.members.get(target)
            if member is None:
                error = ErrorCode.unknown_member_id
            elif instance_id is not None and member.instance_id != instance_id:
                error = ErrorCode.fenced_instance_id
            else:
                error = ErrorCode.none
                self._fence_member(group, member.member_id)
            answers.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": error})
        return {"error_code": ErrorCode.none, "members": answers}

    # ------------------------------------------------------------------ offsets, listing, deletion

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def has_members(self, group_id: str) -> bool:
        group = self._groups.get(group_id)
        return group is not None and bool(group.members)

    def drop_if_empty(self, group_id: str) -> None:
        """Forget an Empty group (its id is taken over by a classic group: Kafka converts empty groups freely)."""
        group = self._groups.get(group_id)
        if group is not None and not group.members:
            del self._groups[group_id]

    def remove_empty_groups(self, *, has_offsets: Callable[[str], bool]) -> list[str]:
        """Drop groups without members or committed offsets (Kafka's periodic group cleanup); their ids."""
        removed = [group_id for group_id, group in self._groups.items() if not group.members and not has_offsets(group_id)]
        for group_id in removed:
            del self._groups[group_id]
        return removed

    def offset_commit_error(
        self, group_id: str, member_id: str, member_epoch: int, *, consumer_protocol_version: bool
    ) -> ErrorCode | None:
        """Kafka's ``ConsumerGroup.validateOffsetCommit`` (non-transactional) for a group this object has.

        A commit without a member epoch is accepted while the group is empty (an
        admin or a simple consumer); otherwise the member must exist and commit at
        its current epoch: FENCED_MEMBER_EPOCH if ahead, STALE_MEMBER_EPOCH if
        behind (classic members: ILLEGAL_GENERATION). Only OffsetCommit v9+ (*consumer_protocol_version*) can carry a
        member epoch: older versions from a member get UNSUPPORTED_VERSION.
        """
        group = self._groups[group_id]
        if member_epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member.classic is not None:  # a classic member commits with its generation: the member epoch
            return None if member_epoch == member.member_epoch else ErrorCode.illegal_generation
        if not consumer_protocol_version:
            return ErrorCode.unsupported_version
        return _member_epoch_error(member_epoch, member.member_epoch)

    def offset_fetch_error(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """Kafka's ``ConsumerGroup.validateOffsetFetch``: an admin (no member id, epoch -1) or a current member."""
        group = self._groups[group_id]
        if member_epoch < 0 and member_id is None:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        return _member_epoch_error(member_epoch, member.member_epoch)

    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every group, for ListGroups."""
        return [(group_id, group.state.value) for group_id, group in self._groups.items()]

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups for a group this object has: NON_EMPTY_GROUP while it has members."""
        if self._groups[group_id].members:
            return ErrorCode.non_empty_group
        del self._groups[group_id]
        return ErrorCode.none

    # ------------------------------------------------------------------ describe / show

    def describe(self, group_ids: Iterable[str]) -> list[dict[str, Any]]:
        """ConsumerGroupDescribe: one ``DescribedGroup`` dict per id (kio field names, topics by name)."""
        described: list[dict[str, Any]] = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None:
                message = (
                    f"Group {group_id} is not a consumer group."
                    if self._is_classic_group_in_use(group_id)
                    else f"Group {group_id} not found."
                )
                described.append({
                    "error_code": ErrorCode.group_id_not_found,
                    "error_message": message,
                    "group_id": group_id,
                    "group_state": "",
                    "group_epoch": 0,
                    "assignment_epoch": 0,
                    "assignor_name": "",
                    "members": [],
                })
                continue
            described.append({
                "error_code": ErrorCode.none,
                "error_message": None,
                "group_id": group_id,
                "group_state": group.state.value,
                "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": UNIFORM_ASSIGNOR,
                "members": [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": list(m.subscribed_topic_names),
                        "subscribed_topic_regex": None,
                        "assignment": _response_assignment(m.assigned),
                        "target_assignment": _response_assignment(group.target.get(m.member_id, {})),
                        "member_type": _CLASSIC_MEMBER if m.classic is not None else _CONSUMER_MEMBER,
                    }
                    for m in group.members.values()
                ],
            })
        return described

    def describe_as_classic(self, group_id: str, assignor: str) -> dict[str, Any]:
        """DescribeGroups' view of a group this object has (Kafka's ``ConsumerGroup.asDescribedGroup``).

        Protocol type ``consumer``, the server assignor as protocol data, each
        member's subscription and current assignment in the consumer-protocol bytes
        classic tools parse.
        """
        group = self._groups[group_id]
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "group_id": group_id,
            "group_state": group.state.value,
            "protocol_type": PROTOCOL_TYPE,
            "protocol_data": assignor,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": encode_subscription(m.subscribed_topic_names),
                    "member_assignment": encode_assignment({t: sorted(ps) for t, ps in sorted(m.assigned.items())}),
                }
                for m in group.members.values()
            ],
        }

    def consumers(self) -> list[ConsumerInfo]:
        """Every member of every group, for ``SHOW CONSUMERS`` (``generation_id`` is the group epoch)."""
        infos: list[ConsumerInfo] = []
        for group in self._groups.values():
            state = group.state.value
            for m in group.members.values():
                ready = not m.pending_revocation and m.assigned == group.target.get(m.member_id, {})
                infos.append(
                    ConsumerInfo(
                        group_id=group.group_id,
                        group_state=state,
                        generation_id=group.group_epoch,
                        member_id=m.member_id,
                        group_instance_id=m.instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        state="ready" if ready else "rebalancing",
                        assignment={t: tuple(sorted(ps)) for t, ps in sorted(m.assigned.items())},
                        last_heartbeat_ms=m.last_heartbeat_ms,
                        session_timeout_ms=self.session_timeout_ms if m.classic is None else m.classic.session_timeout_ms,
                    )
                )
        return infos


def _member_epoch_error(received: int, expected: int) -> ErrorCode | None:
    """Kafka's ``validateMemberEpoch``."""
    if received > expected:
        return ErrorCode.fenced_member_epoch
    if received < expected:
        return ErrorCode.stale_member_epoch
    return None


def _owns_any(owned: OwnedPartitions | None, pending: Assignment) -> bool:
    """``ownsRevokedPartitions``: whether *owned* still lists a partition of *pending* (None: assume so)."""
    if owned is None:
        return True
    return any(p in pending.get(topic, ()) for topic, partitions in owned for p in partitions)


def _is_subset(owned: OwnedPartitions | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    for topic, partitions in owned:
        mine = assigned.get(topic)
        if mine is None:
            return False
        if any(p not in mine for p in partitions):
            return False
    return True
