"""The state of every consumer group of this node and the membership changes both member kinds go through.

:class:`ConsumerMembership` is the base of :class:`~walgate.coordinator.consumer_group.ConsumerGroups`: it holds the
groups, the settings and the timers, and implements what KIP-848 heartbeats
(:mod:`~walgate.coordinator.consumer_group`) and classic members' JoinGroup / SyncGroup / Heartbeat / LeaveGroup
(:mod:`~walgate.coordinator.consumer_classic_members`) have in common: Kafka's heartbeat steps 1-3 (update the
member, bump the group epoch, recompute the target assignment, reconcile the member), fencing a member, a static
member's replacement, and the session and rebalance timers.

Invariants: the group epoch is bumped — and one ``rebalance`` line logged (:mod:`~walgate.coordinator.group_log`) —
exactly when a member joins or is removed, a subscription changes, or a subscribed topic's partition count changes
(a static member rejoining under a new member id takes the old one's place: no bump); the target assignment is
recomputed, with the uniform assignor, by the first heartbeat (or classic JoinGroup) that finds the group epoch
ahead of it, so after every accepted heartbeat the assignment epoch equals the group epoch. Every member has a
session timer; a member that must revoke partitions also has a rebalance timer, started when it enters
UNREVOKED_PARTITIONS (and cancelled when it leaves that state, or leaves as a static member with epoch -2). No
method reads the clock: every call takes ``now_ms`` and timers fire in :meth:`ConsumerMembership.tick`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from walgate.coordinator import group_log
from walgate.coordinator.consumer_model import (
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    MemberUpdate,
    OwnedPartitions,
)
from walgate.coordinator.group_configs import GroupTimeouts
from walgate.coordinator.group_records import rebuild_consumer
from walgate.coordinator.reconciliation import reconcile
from walgate.coordinator.snapshots import CONSUMER_GROUP_TYPE
from walgate.coordinator.timer import KeyedTimer
from walgate.coordinator.uniform_assignor import uniform_assignment

__all__ = ["ConsumerMembership", "HeartbeatError", "response_assignment"]


class HeartbeatError(Exception):
    """A request refused with *error* and *message*, which its response carries (caught inside the requests)."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def response_assignment(assignment: Assignment) -> dict[str, Any]:
    """An assignment as ConsumerGroupHeartbeat / ConsumerGroupDescribe carry it (topics by name, sorted)."""
    return {
        "topic_partitions": [
            {"topic_name": topic, "partitions": sorted(assignment[topic])} for topic in sorted(assignment)
        ]
    }


def _session_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("session", group_id, member_id)


def _rebalance_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("rebalance", group_id, member_id)


