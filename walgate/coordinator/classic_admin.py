"""Reading and administering classic groups: listing, describing, deleting, cleanup and the upgrade hand-over.

The admin half of :class:`~walgate.coordinator.classic.ClassicGroups`: DescribeGroups, ListGroups, DeleteGroups,
the periodic cleanup of Empty groups, handing a group with members over to the consumer protocol (Kafka's online
upgrade, :meth:`ClassicGroupAdmin.release_for_upgrade`), and the snapshots of ``SHOW CONSUMERS`` and metrics.
DeleteGroups and the cleanup drop only Empty groups; the upgrade drops a group with members after answering their
parked requests. A dropped group moves to Dead and its timers are cancelled, so nothing of it fires later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from walgate.coordinator.classic_model import (
    Completion,
    GroupState,
    join_response,
    sync_response,
)
from walgate.coordinator.classic_rebalance import ClassicRebalance
from walgate.coordinator.consumer_protocol import PROTOCOL_TYPE, assigned_partitions
from walgate.coordinator.errors import (
    ConsumerProtocolError,
    GroupError,
    GroupIdNotFound,
    NonEmptyGroup,
)
from walgate.coordinator.snapshots import CLASSIC_GROUP_TYPE, ConsumerInfo, GroupStats

__all__ = ["AdoptedMember", "ClassicGroupAdmin"]


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



class ClassicGroupAdmin(ClassicRebalance):
    """Listing, describing, deleting and handing over classic groups (a part of
    :class:`~walgate.coordinator.classic.ClassicGroups`)."""

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
        if types and CLASSIC_GROUP_TYPE not in types:
            return []
        listed = [(group_id, group.protocol_type or "", group.state.value) for group_id, group in self._groups.items()]
        listed += [(g, "", GroupState.EMPTY.value) for g in dict.fromkeys(offset_groups) if g not in self._groups]
        return [
            {"group_id": g, "protocol_type": p, "group_state": s, "group_type": CLASSIC_GROUP_TYPE}
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
        (that member's session timer removes it if it never comes back, and a later cleanup drops the group).
        """
        removed = [
            group_id
            for group_id, group in self._groups.items()
            if group.is_in_state(GroupState.EMPTY) and not group.pending_join_members and not has_offsets(group_id)
        ]
        for group_id in removed:
            self._remove_group(group_id, now_ms)
        return removed

    # ------------------------------------------------------------------ SHOW CONSUMERS, metrics

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

    def stats(self) -> list[GroupStats]:
        """Every group as metrics report it (``rebalances``: the generation)."""
        return [
            GroupStats(group_id, CLASSIC_GROUP_TYPE, group.state.value, len(group.members), group.generation_id)
            for group_id, group in self._groups.items()
        ]


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
