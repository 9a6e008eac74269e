"""One namespace of group ids over both group protocols.

A group id is either a classic group (:class:`ClassicGroups`: JoinGroup /
SyncGroup / Heartbeat, client-side assignors) or a consumer-protocol group
(:class:`ConsumerGroups`: KIP-848 ConsumerGroupHeartbeat, server-side
assignment). As in Kafka 4, an *empty* group of either type is converted
when the other protocol joins it; a group with members keeps its type and
refuses the other protocol (see :mod:`walgate.coordinator.consumer_group`).
Committed offsets belong to the group id, not to the type, so they survive
a conversion.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from walgate.coordinator.classic import ClassicGroups, Completion, ConsumerInfo
from walgate.coordinator.consumer_group import GROUP_TYPE as CONSUMER_GROUP_TYPE
from walgate.coordinator.consumer_group import UNIFORM_ASSIGNOR, ConsumerGroups
from walgate.coordinator.consumer_protocol import PROTOCOL_TYPE

__all__ = ["GroupCoordinator"]


class GroupCoordinator:
    """The classic and the consumer-protocol groups of this node (pure, on an injected clock)."""

    def __init__(self, classic: ClassicGroups | None = None, consumer: ConsumerGroups | None = None) -> None:
        self.classic = classic or ClassicGroups()
        self.consumer = consumer or ConsumerGroups()
        self.consumer._is_classic_group_in_use = self._classic_has_members

    def _classic_has_members(self, group_id: str) -> bool:
        group = self.classic.group(group_id)
        return group is not None and bool(group.members)

    # ------------------------------------------------------------------ time

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self.classic.next_deadline(), self.consumer.next_deadline()) if d is not None]
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> list[Completion]:
        self.consumer.tick(now_ms)
        return self.classic.tick(now_ms)

    # ------------------------------------------------------------------ joining

    def consumer_heartbeat(self, **kwargs: Any) -> dict[str, Any]:
        """ConsumerGroupHeartbeat (see :meth:`ConsumerGroups.heartbeat`); an empty classic group is taken over."""
        group_id = kwargs["group_id"]
        if kwargs["member_epoch"] == 0 and not self._classic_has_members(group_id):
            self.classic.drop_empty(group_id, kwargs["now_ms"])
        return self.consumer.heartbeat(**kwargs)

    def join(self, request_id: int, **kwargs: Any) -> list[Completion]:
        """JoinGroup (see :meth:`ClassicGroups.join`); an empty consumer group is taken over."""
        group_id = kwargs["group_id"]
        if self.consumer.has_members(group_id):
            return [Completion(request_id, _not_classic_join(group_id))]
        self.consumer.drop_if_empty(group_id)
        return self.classic.join(request_id, **kwargs)

    # ------------------------------------------------------------------ admin

    def list_groups(
        self, *, states_filter: Iterable[str] = (), types_filter: Iterable[str] = (), offset_groups: Iterable[str] = ()
    ) -> list[dict[str, Any]]:
        """ListGroups over both types (``group_type`` ``classic`` / ``consumer``), filters case-insensitive."""
        consumer_ids = {g for g, _ in self.consumer.list_groups()}
        listed = self.classic.list_groups(
            states_filter=states_filter,
            types_filter=types_filter,
            offset_groups=[g for g in offset_groups if g not in consumer_ids],
        )
        states = {s.strip().lower() for s in states_filter}
        types = {t.strip().lower() for t in types_filter}
        if not types or CONSUMER_GROUP_TYPE in types:
            listed += [
                {"group_id": g, "protocol_type": PROTOCOL_TYPE, "group_state": s, "group_type": CONSUMER_GROUP_TYPE}
                for g, s in self.consumer.list_groups()
                if not states or s.lower() in states
            ]
        return listed

    def describe(
        self, group_ids: Iterable[str], *, has_offsets: Callable[[str], bool], report_not_found: bool
    ) -> list[dict[str, Any]]:
        """DescribeGroups: consumer-protocol groups are described as Kafka 4 does for old admin clients."""
        described = []
        for group_id in group_ids:
            if self.consumer.has_group(group_id):
                described.append(self.consumer.describe_as_classic(group_id, UNIFORM_ASSIGNOR))
            else:
                described += self.classic.describe(
                    [group_id], has_offsets=has_offsets, report_not_found=report_not_found
                )
        return described

    def delete(self, group_ids: Iterable[str], *, has_offsets: Callable[[str], bool], now_ms: int) -> list[dict[str, Any]]:
        """DeleteGroups over both types: ``{group_id, error_code}`` per distinct id."""
        results = []
        for group_id in dict.fromkeys(group_ids):
            if self.consumer.has_group(group_id):
                results.append({"group_id": group_id, "error_code": self.consumer.delete(group_id)})
            else:
                results += self.classic.delete([group_id], has_offsets=has_offsets, now_ms=now_ms)
        return results

    def consumers(self) -> list[ConsumerInfo]:
        """Every member of every group, for ``SHOW CONSUMERS``."""
        return self.classic.consumers() + self.consumer.consumers()


def _not_classic_join(group_id: str) -> dict[str, Any]:
    """Kafka 4's answer to a JoinGroup for a consumer-protocol group that has members."""
    return {
        "error_code": ErrorCode.group_id_not_found,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": "",
        "members": [],
    }
