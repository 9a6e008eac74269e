"""Consumer groups: membership, generations, rebalance, sessions, committed offsets.

A pure, synchronous state machine with an injected clock (``now_ms`` in every
call, timers fired by :meth:`ClassicGroups.tick`); the gateway wires it to the
network. See :mod:`walgate.coordinator.classic` (the protocol),
:mod:`walgate.coordinator.group` (states, transition table, members) and
:mod:`walgate.coordinator.offsets` (commits and the offset store interface).
"""

from __future__ import annotations

from walgate.coordinator.classic import GROUP_TYPE, ClassicGroups, ConsumerInfo
from walgate.coordinator.consumer_protocol import PROTOCOL_TYPE, assigned_partitions, subscribed_topics
from walgate.coordinator.errors import (
    ERROR_CODES,
    ConsumerProtocolError,
    FencedInstanceId,
    GroupError,
    GroupIdNotFound,
    IllegalGeneration,
    NonEmptyGroup,
    RebalanceInProgress,
    UnknownMemberId,
)
from walgate.coordinator.group import (
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    ClassicGroupMember,
    Completion,
    GroupState,
    RequestId,
)
from walgate.coordinator.offsets import (
    OFFSET_METADATA_MAX_SIZE,
    CommittedOffset,
    GroupDeletePlan,
    OffsetCommitPlan,
    OffsetCommitRecord,
    OffsetDeletePlan,
    OffsetStore,
    PartitionCommit,
    commit_offsets,
    delete_groups,
    delete_offsets,
    fetch_offsets,
    validate_offset_commit,
)
from walgate.coordinator.timer import KeyedTimer

__all__ = [
    "ClassicGroups",
    "ClassicGroup",
    "ClassicGroupMember",
    "Completion",
    "ConsumerInfo",
    "GroupState",
    "VALID_PREVIOUS_STATES",
    "RequestId",
    "GROUP_TYPE",
    "PROTOCOL_TYPE",
    "subscribed_topics",
    "assigned_partitions",
    "KeyedTimer",
    "OFFSET_METADATA_MAX_SIZE",
    "CommittedOffset",
    "OffsetCommitRecord",
    "OffsetStore",
    "PartitionCommit",
    "OffsetCommitPlan",
    "OffsetDeletePlan",
    "GroupDeletePlan",
    "validate_offset_commit",
    "commit_offsets",
    "fetch_offsets",
    "delete_offsets",
    "delete_groups",
    "ERROR_CODES",
    "GroupError",
    "UnknownMemberId",
    "FencedInstanceId",
    "IllegalGeneration",
    "RebalanceInProgress",
    "GroupIdNotFound",
    "NonEmptyGroup",
    "ConsumerProtocolError",
]
