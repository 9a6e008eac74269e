"""KIP-848 consumer groups: ConsumerGroupHeartbeat as a pure state machine (:class:`ConsumerGroups`).

This is the TDengine mnode model in Kafka's words: the server owns the
assignment. Members send heartbeats carrying their subscription and the
partitions they own; the coordinator keeps the group epoch, computes the
target assignment (an even split of every subscribed topic's partitions over
the members subscribed to it: 4 partitions and 3 members -> 2, 1, 1; 5 members
-> one idle) and moves each member towards its target, revoking before
assigning: a partition still owned by one member is not given to another until
the first one's heartbeat no longer lists it.

It follows Kafka's ``GroupMetadataManager.consumerGroupHeartbeat`` with its
names in snake case, in parts:

* :mod:`~walgate.coordinator.consumer_model` — the group and member data;
* :mod:`~walgate.coordinator.uniform_assignor` — the target assignment;
* :mod:`~walgate.coordinator.reconciliation` — a member's way to its target (``CurrentAssignmentBuilder``);
* :mod:`~walgate.coordinator.consumer_membership` — the groups, timers and the membership changes;
* this module — ConsumerGroupHeartbeat: validation, joining, epochs, leaving;
* :mod:`~walgate.coordinator.consumer_classic_members` — classic members' JoinGroup / SyncGroup / Heartbeat /
  LeaveGroup in a consumer group;
* :mod:`~walgate.coordinator.consumer_admin` — ListGroups, DescribeGroups, ConsumerGroupDescribe, DeleteGroups,
  offset-request checks, ``SHOW CONSUMERS`` and metrics.

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
  the target is recomputed by the heartbeat that bumps the epoch, or, when a
  member is removed (leave, expiry), by the next heartbeat of any member (in
  between the group is ``Assigning``, as in Kafka).
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
* GROUP_ID_NOT_FOUND: a join to a group id used by a classic group with
  members (Kafka 4: "Group g is not a consumer group"). Through
  :class:`~walgate.coordinator.coordinator.GroupCoordinator` that happens only
  for classic groups of another protocol type than ``consumer``: those of
  Kafka consumers are upgraded first.
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
* A group survives a restart (:mod:`~walgate.coordinator.group_records`: every
  change is recorded before the heartbeat answering it, and the group rebuilt
  at start, every session starting at the load). A heartbeat with epoch > 0
  (or a leave) for a group this node does not know (its record was lost)
  gets UNKNOWN_MEMBER_ID, not Kafka's GROUP_ID_NOT_FOUND, so clients rejoin
  (epoch 0) instead of failing.
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

from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from walgate.coordinator import group_log
from walgate.coordinator.consumer_admin import ConsumerGroupAdmin
from walgate.coordinator.consumer_classic_members import ClassicMembers
from walgate.coordinator.consumer_membership import HeartbeatError, response_assignment
from walgate.coordinator.consumer_model import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberUpdate,
    OwnedPartitions,
)
from walgate.coordinator.reconciliation import is_subset
from walgate.coordinator.snapshots import CONSUMER_GROUP_TYPE
from walgate.coordinator.uniform_assignor import UNIFORM_ASSIGNOR

__all__ = ["ConsumerGroups"]


def _error(error: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "error_code": error,
        "error_message": message,
        "member_id": None,
        "member_epoch": 0,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


class ConsumerGroups(ClassicMembers, ConsumerGroupAdmin):
    """Every consumer-protocol (KIP-848) group of this node: ConsumerGroupHeartbeat here, the classic members'
    requests in :class:`~walgate.coordinator.consumer_classic_members.ClassicMembers`, listing and describing in
    :class:`~walgate.coordinator.consumer_admin.ConsumerGroupAdmin`; the state, settings (constructor arguments)
    and membership operations in :class:`~walgate.coordinator.consumer_membership.ConsumerMembership`.
    """

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
        except HeartbeatError as exc:
            return _error(exc.error, exc.message)

    @staticmethod
    def _validate_request(group_id: str, member_id: str, member_epoch: int, update: MemberUpdate) -> None:
        """Kafka's ``throwIfConsumerGroupHeartbeatRequestIsInvalid`` (without the v1 member-id rule)."""
        def invalid(message: str) -> HeartbeatError:
            return HeartbeatError(ErrorCode.invalid_request, message)

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
            raise HeartbeatError(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {update.server_assignor} is not supported. Supported assignors: {UNIFORM_ASSIGNOR}.",
            )

    def _get_or_maybe_create_group(self, group_id: str, member_id: str, create: bool) -> ConsumerGroup:
        group = self._groups.get(group_id)
        if create and self._is_classic_group_in_use(group_id):
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group")
        if group is None:
            if not create:
                # Kafka: GROUP_ID_NOT_FOUND; a group whose record was lost must rejoin (see Decisions).
                raise HeartbeatError(
                    ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}."
                )
            group = ConsumerGroup(group_id)
            self._groups[group_id] = group
        return group

    @staticmethod
    def _throw_if_member_epoch_is_invalid(
        member: ConsumerGroupMember, received: int, owned: OwnedPartitions | None
    ) -> None:
        """Kafka's ``throwIfMemberEpochIsInvalid``: FENCED_MEMBER_EPOCH unless *received* is the member's epoch."""
        if received > member.member_epoch:
            raise HeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a greater member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )
        # A smaller epoch is accepted if it is the previous one and the member owns a subset of its assignment:
        # the response that bumped its epoch was lost.
        if received < member.member_epoch and (
            received != member.previous_member_epoch or not is_subset(owned, member.assigned)
        ):
            raise HeartbeatError(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and "
                "rejoin.",
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
        except HeartbeatError:
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
            raise HeartbeatError(
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
                        raise HeartbeatError(
                            ErrorCode.unreleased_instance_id,
                            f"Static member {member_id} with instance id {instance_id} cannot join the group "
                            f"because the instance id is owned by {existing.member_id} member.",
                        )
                    member = self._replace_static_member(
                        group, existing, member_id, update.client_id, update.client_host
                    )
            else:
                if existing is None:
                    raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
                if existing.member_id != member_id:
                    raise HeartbeatError(
                        ErrorCode.fenced_instance_id,
                        f"Static member {member_id} with instance id {instance_id} was fenced by member "
                        f"{existing.member_id}.",
                    )
                self._throw_if_member_epoch_is_invalid(existing, member_epoch, owned)
                member = existing

        old_assigned = dict(member.assigned)
        self._update_member(group, member, is_new, update, topic_partitions, now_ms)
        session_timeout_ms, heartbeat_interval_ms = self.member_timeouts(group.group_id)
        self._schedule_session(group, member, session_timeout_ms, now_ms)

        full_request = joining or (
            update.rebalance_timeout_ms != -1 and update.subscribed_topic_names is not None and owned is not None
        )
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "member_id": member.member_id,
            "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "assignment": (
                response_assignment(member.assigned)
                if full_request or member.assigned != old_assigned
                else None
            ),
        }

    # ------------------------------------------------------------------ leave

    def _leave(self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None) -> dict[str, Any]:
        """Kafka's ``consumerGroupLeave`` (-1: leave, -2: static member leaves temporarily)."""
        group = self._groups.get(group_id)
        if group is None:
            raise HeartbeatError(ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group_id}.")
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise self._unknown_member(group, member_id)
            group_log.member_left(group_id, CONSUMER_GROUP_TYPE, member)
            self._fence_member(group, member_id)
        else:
            existing_id = group.static_members.get(instance_id)
            if existing_id is None:
                raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
            if existing_id != member_id:
                raise HeartbeatError(
                    ErrorCode.fenced_instance_id,
                    f"Static member {member_id} with instance id {instance_id} was fenced by member {existing_id}.",
                )
            member = group.members[member_id]
            if member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                group_log.member_left(group_id, CONSUMER_GROUP_TYPE, member, instance_id=instance_id,
                                      member_epoch=str(member_epoch))
                member.update_member_epoch(LEAVE_GROUP_STATIC_MEMBER_EPOCH)
                self._cancel_rebalance_timer(group, member_id)
            else:
                group_log.member_left(group_id, CONSUMER_GROUP_TYPE, member, instance_id=instance_id)
                self._fence_member(group, member_id)
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "member_id": member_id,
            "member_epoch": member_epoch,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }
