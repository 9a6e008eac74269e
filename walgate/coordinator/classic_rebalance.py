"""The classic groups of this node, their timers, and the rebalance every classic request can start or finish.

:class:`ClassicRebalance` is the base of :class:`~walgate.coordinator.classic.ClassicGroups`: it holds the groups,
the settings, the timers and the outbox of answered parked requests, and implements Kafka's rebalance machinery
(``prepareRebalance``, ``completeClassicGroupJoin``, ``propagateAssignment``, the timer callbacks) that JoinGroup,
SyncGroup, LeaveGroup (:mod:`~walgate.coordinator.classic`) and the timers all drive.

Invariants: a group's state changes only through
:meth:`ClassicGroup.transition_to <walgate.coordinator.classic_model.ClassicGroup.transition_to>` (Kafka's
transition table); a new generation starts only in :meth:`ClassicRebalance._complete_classic_group_join`, which logs
one ``rebalance`` line (:mod:`~walgate.coordinator.group_log`); a group has at most one join timer and one sync
timer, a member at most one session timer, and a group's timers are cancelled when it leaves memory. No method reads
the clock: every call takes ``now_ms`` and timers fire in :meth:`ClassicRebalance.tick`.

Timers (Kafka's keys)
---------------------
* ``join-<group>``: the initial delayed join of an Empty group
  (``initial_rebalance_delay_ms``, extended by the delay while new members keep
  arriving, up to the rebalance timeout: Kafka's ``InitialDelayedJoin``), or
  the rebalance timeout of a later rebalance, after which members that did not
  rejoin are removed (dynamic ones; static members are kept and must sync).
* ``sync-<group>``: members that got a join response must send SyncGroup within
  the rebalance timeout, or they are removed and the group rebalances.
* ``heartbeat-<group>-<member>``: the session timeout. It is (re)started when a
  join phase completes (every member's join response), when a parked SyncGroup
  is answered, by a Heartbeat, by a static member's rejoin under a new member id,
  and by an OffsetCommit (in Stable or PreparingRebalance); as in Kafka, other
  requests do not restart it. When it fires, a member awaiting a join or sync
  response is spared (the timer is then simply not restarted until that response
  goes out), except a *new* member, which is removed after
  ``new_member_join_timeout_ms`` if its first join never completes. A
  MEMBER_ID_REQUIRED reservation expires after the session timeout the client
  asked for.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from walgate.coordinator import group_log
from walgate.coordinator.classic_model import (
    ClassicGroup,
    ClassicGroupMember,
    Completion,
    GroupState,
    RequestId,
    join_response,
    sync_response,
)
from walgate.coordinator.group_records import rebuild_classic
from walgate.coordinator.snapshots import CLASSIC_GROUP_TYPE
from walgate.coordinator.timer import KeyedTimer

__all__ = ["ClassicRebalance"]


def _join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def _sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


def _heartbeat_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("heartbeat", group_id, member_id)


class ClassicRebalance:
    """The classic groups, their settings, timers and outbox, and the rebalance (see the module docstring).

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
        member_id_suffix: Callable[[], str] = lambda: str(uuid.uuid4()),
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

    def forget(self, group_id: str) -> None:
        """Drop *group_id* from memory (another node coordinates it now); its timers find it gone."""
        self._groups.pop(group_id, None)

    def group(self, group_id: str) -> ClassicGroup | None:
        """The group *group_id* if it has state in memory (read it, do not change it)."""
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        """The ids of every group of this kind in memory."""
        return list(self._groups)

    def has_members(self, group_id: str) -> bool:
        """Whether *group_id* is a classic group of this node with members."""
        group = self._groups.get(group_id)
        return group is not None and bool(group.members)

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
                group_log.member_expired(group.group_id, CLASSIC_GROUP_TYPE, failed, "did not rejoin in the rebalance")
                group.remove(failed.member_id)
                self._cancel_heartbeat(group, failed.member_id)

        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout, until session
            # timeouts have removed the unresponsive members.
            self._schedule_join_timeout(group, now_ms)
            return

        group.init_next_generation(now_ms)
        group_log.rebalanced(group.group_id, CLASSIC_GROUP_TYPE, "generation", group.generation_id,
                             group.members.values())
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
                    group_log.member_expired(group_id, CLASSIC_GROUP_TYPE, group.members[member_id],
                                             "no SyncGroup within the rebalance timeout")
                    group.remove(member_id)
                    self._cancel_heartbeat(group, member_id)
                self._prepare_rebalance(group, now_ms)

        return expire_pending_sync

    # ------------------------------------------------------------------ sessions

    def _schedule_heartbeat_expiry(self, group: ClassicGroup, member_id: str, timeout_ms: int, now_ms: int) -> None:
        """(Re)start the session of *member_id* (a member or a pending member): removed after *timeout_ms*."""
        self._timer.schedule(
            _heartbeat_key(group.group_id, member_id),
            now_ms + timeout_ms,
            self._expire_heartbeat_op(group.group_id, member_id),
        )

    def _reschedule_heartbeat(
        self, group: ClassicGroup, member: ClassicGroupMember, now_ms: int, timeout_ms: int | None = None
    ) -> None:
        """(Re)start *member*'s session, of its session timeout unless *timeout_ms* is given."""
        delay = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self._schedule_heartbeat_expiry(group, member.member_id, delay, now_ms)

    def _cancel_heartbeat(self, group: ClassicGroup, member_id: str) -> None:
        self._timer.cancel(_heartbeat_key(group.group_id, member_id))

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
        timeout = (f"new member join timeout ({self.new_member_join_timeout_ms} ms)" if member.is_new
                   else f"session timeout ({member.session_timeout_ms} ms)")
        group_log.member_expired(group.group_id, CLASSIC_GROUP_TYPE, member, timeout)
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

    def restore(self, group_id: str, value: Mapping[str, Any], now_ms: int) -> None:
        """Rebuild the group *group_id* (unknown here: a start) from its recorded *value*
        (:func:`~walgate.coordinator.group_records.rebuild_classic`, whose ValueError it raises); every member's
        session starts at *now_ms*, as Kafka's loader reschedules them."""
        if group_id in self._groups:
            raise ValueError(f"group {group_id!r} is already loaded")
        group = rebuild_classic(group_id, value, now_ms, self._outbox)
        self._groups[group_id] = group
        for member in group.members.values():
            self._reschedule_heartbeat(group, member, now_ms)

    def _remove_group(self, group_id: str, now_ms: int) -> None:
        group = self._groups.pop(group_id, None)
        if group is None:
            return
        group.transition_to(GroupState.DEAD, now_ms)
        self._timer.cancel(_join_key(group_id))
        self._timer.cancel(_sync_key(group_id))
        for member_id in [*group.members, *group.pending_join_members]:
            self._timer.cancel(_heartbeat_key(group_id, member_id))
