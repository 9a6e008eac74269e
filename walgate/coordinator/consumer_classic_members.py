"""Classic members of consumer groups: JoinGroup / SyncGroup / Heartbeat / LeaveGroup answered by the server.

As in Kafka 4, a consumer group (KIP-848) can have members that speak the classic protocol: members of a classic
group upgraded when a KIP-848 member joined it (:meth:`ClassicMembers.adopt`, Kafka's
``ConsumerGroup.fromClassicGroup``), and classic consumers joining a consumer group with members. They are members
like the others — the uniform assignor gives them a target, reconciliation moves them towards it — and the classic
requests are translated (Kafka's ``classicGroup*ToConsumerGroup``):

* JoinGroup is answered at once, never parked: the subscription and owned partitions come from the first protocol's
  metadata, the generation is the member epoch and there is no leader, so no client runs an assignor;
* SyncGroup hands out the member's current assignment in consumer-protocol bytes;
* Heartbeat answers REBALANCE_IN_PROGRESS while the member must rejoin (the group epoch moved past its epoch, or it
  still revokes or waits for partitions);
* LeaveGroup fences each leaving member.

A classic member's session timeout is its own (JoinGroup's), restarted by its JoinGroup, SyncGroup and Heartbeat.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from walgate.coordinator import group_log
from walgate.coordinator.classic_admin import AdoptedMember
from walgate.coordinator.classic_model import join_response
from walgate.coordinator.consumer_membership import ConsumerMembership, HeartbeatError
from walgate.coordinator.consumer_model import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    MemberUpdate,
    clean_assignment,
)
from walgate.coordinator.consumer_protocol import (
    PROTOCOL_TYPE,
    assigned_partitions,
    encode_assignment,
    subscription,
)
from walgate.coordinator.errors import ConsumerProtocolError
from walgate.coordinator.snapshots import CONSUMER_GROUP_TYPE

__all__ = ["ClassicMembers"]


class ClassicMembers(ConsumerMembership):
    """The classic requests of consumer groups' classic members (a part of
    :class:`~walgate.coordinator.consumer_group.ConsumerGroups`)."""

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
                assigned = clean_assignment(assigned_partitions(m.assignment))
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
        group_log.upgraded(group_id, generation_id, len(group.members))

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
                raise HeartbeatError(ErrorCode.inconsistent_group_protocol, "protocols do not match the group's")
            try:
                topics, owned_map = subscription(protocols[0][1])
            except ConsumerProtocolError as exc:
                raise HeartbeatError(ErrorCode.inconsistent_group_protocol, str(exc)) from None
            is_new = False
            if instance_id is not None and instance_id in group.static_members:
                existing = group.members[group.static_members[instance_id]]
                if member_id not in ("", existing.member_id):
                    raise HeartbeatError(ErrorCode.fenced_instance_id, f"instance id {instance_id} is held")
                if member_id == "":
                    member = self._replace_static_member(group, existing, self._new_member_id(), client_id, client_host)
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
                raise HeartbeatError(ErrorCode.group_max_size_reached, "the group is full")
        except HeartbeatError as exc:
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
            raise HeartbeatError(ErrorCode.fenced_instance_id, f"instance id {instance_id} is not {member_id}'s")
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
                raise HeartbeatError(ErrorCode.illegal_generation, "generation is not the member epoch")
            names = [name for name, _ in member.classic.protocols]
            if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != names[0]
            ):
                raise HeartbeatError(ErrorCode.inconsistent_group_protocol, "protocol does not match the join")
        except HeartbeatError as exc:
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
                raise HeartbeatError(ErrorCode.illegal_generation, "generation is not the member epoch")
        except HeartbeatError as exc:
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
                group_log.member_left(group.group_id, CONSUMER_GROUP_TYPE, member)
                self._fence_member(group, member.member_id)
            answers.append({"member_id": member_id, "group_instance_id": instance_id, "error_code": error})
        return {"error_code": ErrorCode.none, "members": answers}
