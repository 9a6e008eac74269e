"""Share-group membership (KIP-932 ``ShareGroupHeartbeat``): members, their subscriptions, and the server-side
assignment in which several members may share a partition.

A member joins with epoch 0 and a member id of its own (empty: INVALID_REQUEST), heartbeats with the epoch it was
last told (another: FENCED_MEMBER_EPOCH; unknown member: UNKNOWN_MEMBER_ID) and leaves with epoch -1. A member
whose last heartbeat is older than the session timeout is removed by :meth:`ShareGroups.expire`.

Assignment (Kafka's ``SimpleAssignor`` in spirit): the partitions of the topics a group's members subscribe to,
sorted, against its members sorted by id; with no more members than partitions each partition goes to one member
(round robin), with more members each member gets one partition and a partition several members (round robin over
the members). Every member subscribed to a topic gets some of it when it has partitions. Share groups have no
revocation: a member gets its new assignment at once. The group epoch goes up whenever the assignment changes; a
heartbeat is answered with the group epoch and, when the member's epoch changes, its assignment (else null).

Holds (:meth:`ShareGroups.hold`): an administrative change of an empty group's share-partition state on other
cluster nodes (DeleteGroups, AlterShareGroupOffsets, DeleteShareGroupOffsets) checks that the group has no members
and holds it in the same coordinator call, then changes the state over the network and releases it. While a group is
held a member's join (epoch 0) answers COORDINATOR_LOAD_IN_PROGRESS, which clients retry after a backoff, so no
member can fetch from a share-partition whose state is being deleted or restarted under it. Kafka closes the same
window by marking the partitions "deleting" or "initializing" in the coordinator write that checks the group
(``GroupCoordinatorShard.sharePartitionDeleteRequests``, ``ShareGroup.validateOffsetsAlterable``) and not assigning
them meanwhile; here the hold is not durable: it ends with the request (or the coordinator's process).

Pure and synchronous: time is the ``now_ms`` passed in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

__all__ = ["ShareGroups", "ShareMember"]

Assignment = dict[str, list[int]]


@dataclass
class ShareMember:
    member_id: str
    epoch: int
    subscription: list[str]
    client_id: str
    client_host: str
    last_heartbeat_ms: int
    assignment: Assignment = field(default_factory=dict)


@dataclass
class _Group:
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    assignment: dict[str, Assignment] = field(default_factory=dict)


def _error(code: int, message: str | None = None) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "member_id": None, "member_epoch": 0,
            "heartbeat_interval_ms": 0, "assignment": None}


def assign(members: Sequence[ShareMember], partitions: Callable[[str], int | None]) -> dict[str, Assignment]:
    """Member id -> topic -> partitions (see the module docstring)."""
    out: dict[str, Assignment] = {m.member_id: {} for m in members}
    topics = sorted({t for m in members for t in m.subscription})
    for topic in topics:
        count = partitions(topic) or 0
        subscribers = sorted(m.member_id for m in members if topic in m.subscription)
        if count <= 0 or not subscribers:
            continue
        if len(subscribers) <= count:
            for p in range(count):
                out[subscribers[p % len(subscribers)]].setdefault(topic, []).append(p)
        else:
            for i, member_id in enumerate(subscribers):
                out[member_id].setdefault(topic, []).append(i % count)
    return out


class ShareGroups:
    """Every share group's members (see the module docstring). ``heartbeat_interval_ms`` and ``session_timeout_ms``
    are ``group.share.heartbeat.interval.ms`` and ``group.share.session.timeout.ms``."""

    def __init__(self, heartbeat_interval_ms: int = 5_000, session_timeout_ms: int = 45_000) -> None:
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.groups: dict[str, _Group] = {}
        self.held: Counter[str] = Counter()  # group id -> the holds on it (see the module docstring)

    def hold(self, group_ids: Iterable[str]) -> list[str]:
        """Hold those of ``group_ids`` that have no members (see the module docstring); the ids held, for
        :meth:`release`."""
        held = [g for g in group_ids if g not in self.groups]
        self.held.update(held)
        return held

    def release(self, group_ids: Iterable[str]) -> None:
        """End one hold of each of ``group_ids`` (as :meth:`hold` returned them)."""
        self.held.subtract(group_ids)
        self.held = +self.held  # (no group kept at zero holds)

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def heartbeat(self, *, group_id: str, member_id: str, member_epoch: int, subscribed_topic_names: Sequence[str] | None,
                  partitions: Callable[[str], int | None], client_id: str, client_host: str,
                  now_ms: int) -> tuple[dict[str, Any], bool]:
        """The response fields of one ShareGroupHeartbeat (``heartbeat_interval_ms`` in ms, ``assignment`` as
        ``{"topic_partitions": [{"topic_name", "partitions"}]}`` or None) and whether the member left."""
        if not group_id:
            return _error(ErrorCode.invalid_group_id, "GroupId can't be empty."), False
        if not member_id:
            return _error(ErrorCode.invalid_request, "MemberId can't be empty."), False
        group = self.groups.get(group_id)
        if member_epoch == -1:
            if group is None or member_id not in group.members:
                return _error(ErrorCode.unknown_member_id), False
            del group.members[member_id]
            self._reassign(group_id, group, partitions)
            return {**_error(ErrorCode.none), "member_id": member_id, "member_epoch": -1}, True
        if member_epoch == 0:
            if subscribed_topic_names is None:
                return _error(ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request."), False
            if self.held[group_id]:
                return _error(ErrorCode.coordinator_load_in_progress,
                              f"The share-partition state of group {group_id} is being changed: try again."), False
            group = self.groups.setdefault(group_id, _Group())
            group.members[member_id] = ShareMember(member_id, 0, sorted(set(subscribed_topic_names)), client_id,
                                                   client_host, now_ms)
        elif group is None or member_id not in group.members:
            return _error(ErrorCode.unknown_member_id), False
        member = group.members[member_id]
        if member_epoch not in (0, member.epoch):
            return _error(ErrorCode.fenced_member_epoch,
                          f"The share group member has a epoch {member_epoch} but {member.epoch} is expected."), False
        member.last_heartbeat_ms = now_ms
        if subscribed_topic_names is not None:
            member.subscription = sorted(set(subscribed_topic_names))
        self._reassign(group_id, group, partitions)
        assignment = None
        if member.epoch != group.epoch or member_epoch == 0:
            member.epoch = group.epoch
            member.assignment = group.assignment.get(member_id, {})
            assignment = {"topic_partitions": [{"topic_name": t, "partitions": sorted(ps)}
                                               for t, ps in sorted(member.assignment.items())]}
        return {"error_code": ErrorCode.none, "error_message": None, "member_id": member_id,
                "member_epoch": member.epoch, "heartbeat_interval_ms": self.heartbeat_interval_ms,
                "assignment": assignment}, False

    def _reassign(self, group_id: str, group: _Group, partitions: Callable[[str], int | None]) -> None:
        target = assign(list(group.members.values()), partitions)
        if target != group.assignment or not group.epoch:
            group.assignment = target
            group.epoch += 1
        if not group.members:
            del self.groups[group_id]

    def describe(self, group_id: str) -> dict[str, Any] | None:
        """ShareGroupDescribe's fields of a group with members (None: it has none); assignments by topic name."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        return {"group_id": group_id, "group_state": "Stable", "group_epoch": group.epoch,
                "assignment_epoch": group.epoch, "assignor_name": "simple", "members": [
                    {"member_id": m.member_id, "rack_id": None, "member_epoch": m.epoch, "client_id": m.client_id,
                     "client_host": m.client_host, "subscribed_topic_names": list(m.subscription),
                     "assignment": {"topic_partitions": [{"topic_name": t, "partitions": sorted(ps)}
                                                         for t, ps in sorted(m.assignment.items())]}}
                    for m in group.members.values()]}

    def next_deadline(self) -> int | None:
        """When the first member's session times out (None: no members)."""
        ends = [m.last_heartbeat_ms + self.session_timeout_ms for g in self.groups.values() for m in g.members.values()]
        return min(ends) if ends else None

    def expire(self, now_ms: int, partitions: Callable[[str], int | None]) -> list[tuple[str, str]]:
        """Remove the members whose session timed out by ``now_ms``; their (group id, member id)."""
        gone = []
        for group_id, group in list(self.groups.items()):
            late = [m for m, member in group.members.items()
                    if member.last_heartbeat_ms + self.session_timeout_ms <= now_ms]
            for member_id in late:
                del group.members[member_id]
                gone.append((group_id, member_id))
            if late:
                self._reassign(group_id, group, partitions)
        return gone
