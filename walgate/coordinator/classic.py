"""The classic consumer-group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) as a pure state machine.

Theory of operation
-------------------
:class:`ClassicGroups` holds every classic group of this node and implements
the classic-group half of Kafka's ``GroupMetadataManager`` (``classicGroupJoin``,
``classicGroupSync``, ``classicGroupHeartbeat``, ``classicGroupLeave``,
``completeClassicGroupJoin``, ``prepareRebalance``, the timer callbacks) with
Kafka's method names in snake case, so behaviour can be compared line by line.
The states, their transition table and the diagram are in
:mod:`walgate.coordinator.group`.

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

Timers (Kafka's keys)
---------------------
* ``join-<group>``: the initial delayed join of an Empty group
  (``initial_rebalance_delay_ms``, extended by the delay while new members keep
  arriving, up to the rebalance timeout: Kafka's ``InitialDelayedJoin``), or
  the rebalance timeout of a later rebalance, after which members that did not
  rejoin are removed (dynamic ones; static members are kept and must sync).
* ``sync-<group>``: members that got a join response must send SyncGroup within
  the rebalance timeout, or they are removed and the group rebalances.
* ``heartbeat-<group>-<member>``: the session timeout. It is (re)started by a
  join response, a sync response, a Heartbeat and an OffsetCommit (in Stable or
  PreparingRebalance); it is not restarted by other requests, exactly as in
  Kafka. When it fires, a member awaiting a join or sync response is spared
  (the timer is then simply not restarted until that response goes out), except
  a *new* member, which is removed after ``new_member_join_timeout_ms`` if its
  first join never completes. A MEMBER_ID_REQUIRED reservation expires after the
  session timeout the client asked for.

Decisions (where walgate differs from Kafka, and why)
-----------------------------------------------------
* Group membership is soft state: it is not written to the WAL. Kafka persists
  GroupMetadata records so a coordinator fail-over keeps a Stable group; after
  a walgate restart every member gets UNKNOWN_MEMBER_ID on its next request and
  rejoins (the clients handle that), and committed offsets — the durable part,
  see :mod:`walgate.coordinator.offsets` — keep the progress.
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

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode

from walgate.coordinator.consumer_protocol import PROTOCOL_TYPE, assigned_partitions
from walgate.coordinator.errors import ConsumerProtocolError, GroupError, GroupIdNotFound, NonEmptyGroup
from walgate.coordinator.group import (
    ClassicGroup,
    ClassicGroupMember,
    Completion,
    GroupState,
    Protocols,
    RequestId,
    join_response,
    sync_response,
)
from walgate.coordinator.timer import KeyedTimer

__all__ = ["ClassicGroups", "Completion", "ConsumerInfo", "GROUP_TYPE"]

GROUP_TYPE: Final = "classic"
"""ListGroups' ``group_type`` of these groups (Kafka's ``Group.GroupType.CLASSIC``)."""


def _uuid4() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True, slots=True)
class AdoptedMember:
    """A member of a classic group being upgraded to a consumer group (:meth:`ClassicGroups.release_for_upgrade`)."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """One member as ``SHOW CONSUMERS`` lists it (a snapshot; changing it changes nothing)."""

    group_id: str
    group_state: str
    """Kafka's state name of the group (``Stable``, ``PreparingRebalance``, ...)."""
    generation_id: int
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    state: str
    """TDengine's consumer state: ``ready`` once the member holds this generation's assignment, else ``rebalancing``."""
    assignment: Mapping[str, tuple[int, ...]] | None
    """Topic -> partitions for protocol type ``consumer``; None for other protocols or unparsable bytes."""
    last_heartbeat_ms: int
    session_timeout_ms: int


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


def _join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def _sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


def _heartbeat_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("heartbeat", group_id, member_id)


