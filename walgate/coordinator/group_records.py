"""Group state as records that survive a restart: the values written, and the groups rebuilt from them.

Kafka's coordinator produces ``CoordinatorRecord``\\ s (classic: one ``GroupMetadata`` record holding the whole group;
KIP-848: group metadata, member, target-assignment and current-assignment records) that are appended to
``__consumer_offsets`` before the state they record is acknowledged, and replays them when it loads a partition.
walgate does the same with one JSON value per group id: :func:`group_value` describes a group as it must be
restored, :func:`rebuild_classic` / :func:`rebuild_consumer` make a group of a value. The coordinator
(:meth:`~walgate.coordinator.coordinator.GroupCoordinator.take_records`) hands the changed values to the gateway,
which writes them (:mod:`walgate.storage.coordinator_log`) and answers only after they are durable.

What is kept, as Kafka keeps it:

* a classic group when it is ``Stable`` (its generation, protocol type and protocol, leader and each member with
  its ids, client, timeouts, protocols and assignment) or ``Empty`` (its generation and protocol type). A group in
  the middle of a rebalance keeps the value of its last Stable generation, as Kafka writes the group only when the
  leader's SyncGroup completes one: after a restart the group is back at that generation, and members that had
  joined a newer one rejoin (ILLEGAL_GENERATION), as they would with Kafka;
* a consumer (KIP-848) group at every change: its group and assignment epochs, subscription metadata, target
  assignment and each member with its epochs, state, subscription, assigned and pending-revocation partitions (and
  a classic member's session timeout and protocols).

Heartbeat times, parked requests and timers are not kept: a rebuilt group's members start their session timeout
(and a member that must revoke partitions its rebalance timeout) at the load time, as Kafka's coordinator
reschedules them on load. Static and dynamic members alike are kept: a member that does not come back expires.

Bytes (protocol metadata, assignments) are base64 strings. A value that does not rebuild (a bug, or a record from a
future format) raises ``ValueError``: the caller reports it and the group's members rejoin.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Final, TypedDict

from walgate.coordinator.classic_model import ClassicGroup, ClassicGroupMember, Completion, GroupState
from walgate.coordinator.consumer_model import (
    Assignment,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from walgate.coordinator.snapshots import CLASSIC_GROUP_TYPE, CONSUMER_GROUP_TYPE

__all__ = ["group_value", "rebuild_classic", "rebuild_consumer", "KEPT_CLASSIC_STATES"]

KEPT_CLASSIC_STATES: Final = frozenset({GroupState.STABLE, GroupState.EMPTY})
"""The classic states a value is written in (the others keep the last one)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _bytes(text: Any) -> bytes:
    if not isinstance(text, str):
        raise ValueError(f"not base64 text: {text!r}")
    return base64.b64decode(text, validate=True)


def _assignment(assignment: Assignment) -> dict[str, list[int]]:
    return {t: sorted(ps) for t, ps in sorted(assignment.items())}


def _from_assignment(value: Any) -> Assignment:
    return {str(t): frozenset(_ints(ps)) for t, ps in _dict(value, "an assignment").items() if ps}


def _dict(value: Any, what: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"not {what}: {value!r}")
    return value


def _ints(values: Any) -> list[int]:
    if not isinstance(values, list) or any(type(v) is not int for v in values):
        raise ValueError(f"not a list of integers: {values!r}")
    return values


def _int(value: Any) -> int:
    if type(value) is not int:
        raise ValueError(f"not an integer: {value!r}")
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else _str(value)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"not a string: {value!r}")
    return value


# ------------------------------------------------------------------ values


def _protocols_value(protocols: tuple[tuple[str, bytes], ...]) -> list[list[str]]:
    return [[name, _b64(metadata)] for name, metadata in protocols]


def _classic_value(group: ClassicGroup) -> dict[str, Any] | None:
    if group.state not in KEPT_CLASSIC_STATES:
        return None
    return {
        "type": CLASSIC_GROUP_TYPE,
        "protocol_type": group.protocol_type,
        "protocol": group.protocol_name,
        "generation": group.generation_id,
        "leader": group.leader_id,
        "members": [
            {
                "id": m.member_id,
                "instance": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "rebalance_timeout": m.rebalance_timeout_ms,
                "session_timeout": m.session_timeout_ms,
                "protocol_type": m.protocol_type,
                "protocols": _protocols_value(m.protocols),
                "assignment": _b64(m.assignment),
            }
            for m in group.members.values()
        ],
    }


def _consumer_member(m: ConsumerGroupMember) -> dict[str, Any]:
    return {
        "id": m.member_id,
        "instance": m.instance_id,
        "rack": m.rack_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "rebalance_timeout": m.rebalance_timeout_ms,
        "assignor": m.server_assignor,
        "topics": list(m.subscribed_topic_names),
        "state": m.state.value,
        "epoch": m.member_epoch,
        "previous_epoch": m.previous_member_epoch,
        "assigned": _assignment(m.assigned),
        "pending": _assignment(m.pending_revocation),
        "given_at": sorted([t, p, e] for (t, p), e in m.assignment_epochs.items()),
        "classic": None if m.classic is None else {
            "session_timeout": m.classic.session_timeout_ms,
            "protocols": _protocols_value(m.classic.protocols),
        },
    }


def _consumer_value(group: ConsumerGroup) -> dict[str, Any]:
    return {
        "type": CONSUMER_GROUP_TYPE,
        "epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "subscription": dict(sorted(group.subscription_metadata.items())),
        "target": {member_id: _assignment(a) for member_id, a in group.target.items()},
        "members": [_consumer_member(m) for m in group.members.values()],
    }


