"""Reading and administering consumer groups: listing, describing, deleting, and offset-request checks.

The admin half of :class:`~walgate.coordinator.consumer_group.ConsumerGroups`: ListGroups, DescribeGroups (in the
classic format, as Kafka 4 shows consumer groups to old admin clients), ConsumerGroupDescribe, DeleteGroups, the
member and epoch checks of OffsetCommit / OffsetFetch (Kafka's ``ConsumerGroup.validateOffsetCommit`` /
``validateOffsetFetch``), the periodic cleanup of empty groups, and the snapshots of ``SHOW CONSUMERS`` and
metrics. Nothing here changes a group's members or epochs; deleting and cleanup only drop groups without members.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from kio.schema.errors import ErrorCode

from walgate.coordinator.consumer_membership import (
    ConsumerMembership,
    response_assignment,
)
from walgate.coordinator.consumer_protocol import (
    PROTOCOL_TYPE,
    encode_assignment,
    encode_subscription,
)
from walgate.coordinator.snapshots import CONSUMER_GROUP_TYPE, ConsumerInfo, GroupStats
from walgate.coordinator.uniform_assignor import UNIFORM_ASSIGNOR

__all__ = ["CommitCheck", "ConsumerGroupAdmin", "accept_commit", "refuse_commit"]

CommitCheck = Callable[[str, int], ErrorCode | None]
"""The error refusing an OffsetCommit of one (topic, partition), or None to accept it."""


def accept_commit(topic: str, partition: int) -> ErrorCode | None:
    """A :data:`CommitCheck` that accepts every partition."""
    return None


def refuse_commit(error: ErrorCode) -> CommitCheck:
    """A :data:`CommitCheck` that refuses every partition with *error*."""
    return lambda topic, partition: error

_CLASSIC_MEMBER: Final = 0
_CONSUMER_MEMBER: Final = 1
"""ConsumerGroupDescribe v1's ``member_type`` of classic and of KIP-848 members."""


