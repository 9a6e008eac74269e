"""Domain errors of the group coordinator, and the Kafka error code each one means.

The classic protocol and the offset rules validate the way Kafka's group
coordinator does: a check raises, the operation catches it and answers with the
error code. None of these escape the public methods of
:class:`~walgate.coordinator.ClassicGroups`,
:class:`~walgate.coordinator.GroupCoordinator` or
:mod:`walgate.coordinator.offsets` (but
:func:`~walgate.coordinator.offsets.validate_offset_commit`, which is that
check); their responses already carry the code. KIP-848 requests refuse with a
code and a message, which their responses carry too, through
:class:`~walgate.coordinator.consumer_membership.HeartbeatError`.

    GroupError                  base; ``error_code`` is the Kafka error it maps to
    ├── UnknownMemberId         UNKNOWN_MEMBER_ID (25): no such member / instance id
    ├── FencedInstanceId        FENCED_INSTANCE_ID (82): instance id now held by another member id
    ├── IllegalGeneration       ILLEGAL_GENERATION (22): request from another generation
    ├── RebalanceInProgress     REBALANCE_IN_PROGRESS (27): commit while awaiting the assignment
    ├── GroupIdNotFound         GROUP_ID_NOT_FOUND (69): no such group
    ├── NonEmptyGroup           NON_EMPTY_GROUP (68): group still has members
    ├── GroupNotRecorded        COORDINATOR_NOT_AVAILABLE (15): the group's new state could not be written durably
    │                           (raised by the gateway, which writes the coordinator's group records)
    └── NotCoordinatorNow       NOT_COORDINATOR (16): this node stopped coordinating the group while its request
                                was parked (its coordinator partition's leadership moved)

    ConsumerProtocolError       embedded consumer-protocol bytes that do not parse (a ValueError)
    AckError                    (share_partition.py) a share acknowledgement the partition's state refuses:
                                INVALID_RECORD_STATE

:data:`ERROR_CODES` is this domain's table (exception class -> Kafka error code), merged with the other domains' at
the gateway's edge (``gateway/kafka/handlers/common.py``). :class:`~walgate.coordinator.consumer_membership.HeartbeatError`
is not in it: it carries its code per instance and never leaves the request that raised it.
"""

from __future__ import annotations

from typing import ClassVar, Final

from kio.schema.errors import ErrorCode

from walgate.coordinator.share_partition import AckError

__all__ = [
    "ERROR_CODES",
    "ConsumerProtocolError",
    "FencedInstanceId",
    "GroupError",
    "GroupIdNotFound",
    "GroupNotRecorded",
    "IllegalGeneration",
    "NonEmptyGroup",
    "RebalanceInProgress",
    "UnknownMemberId",
]


class GroupError(Exception):
    """A request the group's state refuses; ``error_code`` is the Kafka answer."""

    error_code: ClassVar[ErrorCode] = ErrorCode.unknown_server_error


class UnknownMemberId(GroupError):
    error_code = ErrorCode.unknown_member_id


class FencedInstanceId(GroupError):
    error_code = ErrorCode.fenced_instance_id


class IllegalGeneration(GroupError):
    error_code = ErrorCode.illegal_generation


class RebalanceInProgress(GroupError):
    error_code = ErrorCode.rebalance_in_progress


class GroupIdNotFound(GroupError):
    error_code = ErrorCode.group_id_not_found


class NonEmptyGroup(GroupError):
    error_code = ErrorCode.non_empty_group


class GroupNotRecorded(GroupError):
    """The disk refused the group records of a request: nothing it changed is acknowledged (Kafka answers a failed
    append of group metadata with COORDINATOR_NOT_AVAILABLE; clients find the coordinator again and retry)."""

    error_code = ErrorCode.coordinator_not_available


class NotCoordinatorNow(GroupError):
    """This node no longer coordinates the group of a parked JoinGroup / SyncGroup: its coordinator partition is led
    elsewhere now (Kafka answers such requests NOT_COORDINATOR as it unloads the group; clients find the new
    coordinator)."""

    error_code = ErrorCode.not_coordinator


class ConsumerProtocolError(ValueError):
    """ConsumerProtocolSubscription / ConsumerProtocolAssignment bytes that do not parse."""


_GROUP_ERRORS: Final = (GroupError, UnknownMemberId, FencedInstanceId, IllegalGeneration, RebalanceInProgress,
                        GroupIdNotFound, NonEmptyGroup, GroupNotRecorded, NotCoordinatorNow)

ERROR_CODES: Final[dict[type[BaseException], ErrorCode]] = {
    **{cls: cls.error_code for cls in _GROUP_ERRORS},  # each the Kafka error it names (the base, never raised: unknown)
    ConsumerProtocolError: ErrorCode.inconsistent_group_protocol,  # as the coordinator answers one in a join
    # a refused share acknowledgement (INVALID_REQUEST instead when it says so: ShareCoordinator.acknowledge answers it)
    AckError: ErrorCode.invalid_record_state,
}