def group_value(group: ClassicGroup | ConsumerGroup) -> dict[str, Any] | None:
    """The value that restores *group*; None for a classic group in the middle of a rebalance (its last value
    stands)."""
    if isinstance(group, ClassicGroup):
        return _classic_value(group)
    return _consumer_value(group)


# ------------------------------------------------------------------ rebuilding


def _protocols(value: Any) -> tuple[tuple[str, bytes], ...]:
    if not isinstance(value, list):
        raise ValueError(f"not a protocol list: {value!r}")
    return tuple((_str(name), _bytes(metadata)) for name, metadata in value)


def _check_type(value: Mapping[str, Any], group_type: str) -> None:
    if value.get("type") != group_type:
        raise ValueError(f"not a {group_type} group: type {value.get('type')!r}")


class _Identity(TypedDict):
    """The member fields both group types keep under the same keys and name alike."""

    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    last_heartbeat_ms: int


def _identity(m: Mapping[str, Any], now_ms: int) -> _Identity:
    """A member value's identity, the member last heard of at *now_ms*."""
    return _Identity(member_id=_str(m["id"]), client_id=_str(m["client_id"]), client_host=_str(m["client_host"]),
                     rebalance_timeout_ms=_int(m["rebalance_timeout"]), last_heartbeat_ms=now_ms)


def rebuild_classic(
    group_id: str, value: Mapping[str, Any], now_ms: int, outbox: list[Completion] | None = None
) -> ClassicGroup:
    """The classic group *value* describes (answering parked requests into *outbox*): Stable with its members (Empty
    without), no parked request, every member last heard of at *now_ms*. Raises ValueError (or KeyError,
    TypeError) on a value it cannot rebuild."""
    _check_type(value, CLASSIC_GROUP_TYPE)
    group = ClassicGroup(group_id, now_ms, outbox)
    group.generation_id = _int(value["generation"])
    group.protocol_type = _opt_str(value["protocol_type"])
    group.protocol_name = _opt_str(value["protocol"])
    for m in value["members"]:
        member = ClassicGroupMember(
            **_identity(m, now_ms),
            group_instance_id=_opt_str(m["instance"]),
            session_timeout_ms=_int(m["session_timeout"]),
            protocol_type=_str(m["protocol_type"]),
            protocols=_protocols(m["protocols"]),
            assignment=_bytes(m["assignment"]),
        )
        if member.member_id in group.members or member.group_instance_id in group.static_members:
            raise ValueError(f"member {member.member_id!r} is listed twice")
        if member.protocol_type != group.protocol_type:
            raise ValueError(f"member {member.member_id!r} has protocol type {member.protocol_type!r}")
        group.add(member)
        member.metadata(group.protocol_name)  # every member supports the group's protocol (ValueError if not)
    group.leader_id = _opt_str(value["leader"])
    if group.members:
        if group.leader_id not in group.members:
            raise ValueError(f"leader {group.leader_id!r} is no member")
        group.state = GroupState.STABLE  # as Kafka's loader: no transition, the group was Stable when written
        group.previous_state = GroupState.COMPLETING_REBALANCE
    elif group.leader_id is not None:
        raise ValueError("an empty group with a leader")
    group.subscribed_topics = group.compute_subscribed_topics()
    return group


def _consumer_member_of(m: Mapping[str, Any], now_ms: int) -> ConsumerGroupMember:
    classic = m["classic"]
    given_at: dict[tuple[str, int], int] = {}
    for entry in m["given_at"]:
        topic, partition, epoch = entry
        given_at[(_str(topic), _int(partition))] = _int(epoch)
    return ConsumerGroupMember(
        **_identity(m, now_ms),
        instance_id=_opt_str(m["instance"]),
        rack_id=_opt_str(m["rack"]),
        server_assignor=_opt_str(m["assignor"]),
        subscribed_topic_names=tuple(_str(t) for t in m["topics"]),
        state=MemberState(m["state"]),
        member_epoch=_int(m["epoch"]),
        previous_member_epoch=_int(m["previous_epoch"]),
        assigned=_from_assignment(m["assigned"]),
        pending_revocation=_from_assignment(m["pending"]),
        assignment_epochs=given_at,
        classic=None if classic is None else ClassicMetadata(_int(classic["session_timeout"]),
                                                             _protocols(classic["protocols"])),
    )


def rebuild_consumer(group_id: str, value: Mapping[str, Any], now_ms: int) -> ConsumerGroup:
    """The consumer group *value* describes, every member last heard of at *now_ms*. Raises ValueError (or
    KeyError) on a value it cannot rebuild, e.g. one that gives a partition to two members."""
    _check_type(value, CONSUMER_GROUP_TYPE)
    group = ConsumerGroup(group_id, group_epoch=_int(value["epoch"]), assignment_epoch=_int(value["assignment_epoch"]))
    subscription = _dict(value["subscription"], "a subscription")
    group.subscription_metadata = {_str(t): _int(n) for t, n in subscription.items()}
    for m in value["members"]:
        member = _consumer_member_of(m, now_ms)
        if member.member_id in group.members:
            raise ValueError(f"member {member.member_id!r} is listed twice")
        group.members[member.member_id] = member
        if member.instance_id is not None:
            if member.instance_id in group.static_members:
                raise ValueError(f"instance id {member.instance_id!r} is listed twice")
            group.static_members[member.instance_id] = member.member_id
        try:
            group.set_member_ownership(member, ())
        except AssertionError as exc:
            raise ValueError(str(exc)) from None
    target = _dict(value["target"], "a target assignment")
    group.target = {_str(member_id): _from_assignment(a) for member_id, a in target.items()}
    return group
