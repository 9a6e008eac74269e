"""The classic consumer-group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) as a pure state machine.

Theory of operation
-------------------
:class:`ClassicGroups` holds every classic group of this node and implements
the classic-group half of Kafka's ``GroupMetadataManager`` (``classicGroupJoin``,
``classicGroupSync``, ``classicGroupHeartbeat``, ``classicGroupLeave``,
``completeClassicGroupJoin``, ``prepareRebalance``, the timer callbacks) with
Kafka's method names in snake case, so behaviour can be compared line by line.
It is made of parts:

* :mod:`~walgate.coordinator.classic_model` — one group: states, transition
  table and diagram, members, parked requests;
* :mod:`~walgate.coordinator.classic_rebalance` — the groups, settings, timers
  and the rebalance (join phase, new generation, sync expiry, sessions);
* this module — JoinGroup, SyncGroup, Heartbeat, LeaveGroup;
* :mod:`~walgate.coordinator.classic_admin` — DescribeGroups, ListGroups,
  DeleteGroups, cleanup, the upgrade hand-over, ``SHOW CONSUMERS`` and metrics.

It is synchronous and pure: no sockets, no asyncio, no threads, and it never
reads the clock — every call takes ``now_ms``. Time moves only through
:meth:`ClassicGroups.tick`, which fires the timers that are due;
:meth:`ClassicGroups.next_deadline` says when that is next useful. Tests drive
it with plain integers; the gateway arms one event-loop timer at
``next_deadline()`` and calls ``tick(now)`` when it fires (and re-arms after
every call, since any call may schedule or cancel timers).

Parked requests and completions
-------------------------------
Kafka answers JoinGroup and SyncGroup through futures that may complete later,
when *other* members act or a timer fires. Here the caller names each such
request with an opaque, hashable ``request_id`` and every method that can
answer requests returns the list of :class:`Completion` (request id +
response) it produced: possibly the caller's own request (answered at once),
possibly other members' parked joins or syncs, possibly nothing (the caller's
request is parked). A request id not in the list is parked and will appear in
the result of a later call or tick. Members removed while parked are answered
(UNKNOWN_MEMBER_ID on leave or expiry, FENCED_INSTANCE_ID when a static member's
restart replaces them). The one exception is Kafka's too: a member that sends a
second JoinGroup (or SyncGroup) while one is parked replaces it, and the first
is never answered — its client gave up on it; the gateway forgets parked
requests of closed connections.

Responses are version-agnostic dicts with kio's snake_case field names (the
gateway's ``walgate.wire.protocol.build_response`` takes them as they are):

* JoinGroup: ``error_code, generation_id, protocol_type, protocol_name, leader,
  skip_assignment, member_id, members=[{member_id, group_instance_id, metadata}]``;
  ``protocol_name`` is None on errors (wire versions < 7 send ``""``).
* SyncGroup: ``error_code, protocol_type, protocol_name, assignment``.
* Heartbeat: just the :class:`ErrorCode`.
* LeaveGroup: ``error_code, members=[{member_id, group_instance_id, error_code}]``
  (versions < 3 carry one member and report its error at the top level).
* DescribeGroups, ListGroups, DeleteGroups: one dict per group (see the methods).

Timers
------
Session, join-phase and sync timeouts: see :mod:`~walgate.coordinator.classic_rebalance`.

Decisions (where walgate differs from Kafka, and why)
-----------------------------------------------------
* Group state survives a restart as Kafka's GroupMetadata record makes it:
  a Stable or Empty group is recorded (:mod:`~walgate.coordinator.group_records`,
  written by the gateway before the answers that reveal it) and rebuilt at
  start, Stable with its generation, members and assignments, every session
  starting at the load; a group caught in a rebalance comes back at its last
  Stable generation.
* A group is dropped from memory the moment it becomes Dead, so Kafka's branches
  for requests reaching a Dead group (COORDINATOR_NOT_AVAILABLE) cannot happen
  here; those requests see "no such group" instead, as they would in Kafka a
  moment later.
* A group that only has committed offsets (Kafka's "simple" group, created by a
  commit without generation) is not materialised: DescribeGroups, ListGroups
  and DeleteGroups take a ``has_offsets`` / ``offset_groups`` argument and show
  such a group as Empty with protocol type ``""``, as Kafka does.
* Protocol selection ties are broken deterministically (first protocol to get a
  vote, members in join order) where Kafka uses hash-map order.
* A member removed by LeaveGroup (e.g. an admin removing a static member by
  instance id) while its SyncGroup is parked gets UNKNOWN_MEMBER_ID for it;
  Kafka leaves that request unanswered until the client's request timeout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from walgate.coordinator import group_log
from walgate.coordinator.classic_admin import ClassicGroupAdmin
from walgate.coordinator.classic_model import (
    ClassicGroup,
    ClassicGroupMember,
    Completion,
    GroupState,
    Protocols,
    RequestId,
    join_response,
    sync_response,
)
from walgate.coordinator.errors import GroupError
from walgate.coordinator.snapshots import CLASSIC_GROUP_TYPE

__all__ = ["ClassicGroups", "Completion"]


@dataclass(frozen=True, slots=True)
class _Join:
    """The fields of one JoinGroup request, as the join path passes them around."""

    request_id: RequestId
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    require_known_member_id: bool
    supports_skip_assignment: bool



class ClassicGroups(ClassicGroupAdmin):
    """Every classic group of this node: JoinGroup, SyncGroup, Heartbeat and LeaveGroup here, listing and describing
    in :class:`~walgate.coordinator.classic_admin.ClassicGroupAdmin`; the state, settings (constructor arguments),
    timers and rebalance in :class:`~walgate.coordinator.classic_rebalance.ClassicRebalance`.
    """

    # ------------------------------------------------------------------ JoinGroup

    def join(
        self,
        request_id: RequestId,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_member_id: bool,
        supports_skip_assignment: bool = False,
        now_ms: int,
    ) -> list[Completion]:
        """Handle a JoinGroup; returns the requests answered now (maybe not this one: it is parked).

        *require_known_member_id*: JoinGroup v4+ (a dynamic member without member id
        gets MEMBER_ID_REQUIRED and a member id to rejoin with). *supports_skip_assignment*:
        v9+ (a static leader replaced without rebalance is told to skip the assignment).
        For v0, pass the session timeout as *rebalance_timeout_ms*.
        """
        if not group_id:
            return self._answer(request_id, join_response(ErrorCode.invalid_group_id, member_id))
        if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
            return self._answer(request_id, join_response(ErrorCode.invalid_session_timeout, member_id))
        join = _Join(
            request_id=request_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            protocol_type=protocol_type,
            protocols=tuple((name, bytes(metadata)) for name, metadata in protocols),
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            require_known_member_id=require_known_member_id,
            supports_skip_assignment=supports_skip_assignment,
        )
        is_unknown_member = member_id == ""
        group = self._groups.get(group_id)
        if group is None:
            if not is_unknown_member:
                return self._answer(request_id, join_response(ErrorCode.unknown_member_id, member_id))
            group = ClassicGroup(group_id, now_ms, self._outbox)
            self._groups[group_id] = group

        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            self._outbox.append(Completion(request_id, join_response(ErrorCode.group_max_size_reached, "")))
        elif is_unknown_member:
            self._join_new_member(group, join, now_ms)
        else:
            self._join_existing_member(group, join, now_ms)
        return self._drain()

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        if group.is_in_state(GroupState.EMPTY):
            return True
        member = group.members.get(member_id)
        if group.is_in_state(GroupState.PREPARING_REBALANCE):
            # The number of members awaiting a join response counts, so that the
            # last members to rejoin are the ones refused when the limit shrank.
            return (member is not None and member.is_awaiting_join) or group.num_awaiting_join < self.max_group_size
        return member is not None or len(group.members) < self.max_group_size

    def _join_new_member(self, group: ClassicGroup, join: _Join, now_ms: int) -> None:
        if not group.supports_protocols(join.protocol_type, {name for name, _ in join.protocols}):
            self._outbox.append(Completion(join.request_id, join_response(ErrorCode.inconsistent_group_protocol, "")))
            return
        prefix = join.group_instance_id if join.group_instance_id is not None else join.client_id
        new_member_id = f"{prefix}-{self._member_id_suffix()}"
        if join.group_instance_id is not None:
            existing_member_id = group.static_members.get(join.group_instance_id)
            if existing_member_id is not None:
                self._update_static_member_then_rebalance_or_complete_join(
                    group, join, existing_member_id, new_member_id, now_ms
                )
            else:
                self._add_member_then_rebalance_or_complete_join(group, join, new_member_id, now_ms)
        elif join.require_known_member_id:
            group.add_pending_member(new_member_id)
            self._schedule_heartbeat_expiry(group, new_member_id, join.session_timeout_ms, now_ms)
            self._outbox.append(Completion(join.request_id, join_response(ErrorCode.member_id_required, new_member_id)))
        else:
            self._add_member_then_rebalance_or_complete_join(group, join, new_member_id, now_ms)

    def _join_existing_member(self, group: ClassicGroup, join: _Join, now_ms: int) -> None:
        member_id = join.member_id
        if not group.supports_protocols(join.protocol_type, {name for name, _ in join.protocols}):
            self._outbox.append(
                Completion(join.request_id, join_response(ErrorCode.inconsistent_group_protocol, member_id))
            )
            return
        if group.is_pending_member(member_id):
            if join.group_instance_id is not None:
                # A pending member is always dynamic; Kafka fails this with an
                # IllegalStateException, which its service layer answers so.
                self._outbox.append(Completion(join.request_id, join_response(ErrorCode.unknown_server_error, "")))
            else:
                self._add_member_then_rebalance_or_complete_join(group, join, member_id, now_ms)
            return
        try:
            member = group.validate_member(member_id, join.group_instance_id)
        except GroupError as error:
            self._outbox.append(Completion(join.request_id, join_response(error.error_code, member_id)))
            return
        member.last_heartbeat_ms = now_ms

        if group.is_in_state(GroupState.PREPARING_REBALANCE):
            self._update_member_then_rebalance_or_complete_join(group, member, join, now_ms)
        elif group.is_in_state(GroupState.COMPLETING_REBALANCE):
            if member.matches(join.protocols):
                # Same metadata (it probably lost the join response): this generation again.
                self._outbox.append(Completion(join.request_id, self._current_join_response(group, member_id)))
            else:
                self._update_member_then_rebalance_or_complete_join(group, member, join, now_ms)
        elif group.is_leader(member_id) or not member.matches(join.protocols):
            # Stable (a validated member's group is never Empty): the leader rejoining
            # forces a rebalance (topic metadata may have changed), as does a follower
            # with new metadata.
            self._update_member_then_rebalance_or_complete_join(group, member, join, now_ms)
        else:
            self._outbox.append(
                Completion(join.request_id, self._current_join_response(group, member_id, with_members=False))
            )

    def _update_member_then_rebalance_or_complete_join(
        self, group: ClassicGroup, member: ClassicGroupMember, join: _Join, now_ms: int
    ) -> None:
        group.update_member(member, join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms, join.request_id)
        self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _add_member_then_rebalance_or_complete_join(
        self, group: ClassicGroup, join: _Join, member_id: str, now_ms: int
    ) -> None:
        member = ClassicGroupMember(
            member_id=member_id,
            group_instance_id=join.group_instance_id,
            client_id=join.client_id,
            client_host=join.client_host,
            rebalance_timeout_ms=join.rebalance_timeout_ms,
            session_timeout_ms=join.session_timeout_ms,
            protocol_type=join.protocol_type,
            protocols=join.protocols,
            is_new=True,
            last_heartbeat_ms=now_ms,
        )
        # Tells the initial delayed join to wait once more for further members.
        if group.is_in_state(GroupState.PREPARING_REBALANCE) and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True
        group.add(member, join.request_id)
        group_log.member_joined(group.group_id, CLASSIC_GROUP_TYPE, member)
        # A new member cannot heartbeat while its join is parked; if its client gave
        # up and retries, the abandoned member id must not hold the rebalance forever.
        self._reschedule_heartbeat(group, member, now_ms, self.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _update_static_member_then_rebalance_or_complete_join(
        self, group: ClassicGroup, join: _Join, old_member_id: str, new_member_id: str, now_ms: int
    ) -> None:
        assert join.group_instance_id is not None
        current_leader = group.leader_id or ""
        new_member = group.replace_static_member(join.group_instance_id, old_member_id, new_member_id)
        new_member.last_heartbeat_ms = now_ms
        group_log.member_joined(group.group_id, CLASSIC_GROUP_TYPE, new_member, instance_id=join.group_instance_id,
                                replaces=old_member_id)
        self._cancel_heartbeat(group, old_member_id)
        self._reschedule_heartbeat(group, new_member, now_ms)
        group.update_member(
            new_member, join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms, join.request_id
        )
        if group.is_in_state(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                # The restarted static member takes its old place and assignment: no rebalance.
                if join.supports_skip_assignment:
                    is_leader = group.is_leader(new_member_id)
                    response = join_response(
                        ErrorCode.none,
                        new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id or "",
                        skip_assignment=is_leader,
                        members=group.current_members() if is_leader else (),
                    )
                else:
                    # Older clients are told the old leader id, so a restarted leader
                    # does not run the assignor; it just syncs its old assignment.
                    response = join_response(
                        ErrorCode.none,
                        new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=current_leader,
                    )
                group.complete_join(new_member, response)
            else:
                self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
        elif group.is_in_state(GroupState.COMPLETING_REBALANCE):
            # The old member id may already be in the leader's assignment: redo it.
            self._prepare_rebalance(group, now_ms)
        else:
            self._maybe_complete_join_phase(group, now_ms)

    # ------------------------------------------------------------------ SyncGroup

    def sync(
        self,
        request_id: RequestId,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
        now_ms: int,
    ) -> list[Completion]:
        """Handle a SyncGroup; returns the requests answered now (this one may be parked).

        Only the leader's *assignments* (member id -> assignment bytes) are used;
        members it leaves out get an empty assignment.
        """
        if not group_id:
            return self._answer(request_id, sync_response(ErrorCode.invalid_group_id))
        group = self._groups.get(group_id)
        if group is None or group.is_in_state(GroupState.EMPTY):
            return self._answer(request_id, sync_response(ErrorCode.unknown_member_id))
        try:
            member = group.validate_member(member_id, group_instance_id)
        except GroupError as error:
            return self._answer(request_id, sync_response(error.error_code))
        if generation_id != group.generation_id:
            return self._answer(request_id, sync_response(ErrorCode.illegal_generation))
        if _inconsistent(protocol_type, group.protocol_type) or _inconsistent(protocol_name, group.protocol_name):
            return self._answer(request_id, sync_response(ErrorCode.inconsistent_group_protocol))
        member.last_heartbeat_ms = now_ms

        if group.is_in_state(GroupState.PREPARING_REBALANCE):
            self._outbox.append(Completion(request_id, sync_response(ErrorCode.rebalance_in_progress)))
        elif group.is_in_state(GroupState.COMPLETING_REBALANCE):
            member.sync_request = request_id
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                assignment = {m: bytes(assignments.get(m, b"")) for m in group.members}
                self._set_and_propagate_assignment(group, assignment, now_ms)
                group.transition_to(GroupState.STABLE, now_ms)
        else:
            self._remove_pending_sync_member(group, member_id)
            self._outbox.append(
                Completion(
                    request_id,
                    sync_response(
                        ErrorCode.none,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        assignment=member.assignment,
                    ),
                )
            )
        return self._drain()

    # ------------------------------------------------------------------ Heartbeat

    def heartbeat(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None, now_ms: int
    ) -> ErrorCode:
        """Handle a Heartbeat: NONE, REBALANCE_IN_PROGRESS (rejoin), or the refusal.

        A heartbeat never answers parked requests, so only the error code is returned.
        """
        if not group_id:
            return ErrorCode.invalid_group_id
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        try:
            member = group.validate_member(member_id, group_instance_id)
        except GroupError as error:
            return error.error_code
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        member.last_heartbeat_ms = now_ms
        self._reschedule_heartbeat(group, member, now_ms)
        if group.is_in_state(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ------------------------------------------------------------------ LeaveGroup

    def leave(
        self, *, group_id: str, members: Sequence[tuple[str, str | None]], now_ms: int
    ) -> tuple[dict[str, Any], list[Completion]]:
        """Handle a LeaveGroup of (member id, group instance id) pairs.

        Returns the response (per-member errors, LeaveGroup v3+ shape) and the parked
        requests answered: the leavers' own parked joins (UNKNOWN_MEMBER_ID) and, when
        the group was waiting only for them, the other members' joins.
        """
        if not group_id:
            return {"error_code": ErrorCode.invalid_group_id, "members": []}, []
        group = self._groups.get(group_id)
        if group is None:
            return {
                "error_code": ErrorCode.none,
                "members": [_member_response(m, i, ErrorCode.unknown_member_id) for m, i in members],
            }, []
        responses: list[dict[str, Any]] = []
        for member_id, instance_id in members:
            error = ErrorCode.none
            if member_id == "":
                # Administrative removal of a static member by instance id.
                static_member_id = None if instance_id is None else group.static_members.get(instance_id)
                if static_member_id is None:
                    error = ErrorCode.unknown_member_id
                else:
                    self._remove_current_member_from_classic_group(group, static_member_id)
            elif group.is_pending_member(member_id):
                group.remove(member_id)
                self._cancel_heartbeat(group, member_id)
            else:
                try:
                    group.validate_member(member_id, instance_id)
                except GroupError as failure:
                    error = failure.error_code
                else:
                    self._remove_current_member_from_classic_group(group, member_id)
            responses.append(_member_response(member_id, instance_id, error))

        if any(r["error_code"] is ErrorCode.none for r in responses):
            if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
            elif group.is_in_state(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group, now_ms)
        return {"error_code": ErrorCode.none, "members": responses}, self._drain()

    def _remove_current_member_from_classic_group(self, group: ClassicGroup, member_id: str) -> None:
        self._cancel_heartbeat(group, member_id)
        member = group.members[member_id]
        group_log.member_left(group.group_id, CLASSIC_GROUP_TYPE, member)
        group.complete_join(member, join_response(ErrorCode.unknown_member_id, ""))
        group.complete_sync(member, sync_response(ErrorCode.unknown_member_id))
        group.remove(member_id)


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


def _member_response(member_id: str, group_instance_id: str | None, error: ErrorCode) -> dict[str, Any]:
    return {"member_id": member_id, "group_instance_id": group_instance_id, "error_code": error}