class ConsumerGroupAdmin(ConsumerMembership):
    """Listing, describing and deleting consumer groups (a part of
    :class:`~walgate.coordinator.consumer_group.ConsumerGroups`)."""

    def has_group(self, group_id: str) -> bool:
        """Whether *group_id* is a consumer group of this node (with or without members)."""
        return group_id in self._groups

    def has_members(self, group_id: str) -> bool:
        """Whether *group_id* is a consumer group of this node with members."""
        group = self._groups.get(group_id)
        return group is not None and bool(group.members)

    def drop_if_empty(self, group_id: str) -> None:
        """Forget an Empty group (its id is taken over by a classic group: Kafka converts empty groups freely)."""
        group = self._groups.get(group_id)
        if group is not None and not group.members:
            del self._groups[group_id]

    def remove_empty_groups(self, *, has_offsets: Callable[[str], bool]) -> list[str]:
        """Drop groups without members or committed offsets (Kafka's periodic group cleanup); their ids."""
        removed = [group_id for group_id, group in self._groups.items() if not group.members and not has_offsets(group_id)]
        for group_id in removed:
            del self._groups[group_id]
        return removed

    def offset_commit_check(
        self, group_id: str, member_id: str, member_epoch: int, *, consumer_protocol_version: bool
    ) -> CommitCheck:
        """Kafka's ``ConsumerGroup.validateOffsetCommit`` (non-transactional) for a group this object has.

        A commit without a member epoch is accepted while the group is empty (an
        admin or a simple consumer); otherwise the member must exist. A classic
        member commits at its generation (ILLEGAL_GENERATION otherwise). A KIP-848
        member ahead of its epoch gets FENCED_MEMBER_EPOCH; one behind it (its
        heartbeat answer with the new epoch crossed the commit) may commit the
        partitions it already had at the epoch it sent, and gets
        STALE_MEMBER_EPOCH for the others (KIP-1251's assignment epochs). Only
        OffsetCommit v9+ (*consumer_protocol_version*) can carry a member epoch:
        older versions from a member get UNSUPPORTED_VERSION.
        """
        group = self._groups[group_id]
        if member_epoch < 0 and not group.members:
            return accept_commit
        member = group.members.get(member_id)
        if member is None:
            return refuse_commit(ErrorCode.unknown_member_id)
        if member.classic is not None:  # a classic member commits with its generation: the member epoch
            return accept_commit if member_epoch == member.member_epoch else refuse_commit(ErrorCode.illegal_generation)
        if not consumer_protocol_version:
            return refuse_commit(ErrorCode.unsupported_version)
        if member_epoch > member.member_epoch:
            return refuse_commit(ErrorCode.fenced_member_epoch)
        if member_epoch == member.member_epoch:
            return accept_commit
        epochs = dict(member.assignment_epochs)

        def had_it_then(topic: str, partition: int) -> ErrorCode | None:
            epoch = epochs.get((topic, partition))
            return None if epoch is not None and epoch <= member_epoch else ErrorCode.stale_member_epoch

        return had_it_then

    def offset_fetch_error(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """Kafka's ``ConsumerGroup.validateOffsetFetch``: an admin (no member id, epoch -1) or a current member."""
        group = self._groups[group_id]
        if member_epoch < 0 and member_id is None:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        return _member_epoch_error(member_epoch, member.member_epoch)

    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every group, for ListGroups."""
        return [(group_id, group.state.value) for group_id, group in self._groups.items()]

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups for a group this object has: NON_EMPTY_GROUP while it has members."""
        if self._groups[group_id].members:
            return ErrorCode.non_empty_group
        del self._groups[group_id]
        return ErrorCode.none

    # ------------------------------------------------------------------ describe, SHOW CONSUMERS, metrics

    def describe(self, group_ids: Iterable[str]) -> list[dict[str, Any]]:
        """ConsumerGroupDescribe: one ``DescribedGroup`` dict per id (kio field names, topics by name)."""
        described: list[dict[str, Any]] = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group is None:
                message = (
                    f"Group {group_id} is not a consumer group."
                    if self._is_classic_group_in_use(group_id)
                    else f"Group {group_id} not found."
                )
                described.append({
                    "error_code": ErrorCode.group_id_not_found,
                    "error_message": message,
                    "group_id": group_id,
                    "group_state": "",
                    "group_epoch": 0,
                    "assignment_epoch": 0,
                    "assignor_name": "",
                    "members": [],
                })
                continue
            described.append({
                "error_code": ErrorCode.none,
                "error_message": None,
                "group_id": group_id,
                "group_state": group.state.value,
                "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": UNIFORM_ASSIGNOR,
                "members": [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": list(m.subscribed_topic_names),
                        "subscribed_topic_regex": None,
                        "assignment": response_assignment(m.assigned),
                        "target_assignment": response_assignment(group.target.get(m.member_id, {})),
                        "member_type": _CLASSIC_MEMBER if m.classic is not None else _CONSUMER_MEMBER,
                    }
                    for m in group.members.values()
                ],
            })
        return described

    def describe_as_classic(self, group_id: str) -> dict[str, Any]:
        """DescribeGroups' view of a group this object has (Kafka's ``ConsumerGroup.asDescribedGroup``).

        Protocol type ``consumer``, the server assignor (``uniform``) as protocol data, each
        member's subscription and current assignment in the consumer-protocol bytes
        classic tools parse.
        """
        group = self._groups[group_id]
        return {
            "error_code": ErrorCode.none,
            "error_message": None,
            "group_id": group_id,
            "group_state": group.state.value,
            "protocol_type": PROTOCOL_TYPE,
            "protocol_data": UNIFORM_ASSIGNOR,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": encode_subscription(m.subscribed_topic_names),
                    "member_assignment": encode_assignment({t: sorted(ps) for t, ps in sorted(m.assigned.items())}),
                }
                for m in group.members.values()
            ],
        }

    def consumers(self) -> list[ConsumerInfo]:
        """Every member of every group, for ``SHOW CONSUMERS`` (``generation_id`` is the group epoch)."""
        infos: list[ConsumerInfo] = []
        for group in self._groups.values():
            state = group.state.value
            for m in group.members.values():
                ready = not m.pending_revocation and m.assigned == group.target.get(m.member_id, {})
                infos.append(
                    ConsumerInfo(
                        group_id=group.group_id,
                        group_state=state,
                        generation_id=group.group_epoch,
                        member_id=m.member_id,
                        group_instance_id=m.instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        state="ready" if ready else "rebalancing",
                        assignment={t: tuple(sorted(ps)) for t, ps in sorted(m.assigned.items())},
                        last_heartbeat_ms=m.last_heartbeat_ms,
                        session_timeout_ms=self.member_timeouts(group.group_id)[0] if m.classic is None else m.classic.session_timeout_ms,
                    )
                )
        return infos

    def stats(self) -> list[GroupStats]:
        """Every group as metrics report it (``rebalances``: the group epoch)."""
        return [
            GroupStats(group_id, CONSUMER_GROUP_TYPE, group.state.value, len(group.members), group.group_epoch)
            for group_id, group in self._groups.items()
        ]


def _member_epoch_error(received: int, expected: int) -> ErrorCode | None:
    """Kafka's ``validateMemberEpoch``."""
    if received > expected:
        return ErrorCode.fenced_member_epoch
    if received < expected:
        return ErrorCode.stale_member_epoch
    return None
