"""One classic consumer group: its state, members, generation and parked requests.

This is Kafka's ``ClassicGroupState`` + ``ClassicGroupMember`` + ``ClassicGroup``
(``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/classic/``)
in Python, with the same names so the two can be compared line by line. The
protocol logic that moves groups around (JoinGroup, SyncGroup, timers) is in
:mod:`walgate.coordinator.classic` and :mod:`walgate.coordinator.classic_rebalance`; this module holds the data
and the operations Kafka keeps on the group itself.

States and transitions
----------------------
Every change of state goes through :meth:`ClassicGroup.transition_to`, which
asserts the move against :data:`VALID_PREVIOUS_STATES` (Kafka's table) and
stamps the time::

                   new member joins
      ┌───────┐  ─────────────────────────►  ┌────────────────────┐ ◄─── join from the leader, a new member or
      │ Empty │                              │ PreparingRebalance │      a member with new metadata; leave;
      └───────┘  ◄─────────────────────────  └────────────────────┘      session or sync expiry (from both
          │        join phase ends with            │ join phase ends      CompletingRebalance and Stable)
          │        no member left                  │ with members              ▲              ▲
          │                                        ▼                           │              │
          │                             ┌─────────────────────┐                │              │
          │                             │ CompletingRebalance │ ───────────────┘              │
          │                             └─────────────────────┘                               │
          │                                        │ the leader's SyncGroup                   │
          │                                        ▼                                          │
          │                                   ┌────────┐                                      │
          │                                   │ Stable │ ─────────────────────────────────────┘
          │                                   └────────┘
          ▼ DeleteGroups, cleanup of a group without offsets, a consumer group taking the id
      ┌──────┐
      │ Dead │  (from every state, as in Kafka: an upgrade to a consumer group drops a group with members)
      └──────┘

What each state allows (Kafka's ``ClassicGroupState`` comments):

* **Empty** — no members (a group that only holds committed offsets is Empty
  too). JoinGroup from a new member starts the initial rebalance; SyncGroup,
  Heartbeat, LeaveGroup get UNKNOWN_MEMBER_ID; OffsetCommit only without a
  generation ("simple" commits).
* **PreparingRebalance** — JoinGroups are parked until every known member has
  rejoined or the rebalance timeout fires; Heartbeat and SyncGroup get
  REBALANCE_IN_PROGRESS; OffsetCommit of the previous generation is accepted.
* **CompletingRebalance** — join responses are out; followers' SyncGroups are
  parked until the leader's SyncGroup brings the assignment; Heartbeat gets
  NONE; OffsetCommit gets REBALANCE_IN_PROGRESS.
* **Stable** — heartbeats and commits of the current generation are accepted;
  SyncGroup returns the member's assignment.
* **Dead** — the group is being removed; everything gets
  COORDINATOR_NOT_AVAILABLE (walgate drops a group from memory as soon as it is
  Dead, so requests then see "no such group" instead).

Parked requests
---------------
JoinGroup and SyncGroup may be answered later. A member keeps the caller's
opaque request id of its parked join (``join_request``) and sync
(``sync_request``); answering one appends a :class:`Completion` to the group's
outbox, which :class:`~walgate.coordinator.ClassicGroups` drains and returns to
the caller. A member that sends a second JoinGroup while one is parked replaces
it; the first is never answered (as in Kafka — its connection is gone).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from kio.schema.errors import ErrorCode

from walgate.coordinator.consumer_protocol import PROTOCOL_TYPE, subscribed_topics
from walgate.coordinator.errors import (
    ConsumerProtocolError,
    FencedInstanceId,
    UnknownMemberId,
)

__all__ = [
    "VALID_PREVIOUS_STATES",
    "ClassicGroup",
    "ClassicGroupMember",
    "Completion",
    "GroupState",
    "Protocols",
    "RequestId",
    "join_response",
    "sync_response",
]


class GroupState(enum.Enum):
    """Kafka's classic group states; the value is Kafka's name (DescribeGroups / ListGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS_STATES: Final[Mapping[GroupState, frozenset[GroupState]]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}
"""Target state -> the states a group may move to it from (Kafka's ``addValidPreviousStates``)."""

RequestId = Hashable
"""The caller's handle of a parked JoinGroup / SyncGroup (never None)."""

Protocols = tuple[tuple[str, bytes], ...]
"""A member's (protocol name, metadata) list in its order of preference."""


@dataclass(frozen=True, slots=True)
class Completion:
    """The response to the parked request ``request_id`` (a JoinGroup or SyncGroup)."""

    request_id: RequestId
    response: dict[str, Any]


def join_response(
    error: ErrorCode,
    member_id: str,
    *,
    generation_id: int = -1,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str = "",
    skip_assignment: bool = False,
    members: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A JoinGroup response body (kio field names; ``JoinGroupResponseData`` defaults)."""
    return {
        "error_code": error,
        "generation_id": generation_id,
        "protocol_type": protocol_type,
        "protocol_name": protocol_name,
        "leader": leader,
        "skip_assignment": skip_assignment,
        "member_id": member_id,
        "members": list(members),
    }


def sync_response(
    error: ErrorCode,
    *,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    assignment: bytes = b"",
) -> dict[str, Any]:
    """A SyncGroup response body (kio field names)."""
    return {
        "error_code": error,
        "protocol_type": protocol_type,
        "protocol_name": protocol_name,
        "assignment": assignment,
    }


@dataclass(slots=True, eq=False)
class ClassicGroupMember:
    """A member: identity, timeouts, protocols, assignment and its parked requests."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_request: RequestId | None = None
    sync_request: RequestId | None = None
    is_new: bool = False
    """Set until the member's first join response: new members can expire while awaiting join."""
    last_heartbeat_ms: int = 0
    """When a request of this member was last accepted (for ``SHOW CONSUMERS``)."""

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_request is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_request is not None

    def metadata(self, protocol_name: str | None) -> bytes:
        """The member's metadata for *protocol_name* (which it must support)."""
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol_name!r}")

    def has_satisfied_heartbeat(self) -> bool:
        """Whether a session expiry must spare the member: it awaits a join or sync response.

        New members are the exception: they are expired even while their join is parked.
        """
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def matches(self, protocols: Protocols) -> bool:
        return protocols == self.protocols

    def vote(self, candidates: frozenset[str]) -> str:
        """The member's most preferred protocol among *candidates*."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of the candidate protocols")


class ClassicGroup:
    """A classic group. Mutated only by :class:`~walgate.coordinator.ClassicGroups`."""

    def __init__(self, group_id: str, now_ms: int, outbox: list[Completion] | None = None) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.previous_state = GroupState.DEAD
        self.state_timestamp_ms = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, ClassicGroupMember] = {}
        self.static_members: dict[str, str] = {}
        """group.instance.id -> member id."""
        self.pending_join_members: set[str] = set()
        """Member ids handed out with MEMBER_ID_REQUIRED that have not joined yet."""
        self.pending_sync_members: set[str] = set()
        """Members of this generation that have not sent SyncGroup yet."""
        self.subscribed_topics: frozenset[str] | None = None
        """Topics the members subscribe to; None when unknown (not "consumer" or unparsable)."""
        self.new_member_added = False
        self.num_awaiting_join = 0
        self._outbox: list[Completion] = [] if outbox is None else outbox

    def __repr__(self) -> str:
        return (
            f"ClassicGroup({self.group_id!r}, {self.state.value}, generation={self.generation_id}, "
            f"members={list(self.members)})"
        )

    # ------------------------------------------------------------------ state

    def is_in_state(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        """Move to *target*, asserting Kafka's transition table; stamps the time."""
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise AssertionError(
                f"group {self.group_id} should be in one of "
                f"{sorted(s.value for s in VALID_PREVIOUS_STATES[target])} before moving to "
                f"{target.value}, but it is in {self.state.value}"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    # ------------------------------------------------------------------ members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self.members:
            raise AssertionError(f"pending member {member_id} is already a member of {self.group_id}")
        self.pending_join_members.add(member_id)

    def _set_join_request(self, member: ClassicGroupMember, request_id: RequestId | None) -> None:
        if request_id is not None and not member.is_awaiting_join:
            self.num_awaiting_join += 1
        elif request_id is None and member.is_awaiting_join:
            self.num_awaiting_join -= 1
        member.join_request = request_id

    def add(self, member: ClassicGroupMember, join_request: RequestId | None = None) -> None:
        """Add *member* (whose protocols the group supports), parking *join_request*."""
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise AssertionError(f"static member {member.group_instance_id} is already in {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise AssertionError("the group and member's protocol type must be the same")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._set_join_request(member, join_request)
        self.pending_join_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        """Remove a member (or a pending member); a removed leader is replaced by the first member left."""
        removed = self.members.pop(member_id, None)
        if removed is not None:
            if removed.is_awaiting_join:
                self.num_awaiting_join -= 1
            if removed.group_instance_id is not None:
                self.static_members.pop(removed.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(
        self,
        member: ClassicGroupMember,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_request: RequestId | None,
    ) -> None:
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        self._set_join_request(member, join_request)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else elect the first member that did.

        False when there is no leader (empty group) or no member rejoined.
        """
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> ClassicGroupMember:
        """Give a static member a new member id; fences the old id's parked requests."""
        removed = self.members.pop(old_member_id)
        self.complete_join(removed, join_response(ErrorCode.fenced_instance_id, old_member_id))
        self.complete_sync(removed, sync_response(ErrorCode.fenced_instance_id))
        new_member = replace(removed, member_id=new_member_id, join_request=None, sync_request=None, is_new=False)
        self.members[new_member_id] = new_member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return new_member

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ClassicGroupMember:
        """The member *member_id*; raises UnknownMemberId or FencedInstanceId (Kafka's ``validateMember``)."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                raise UnknownMemberId(f"unknown group.instance.id {group_instance_id!r}")
            if existing != member_id:
                raise FencedInstanceId(
                    f"member {member_id!r} of instance {group_instance_id!r} is fenced by {existing!r}"
                )
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"unknown member id {member_id!r}")
        return member

    def not_yet_rejoined_members(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join_members

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout of the members (0 without members)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ------------------------------------------------------------------ protocols

    def _candidate_protocols(self) -> frozenset[str]:
        members = iter(self.members.values())
        candidates = frozenset(name for name, _ in next(members).protocols)
        for member in members:
            candidates &= {name for name, _ in member.protocols}
        return candidates

    def select_protocol(self) -> str:
        """The protocol every member supports with the most first-choice votes.

        Kafka breaks a tie by hash-map order; walgate by which protocol got its
        first vote first (members in join order), so the result is deterministic.
        """
        if not self.members:
            raise AssertionError(f"cannot select a protocol for the empty group {self.group_id}")
        candidates = self._candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            name = member.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def supports_protocols(self, protocol_type: str, protocol_names: set[str]) -> bool:
        """Whether a member with these protocols may join (Kafka's ``supportsProtocols``)."""
        if self.is_in_state(GroupState.EMPTY):
            return bool(protocol_type) and bool(protocol_names)
        if self.protocol_type != protocol_type:
            return False
        return any(all(name in {n for n, _ in m.protocols} for m in self.members.values()) for name in protocol_names)

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == PROTOCOL_TYPE

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """The union of the members' subscribed topics (Kafka's ``computeSubscribedTopics``)."""
        if self.protocol_type != PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        try:
            topics: set[str] = set()
            for member in self.members.values():
                topics |= subscribed_topics(member.metadata(self.protocol_name))
        except ConsumerProtocolError:
            return None
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Whether OffsetDelete must refuse *topic*; unknown subscriptions count as subscribed for consumers."""
        if self.subscribed_topics is None:
            return self.uses_consumer_protocol()
        return topic in self.subscribed_topics

    # ------------------------------------------------------------------ parked requests

    def complete_join(self, member: ClassicGroupMember, response: dict[str, Any]) -> bool:
        """Answer the member's parked JoinGroup, if any; True if there was one."""
        if member.join_request is None:
            return False
        self._outbox.append(Completion(member.join_request, response))
        self._set_join_request(member, None)
        return True

    def complete_sync(self, member: ClassicGroupMember, response: dict[str, Any]) -> bool:
        """Answer the member's parked SyncGroup, if any; True if there was one."""
        if member.sync_request is None:
            return False
        self._outbox.append(Completion(member.sync_request, response))
        member.sync_request = None
        return True

    # ------------------------------------------------------------------ generations

    def init_next_generation(self, now_ms: int) -> None:
        """Start the next generation: CompletingRebalance with members, Empty without."""
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_members(self) -> list[dict[str, Any]]:
        """The members as the leader's JoinGroup response lists them."""
        if self.state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE):
            raise AssertionError(f"no member metadata for group {self.group_id} in state {self.state.value}")
        return [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata(self.protocol_name),
            }
            for m in self.members.values()
        ]