class ClassicGroups:
    """Every classic group of this coordinator, and the protocol that moves them.

    Keyword arguments are Kafka's broker settings: ``group.min.session.timeout.ms``,
    ``group.max.session.timeout.ms`` (TDengine's 6 s – 30 min range),
    ``group.initial.rebalance.delay.ms`` (TDengine's 2 s rebalance tick),
    the new-member join timeout (Kafka's fixed 5 min) and ``group.max.size``.
    *member_id_suffix* makes the random part of member ids (``uuid4`` by default;
    tests inject a counter).
    """

    def __init__(
        self,
        *,
        min_session_timeout_ms: int = 6_000,
        max_session_timeout_ms: int = 1_800_000,
        initial_rebalance_delay_ms: int = 2_000,
        new_member_join_timeout_ms: int = 300_000,
        max_group_size: int = 2**31 - 1,
        member_id_suffix: Callable[[], str] = _uuid4,
    ) -> None:
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.new_member_join_timeout_ms = new_member_join_timeout_ms
        self.max_group_size = max_group_size
        self._member_id_suffix = member_id_suffix
        self._groups: dict[str, ClassicGroup] = {}
        self._timer: KeyedTimer[None] = KeyedTimer()
        self._outbox: list[Completion] = []

    # ------------------------------------------------------------------ reading

    def group(self, group_id: str) -> ClassicGroup | None:
        """The group *group_id* if it has state in memory (read it, do not change it)."""
        return self._groups.get(group_id)

    def next_deadline(self) -> int | None:
        """When :meth:`tick` next has something to do (ms, the callers' clock), or None."""
        return self._timer.next_deadline()

    def tick(self, now_ms: int) -> list[Completion]:
        """Fire the timers due at *now_ms*; the parked requests they answered.

        Each fired timer acts at *now_ms* (timers it schedules count from there),
        so call this when :meth:`next_deadline` is reached, as Kafka's timer fires.
        """
        for operation in self._timer.expired(now_ms):
            operation(now_ms)
        return self._drain()

    def _drain(self) -> list[Completion]:
        out = self._outbox[:]
        self._outbox.clear()
        return out

    def _answer(self, request_id: RequestId, response: dict[str, Any]) -> list[Completion]:
        self._outbox.append(Completion(request_id, response))
        return self._drain()

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
            self._timer.schedule(
                _heartbeat_key(group.group_id, new_member_id),
                now_ms + join.session_timeout_ms,
                self._expire_heartbeat_op(group.group_id, new_member_id),
            )
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

    @staticmethod
    def _current_join_response(group: ClassicGroup, member_id: str, *, with_members: bool = True) -> dict[str, Any]:
        return join_response(
            ErrorCode.none,
            member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=group.current_members() if with_members and group.is_leader(member_id) else (),
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
        self._timer.cancel(_heartbeat_key(group.group_id, old_member_id))
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

    # ------------------------------------------------------------------ rebalance

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now_ms)
        else:
            self._maybe_complete_join_phase(group, now_ms)

    def _maybe_complete_join_phase(self, group: ClassicGroup, now_ms: int) -> None:
        if (
            group.is_in_state(GroupState.PREPARING_REBALANCE)
            and group.previous_state is not GroupState.EMPTY  # the initial rebalance waits for its delay
            and group.has_all_members_joined()
        ):
            self._complete_classic_group_join(group, now_ms)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> None:
        if group.is_in_state(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_with_error(group, ErrorCode.rebalance_in_progress, now_ms)
        self._remove_sync_expiration(group)
        is_initial_rebalance = group.is_in_state(GroupState.EMPTY)
        if is_initial_rebalance:
            delay_ms = self.initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self._timer.schedule(
                _join_key(group.group_id),
                now_ms + delay_ms,
                self._initial_rebalance_op(group.group_id, delay_ms, remaining_ms),
            )
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms)
        if not is_initial_rebalance:
            self._maybe_complete_join_else_schedule(group, now_ms)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup, now_ms: int) -> None:
        if group.has_all_members_joined():
            self._complete_classic_group_join(group, now_ms)
        else:
            self._schedule_join_timeout(group, now_ms)

    def _schedule_join_timeout(self, group: ClassicGroup, now_ms: int) -> None:
        self._timer.schedule(
            _join_key(group.group_id), now_ms + group.rebalance_timeout_ms(), self._complete_join_op(group.group_id)
        )

    def _initial_rebalance_op(self, group_id: str, delay_ms: int, remaining_ms: int) -> Callable[[int], None]:
        def try_complete_initial_rebalance_else_schedule(now_ms: int) -> None:
            group = self._groups.get(group_id)
            if group is None:
                return
            if group.new_member_added and remaining_ms != 0:
                group.new_member_added = False
                new_delay_ms = min(self.initial_rebalance_delay_ms, remaining_ms)
                new_remaining_ms = max(remaining_ms - delay_ms, 0)
                self._timer.schedule(
                    _join_key(group_id),
                    now_ms + new_delay_ms,
                    self._initial_rebalance_op(group_id, new_delay_ms, new_remaining_ms),
                )
            else:
                self._complete_classic_group_join(group, now_ms)

        return try_complete_initial_rebalance_else_schedule

    def _complete_join_op(self, group_id: str) -> Callable[[int], None]:
        def complete_classic_group_join(now_ms: int) -> None:
            group = self._groups.get(group_id)
            if group is not None:
                self._complete_classic_group_join(group, now_ms)

        return complete_classic_group_join

    def _complete_classic_group_join(self, group: ClassicGroup, now_ms: int) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start the next generation."""
        self._timer.cancel(_join_key(group.group_id))
        for failed in group.not_yet_rejoined_members():
            if not failed.is_static:
                group.remove(failed.member_id)
                self._timer.cancel(_heartbeat_key(group.group_id, failed.member_id))

        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout, until session
            # timeouts have removed the unresponsive members.
            self._schedule_join_timeout(group, now_ms)
            return

        group.init_next_generation(now_ms)
        if group.is_in_state(GroupState.EMPTY):
            return
        for member in list(group.members.values()):
            group.complete_join(member, self._current_join_response(group, member.member_id))
            self._reschedule_heartbeat(group, member, now_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._timer.schedule(
            _sync_key(group.group_id),
            now_ms + group.rebalance_timeout_ms(),
            self._expire_pending_sync_op(group.group_id, group.generation_id),
        )

    def _reset_and_propagate_assignment_with_error(self, group: ClassicGroup, error: ErrorCode, now_ms: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error, now_ms)

    def _set_and_propagate_assignment(self, group: ClassicGroup, assignment: Mapping[str, bytes], now_ms: int) -> None:
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.none, now_ms)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode, now_ms: int) -> None:
        ok = error is ErrorCode.none
        for member in group.members.values():
            response = sync_response(
                error,
                protocol_type=group.protocol_type if ok else None,
                protocol_name=group.protocol_name if ok else None,
                assignment=member.assignment,
            )
            if group.complete_sync(member, response):
                # Its session may have expired unnoticed while the sync was parked.
                self._reschedule_heartbeat(group, member, now_ms)

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self._timer.cancel(_sync_key(group.group_id))

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._timer.cancel(_sync_key(group.group_id))

    def _expire_pending_sync_op(self, group_id: str, generation_id: int) -> Callable[[int], None]:
        def expire_pending_sync(now_ms: int) -> None:
            group = self._groups.get(group_id)
            if group is None or group.generation_id != generation_id:
                return
            if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and group.pending_sync_members:
                for member_id in [m for m in group.members if m in group.pending_sync_members]:
                    group.remove(member_id)
                    self._timer.cancel(_heartbeat_key(group_id, member_id))
                self._prepare_rebalance(group, now_ms)

        return expire_pending_sync

    # ------------------------------------------------------------------ sessions

    def _reschedule_heartbeat(
        self, group: ClassicGroup, member: ClassicGroupMember, now_ms: int, timeout_ms: int | None = None
    ) -> None:
        delay = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self._timer.schedule(
            _heartbeat_key(group.group_id, member.member_id),
            now_ms + delay,
            self._expire_heartbeat_op(group.group_id, member.member_id),
        )

    def _expire_heartbeat_op(self, group_id: str, member_id: str) -> Callable[[int], None]:
        def expire_classic_group_member_heartbeat(now_ms: int) -> None:
            group = self._groups.get(group_id)
            if group is None:
                return
            if group.is_pending_member(member_id):
                group.remove(member_id)
                if group.is_in_state(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
                    self._complete_classic_group_join(group, now_ms)
                return
            member = group.members.get(member_id)
            if member is not None and not member.has_satisfied_heartbeat():
                self._remove_member_and_update_classic_group(group, member, now_ms)

        return expire_classic_group_member_heartbeat

    def _remove_member_and_update_classic_group(
        self, group: ClassicGroup, member: ClassicGroupMember, now_ms: int
    ) -> None:
        # A new member may time out with its JoinGroup parked: tell it to rejoin.
        group.complete_join(member, join_response(ErrorCode.unknown_member_id, ""))
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, now_ms)
        elif group.is_in_state(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_classic_group_join(group, now_ms)

    def touch(self, group_id: str, member_id: str, now_ms: int) -> None:
        """Restart the session of a validated member (an OffsetCommit in Stable or PreparingRebalance)."""
        group = self._groups[group_id]
        member = group.members[member_id]
        member.last_heartbeat_ms = now_ms
        self._reschedule_heartbeat(group, member, now_ms)

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
                self._timer.cancel(_heartbeat_key(group_id, member_id))
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
        self._timer.cancel(_heartbeat_key(group.group_id, member_id))
        member = group.members[member_id]
        group.complete_join(member, join_response(ErrorCode.unknown_member_id, ""))
        group.complete_sync(member, sync_response(ErrorCode.unknown_member_id))
        group.remove(member_id)

    # ------------------------------------------------------------------ admin APIs

    def describe(
        self, group_ids: Iterable[str], *, has_offsets: Callable[[str], bool], report_not_found: bool
    ) -> list[dict[str, Any]]:
        """DescribeGroups: one DescribedGroup dict per id (kio field names, ``authorized_operations`` left out).

        An unknown group is ``Dead``; with *report_not_found* (DescribeGroups v6+) it
        also carries GROUP_ID_NOT_FOUND. A group that only has offsets is ``Empty``.
        Member metadata is given in Stable only (with the protocol name as
        ``protocol_data``); assignments always.
        """
        described: list[dict[str, Any]] = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None:
                if has_offsets(group_id):
                    described.append(_described(group_id, GroupState.EMPTY.value))
                elif report_not_found:
                    described.append(
                        _described(
                            group_id,
                            GroupState.DEAD.value,
                            error_code=ErrorCode.group_id_not_found,
                            error_message=f"Group {group_id} not found.",
                        )
                    )
                else:
                    described.append(_described(group_id, GroupState.DEAD.value))
                continue
            stable = group.is_in_state(GroupState.STABLE)
            described.append(
                _described(
                    group_id,
                    group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=(group.protocol_name or "") if stable else "",
                    members=[
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.group_instance_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                            "member_assignment": m.assignment,
                        }
                        for m in group.members.values()
                    ],
                )
            )
        return described

    def list_groups(
        self,
        *,
        states_filter: Iterable[str] = (),
        types_filter: Iterable[str] = (),
        offset_groups: Iterable[str] = (),
    ) -> list[dict[str, Any]]:
        """ListGroups: ``{group_id, protocol_type, group_state, group_type}`` per matching group.

        Filters compare case-insensitively (an empty filter matches all); only the
        type ``classic`` exists here. *offset_groups* are the groups with committed
        offsets: those without state in memory are listed as Empty.
        """
        states = {s.strip().lower() for s in states_filter}
        types = {t.strip().lower() for t in types_filter}
        if types and GROUP_TYPE not in types:
            return []
        listed = [(group_id, group.protocol_type or "", group.state.value) for group_id, group in self._groups.items()]
        listed += [(g, "", GroupState.EMPTY.value) for g in dict.fromkeys(offset_groups) if g not in self._groups]
        return [
            {"group_id": g, "protocol_type": p, "group_state": s, "group_type": GROUP_TYPE}
            for g, p, s in listed
            if not states or s.lower() in states
        ]

    def delete(
        self, group_ids: Iterable[str], *, has_offsets: Callable[[str], bool], now_ms: int
    ) -> list[dict[str, Any]]:
        """DeleteGroups: ``{group_id, error_code}`` per distinct id.

        Only an Empty group can be deleted (NON_EMPTY_GROUP otherwise,
        GROUP_ID_NOT_FOUND if it has neither state nor offsets). The caller deletes
        the committed offsets of every group answered with NONE.
        """
        results: list[dict[str, Any]] = []
        for group_id in dict.fromkeys(group_ids):
            try:
                self._validate_delete_group(group_id, has_offsets)
            except GroupError as error:
                results.append({"group_id": group_id, "error_code": error.error_code})
            else:
                self._remove_group(group_id, now_ms)
                results.append({"group_id": group_id, "error_code": ErrorCode.none})
        return results

    def _validate_delete_group(self, group_id: str, has_offsets: Callable[[str], bool]) -> None:
        group = self._groups.get(group_id)
        if group is None:
            if not has_offsets(group_id):
                raise GroupIdNotFound(f"Group {group_id} not found.")
        elif not group.is_in_state(GroupState.EMPTY):
            raise NonEmptyGroup(f"Group {group_id} is not empty.")

    def release_for_upgrade(self, group_id: str, now_ms: int) -> tuple[int, list[AdoptedMember], list[Completion]]:
        """Hand a group with members over to the consumer protocol (Kafka's online upgrade).

        Returns its generation, its members (subscription and assignment bytes
        included) and the parked requests answered REBALANCE_IN_PROGRESS; the group
        is gone from here afterwards.
        """
        group = self._groups[group_id]
        adopted = []
        for m in group.members.values():
            metadata = m.metadata(group.protocol_name) if group.protocol_name else m.protocols[0][1]
            adopted.append(AdoptedMember(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.session_timeout_ms, tuple(m.protocols), metadata, m.assignment,
            ))
            group.complete_join(m, join_response(ErrorCode.rebalance_in_progress, m.member_id))
            group.complete_sync(m, sync_response(ErrorCode.rebalance_in_progress))
        generation = group.generation_id
        self._remove_group(group_id, now_ms)
        return generation, adopted, self._drain()

    def drop_empty(self, group_id: str, now_ms: int) -> None:
        """Forget *group_id* if it is Empty (a consumer-protocol group takes the id over)."""
        group = self._groups.get(group_id)
        if group is not None and group.is_in_state(GroupState.EMPTY):
            self._remove_group(group_id, now_ms)

    def remove_empty_groups(self, *, has_offsets: Callable[[str], bool], now_ms: int) -> list[str]:
        """Drop Empty groups without committed offsets (Kafka's periodic group cleanup); their ids.

        :meth:`GroupCoordinator.tick <walgate.coordinator.coordinator.GroupCoordinator.tick>` calls this every
        ``offsets.retention.check.interval.ms`` so groups of short-lived consumers do not accumulate. Unlike
        Kafka, a group with a member between its MEMBER_ID_REQUIRED answer and its second JoinGroup is kept
        (that member's join timer drops it when it never comes back).
        """
        removed = [
            group_id
            for group_id, group in self._groups.items()
            if group.is_in_state(GroupState.EMPTY) and not group.pending_join_members and not has_offsets(group_id)
        ]
        for group_id in removed:
            self._remove_group(group_id, now_ms)
        return removed

    def _remove_group(self, group_id: str, now_ms: int) -> None:
        group = self._groups.pop(group_id, None)
        if group is None:
            return
        group.transition_to(GroupState.DEAD, now_ms)
        self._timer.cancel(_join_key(group_id))
        self._timer.cancel(_sync_key(group_id))
        for member_id in [*group.members, *group.pending_join_members]:
            self._timer.cancel(_heartbeat_key(group_id, member_id))

    # ------------------------------------------------------------------ SHOW CONSUMERS

    def consumers(self) -> list[ConsumerInfo]:
        """Every member of every group, for ``SHOW CONSUMERS``."""
        infos: list[ConsumerInfo] = []
        for group in self._groups.values():
            stable = group.is_in_state(GroupState.STABLE)
            for member in group.members.values():
                assignment: Mapping[str, tuple[int, ...]] | None = None
                if group.protocol_type == PROTOCOL_TYPE:
                    try:
                        assignment = assigned_partitions(member.assignment)
                    except ConsumerProtocolError:
                        assignment = None
                ready = stable and member.member_id not in group.pending_sync_members
                infos.append(
                    ConsumerInfo(
                        group_id=group.group_id,
                        group_state=group.state.value,
                        generation_id=group.generation_id,
                        member_id=member.member_id,
                        group_instance_id=member.group_instance_id,
                        client_id=member.client_id,
                        client_host=member.client_host,
                        state="ready" if ready else "rebalancing",
                        assignment=assignment,
                        last_heartbeat_ms=member.last_heartbeat_ms,
                        session_timeout_ms=member.session_timeout_ms,
                    )
                )
        return infos


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


def _member_response(member_id: str, group_instance_id: str | None, error: ErrorCode) -> dict[str, Any]:
    return {"member_id": member_id, "group_instance_id": group_instance_id, "error_code": error}


def _described(
    group_id: str,
    group_state: str,
    *,
    error_code: ErrorCode = ErrorCode.none,
    error_message: str | None = None,
    protocol_type: str = "",
    protocol_data: str = "",
    members: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    return {
        "error_code": error_code,
        "error_message": error_message,
        "group_id": group_id,
        "group_state": group_state,
        "protocol_type": protocol_type,
        "protocol_data": protocol_data,
        "members": list(members),
    }