class ConsumerMembership:
    """The consumer groups, their settings and timers, and the membership operations (see the module docstring).

    Keyword arguments are Kafka's broker settings:
    ``group.consumer.heartbeat.interval.ms`` (5000),
    ``group.consumer.session.timeout.ms`` (45000), ``group.consumer.max.size``.
    *is_classic_group_in_use* tells whether a group id is taken by a classic group with members (a KIP-848 join of
    such an id is refused with GROUP_ID_NOT_FOUND, ConsumerGroupDescribe says it is not a consumer group);
    :class:`~walgate.coordinator.coordinator.GroupCoordinator` passes its classic groups' answer.
    *new_member_id* makes server-generated member ids (``uuid4`` strings; tests inject a counter).
    *group_configs* answers a group's own configs (KIP-848 group configs, stored by the gateway): its session
    timeout and heartbeat interval override the broker's (:meth:`member_timeouts`).
    """

    def __init__(
        self,
        *,
        heartbeat_interval_ms: int = 5_000,
        session_timeout_ms: int = 45_000,
        max_group_size: int = 2**31 - 1,
        is_classic_group_in_use: Callable[[str], bool] = lambda group_id: False,
        new_member_id: Callable[[], str] = lambda: str(uuid.uuid4()),
        group_configs: Callable[[str], Mapping[str, str]] = lambda group_id: {},
    ) -> None:
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.group_configs = group_configs
        self.max_group_size = max_group_size
        self._is_classic_group_in_use = is_classic_group_in_use
        self._new_member_id = new_member_id
        self._groups: dict[str, ConsumerGroup] = {}
        self._timer: KeyedTimer[tuple[str, str] | None] = KeyedTimer()

    # ------------------------------------------------------------------ reading, time

    def group(self, group_id: str) -> ConsumerGroup | None:
        """The group *group_id* if this node has it (read it, do not change it)."""
        return self._groups.get(group_id)

    def member_timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) in ms of *group_id*'s members: the group's own configs
        (*group_configs*, :mod:`~walgate.coordinator.group_configs`) over the broker's settings."""
        return GroupTimeouts(self.session_timeout_ms, self.heartbeat_interval_ms, self.group_configs).of(group_id)
    def group_ids(self) -> list[str]:
        """The ids of every group of this kind in memory."""
        return list(self._groups)

    def forget(self, group_id: str) -> None:
        """Drop *group_id* from memory (another node coordinates it now); its timers find it gone."""
        self._groups.pop(group_id, None)

    def next_deadline(self) -> int | None:
        """When :meth:`tick` next has something to do (ms, the callers' clock), or None."""
        return self._timer.next_deadline()

    def tick(self, now_ms: int) -> list[tuple[str, str]]:
        """Fire due timers; returns the (group id, member id) of the members removed."""
        removed = []
        for operation in self._timer.expired(now_ms):
            gone = operation(now_ms)
            if gone is not None:
                removed.append(gone)
        return removed

    def _schedule_session(self, group: ConsumerGroup, member: ConsumerGroupMember, timeout_ms: int, now_ms: int) -> None:
        """(Re)start the member's session: it is removed unless this is called again within *timeout_ms*."""
        self._timer.schedule(
            _session_key(group.group_id, member.member_id),
            now_ms + timeout_ms,
            self._session_expired_op(group.group_id, member.member_id, timeout_ms),
        )

    def _session_expired_op(
        self, group_id: str, member_id: str, timeout_ms: int
    ) -> Callable[[int], tuple[str, str] | None]:
        def expire(now_ms: int) -> tuple[str, str] | None:
            group = self._groups.get(group_id)
            member = None if group is None else group.members.get(member_id)
            if group is None or member is None:
                return None
            group_log.member_expired(group_id, CONSUMER_GROUP_TYPE, member, f"session timeout ({timeout_ms} ms)")
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
            group_log.member_expired(group_id, CONSUMER_GROUP_TYPE, member,
                                     f"rebalance timeout ({member.rebalance_timeout_ms} ms) while revoking partitions")
            self._fence_member(group, member_id)
            return (group_id, member_id)

        return expire

    # ------------------------------------------------------------------ membership

    def _unknown_member(self, group: ConsumerGroup, member_id: str) -> HeartbeatError:
        return HeartbeatError(
            ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}."
        )

    def _bump_group_epoch(self, group: ConsumerGroup) -> None:
        group.group_epoch += 1
        group_log.rebalanced(group.group_id, CONSUMER_GROUP_TYPE, "epoch", group.group_epoch, group.members.values())

    def _fence_member(self, group: ConsumerGroup, member_id: str) -> None:
        """Kafka's ``consumerGroupFenceMember``: remove the member and bump the group epoch."""
        group.remove_member(member_id)
        self._timer.cancel(_session_key(group.group_id, member_id))
        self._cancel_rebalance_timer(group, member_id)
        group.subscription_metadata = {
            t: c for t, c in group.subscription_metadata.items() if t in group.subscribed_topics()
        }
        self._bump_group_epoch(group)

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
            group_log.member_joined(group.group_id, CONSUMER_GROUP_TYPE, member)

        metadata = {}
        for topic in sorted(group.subscribed_topics()):
            count = topic_partitions(topic)
            if count is not None and count > 0:
                metadata[topic] = count
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            bump = True
        if bump:
            self._bump_group_epoch(group)

        # 2. Update the target assignment if the group epoch is ahead of it.
        if group.group_epoch > group.assignment_epoch:
            group.target = uniform_assignment(list(group.members.values()), group.subscription_metadata, group.target)
            group.assignment_epoch = group.group_epoch

        # 3. Reconcile the member towards its target.
        self._maybe_reconcile(group, member, update.owned)

    def _replace_static_member(
        self, group: ConsumerGroup, existing: ConsumerGroupMember, member_id: str, client_id: str, client_host: str
    ) -> ConsumerGroupMember:
        """A static member rejoins under a new member id (from *client_id* at *client_host*): it inherits the old
        one's assignment and target."""
        target = group.target.get(existing.member_id)
        group.remove_member(existing.member_id)
        self._timer.cancel(_session_key(group.group_id, existing.member_id))
        self._cancel_rebalance_timer(group, existing.member_id)
        member = ConsumerGroupMember(
            member_id,
            instance_id=existing.instance_id,
            rack_id=existing.rack_id,
            client_id=client_id,
            client_host=client_host,
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
        group_log.member_joined(group.group_id, CONSUMER_GROUP_TYPE, member, instance_id=existing.instance_id,
                                replaces=existing.member_id)
        return member

    def _cancel_rebalance_timer(self, group: ConsumerGroup, member_id: str) -> None:
        self._timer.cancel(_rebalance_key(group.group_id, member_id))

    def _maybe_reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember, owned: OwnedPartitions | None) -> None:
        """Reconcile *member* (:func:`~walgate.coordinator.reconciliation.reconcile`) and keep its rebalance timer:
        running from its last heartbeat while it must revoke, cancelled otherwise."""
        if not reconcile(group, member, owned):
            return
        key = _rebalance_key(group.group_id, member.member_id)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            self._timer.schedule(
                key,
                member.last_heartbeat_ms + max(member.rebalance_timeout_ms, 0),
                self._rebalance_expired_op(group.group_id, member.member_id, member.member_epoch),
            )
        else:
            self._timer.cancel(key)

    # ------------------------------------------------------------------ restart

    def restore(self, group_id: str, value: Mapping[str, Any], now_ms: int) -> None:
        """Rebuild the group *group_id* (unknown here: a start) from its recorded *value*
        (:func:`~walgate.coordinator.group_records.rebuild_consumer`, whose ValueError it raises). Every member's
        session starts at *now_ms*, and the rebalance timeout of a member that must revoke partitions, as Kafka's
        loader reschedules them."""
        if group_id in self._groups:
            raise ValueError(f"group {group_id!r} is already loaded")
        group = rebuild_consumer(group_id, value, now_ms)
        self._groups[group_id] = group
        for member in group.members.values():
            timeout = self.member_timeouts(group_id)[0] if member.classic is None else member.classic.session_timeout_ms
            self._schedule_session(group, member, timeout, now_ms)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._timer.schedule(
                    _rebalance_key(group_id, member.member_id),
                    now_ms + max(member.rebalance_timeout_ms, 0),
                    self._rebalance_expired_op(group_id, member.member_id, member.member_epoch),
                )
