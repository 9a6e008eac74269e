"""One namespace of group ids over both group protocols.

A group id is either a classic group (:class:`ClassicGroups`: JoinGroup /
SyncGroup / Heartbeat, client-side assignors) or a consumer-protocol group
(:class:`ConsumerGroups`: KIP-848 ConsumerGroupHeartbeat, server-side
assignment). As in Kafka 4, an *empty* group of either type is converted
when the other protocol joins it. A classic group with members is upgraded
when a consumer-protocol member joins (Kafka 4's default ``bidirectional``
migration policy) if its members use the consumer protocol type; classic
members joining a consumer group become its classic members, assigned by the
server. Decision: a consumer group is not downgraded back to classic when its
last consumer-protocol member leaves: its classic members keep being served
as such (clients cannot tell; only the assignor differs).
Committed offsets belong to the group id, not to the type, so they survive
a conversion.

Group records (:mod:`~walgate.coordinator.group_records`): every call that may
change a group notes its id; :meth:`GroupCoordinator.take_records` turns the
noted groups whose recorded value changed into ``(group id, value)`` records
(None: the group is gone), which the caller writes durably before it delivers
the call's responses, then reports with :meth:`GroupCoordinator.records_written`.
Records not reported written are taken again by the next call, so what is on
disk converges on what is in memory. :meth:`GroupCoordinator.load` rebuilds the
groups from the values at start.

Group cleanup (Kafka's ``cleanupGroupMetadata``, every
``offsets.retention.check.interval.ms``): :meth:`GroupCoordinator.tick` drops
the groups of either type that have no members and no committed offsets, so
short-lived consumers do not leave groups behind. Kafka drops an Empty group
once its offsets have expired; walgate keeps committed offsets (they are the
TDengine subscription's progress), so a group with offsets stays.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from walgate.coordinator.classic import ClassicGroups
from walgate.coordinator.classic_model import Completion, join_response
from walgate.coordinator.consumer_group import ConsumerGroups
from walgate.coordinator.consumer_protocol import PROTOCOL_TYPE
from walgate.coordinator.group_log import log
from walgate.coordinator.group_records import group_value
from walgate.coordinator.snapshots import CONSUMER_GROUP_TYPE, ConsumerInfo, GroupStats

__all__ = ["CLEANUP_INTERVAL_MS", "GroupCoordinator"]

CLEANUP_INTERVAL_MS: Final = 600_000
"""Kafka's ``offsets.retention.check.interval.ms`` default: how often empty groups are looked for."""


class GroupCoordinator:
    """The classic and the consumer-protocol groups of this node (pure, on an injected clock).

    *consumer* must be built with ``is_classic_group_in_use=classic.has_members`` (so that a KIP-848 join of an id
    in use by a classic group is refused); without *consumer*, one is built so.
    """

    def __init__(
        self,
        classic: ClassicGroups | None = None,
        consumer: ConsumerGroups | None = None,
        *,
        cleanup_interval_ms: int = CLEANUP_INTERVAL_MS,
        now_ms: int = 0,
    ) -> None:
        self.classic = classic or ClassicGroups()
        self.consumer = consumer or ConsumerGroups(is_classic_group_in_use=self.classic.has_members)
        self.cleanup_interval_ms = cleanup_interval_ms
        self._next_cleanup_ms = now_ms + cleanup_interval_ms
        self._recorded: dict[str, Any] = {}  # group id -> the value last written for it
        self._noted: set[str] = set()  # group ids that may differ from their recorded value

    # ------------------------------------------------------------------ records

    def load(self, values: Mapping[str, Any], now_ms: int) -> list[tuple[str, str]]:
        """Rebuild the groups of their recorded *values* (group id -> value) at start, their members' sessions
        starting at *now_ms*; returns (group id, reason) of each value that does not rebuild: that group is not
        loaded (its members rejoin) and its record is deleted by the next :meth:`take_records`."""
        failed = []
        for group_id, value in values.items():
            self._recorded[group_id] = value
            try:
                if isinstance(value, Mapping) and value.get("type") == CONSUMER_GROUP_TYPE:
                    self.consumer.restore(group_id, value, now_ms)
                else:
                    self.classic.restore(group_id, value, now_ms)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                failed.append((group_id, f"{type(exc).__name__}: {exc}"))
                self._noted.add(group_id)
        return failed

    def recorded(self) -> list[str]:
        """The ids of the groups with a recorded value."""
        return list(self._recorded)

    def unload(self, group_ids: Iterable[str]) -> None:
        """Forget *group_ids*: their coordinator partition is led by another node now (Kafka's
        ``onResignation``); their records stay in the partition, for the node that loads it next. Their parked
        requests are the caller's to answer; their timers find them gone."""
        for group_id in group_ids:
            self.classic.forget(group_id)
            self.consumer.forget(group_id)
            self._recorded.pop(group_id, None)
            self._noted.discard(group_id)

    def _group_value(self, group_id: str) -> tuple[bool, Any]:
        """(whether the group has a value to record now, that value: None when the group is gone)."""
        group = self.consumer.group(group_id) or self.classic.group(group_id)
        if group is None:
            return True, None
        value = group_value(group)
        return value is not None, value

    def take_records(self) -> list[tuple[str, Any]]:
        """The (group id, value) records of the noted groups whose value differs from the recorded one (value None:
        delete the group's record). Write them, then call :meth:`records_written`; unwritten ones come back."""
        records = []
        for group_id in sorted(self._noted):
            has_value, value = self._group_value(group_id)
            if not has_value or value == self._recorded.get(group_id):
                self._noted.discard(group_id)
            else:
                records.append((group_id, value))
        return records

    def records_written(self, records: Iterable[tuple[str, Any]]) -> None:
        """*records* (from :meth:`take_records`) are durable: they are the recorded values now."""
        for group_id, value in records:
            if value is None:
                self._recorded.pop(group_id, None)
            else:
                self._recorded[group_id] = value
            self._noted.discard(group_id)

    def records_unwritten(self, records: Iterable[tuple[str, Any]]) -> None:
        """*records*, marked written, were refused after all (a replicated coordinator's, whose write is waited for
        after :meth:`records_written`): their groups are taken again by the next :meth:`take_records`."""
        for group_id, _ in records:
            self._recorded.pop(group_id, None)
            self._noted.add(group_id)

    def _note_all(self) -> None:
        self._noted.update(self.classic.group_ids(), self.consumer.group_ids(), self._recorded)

    # ------------------------------------------------------------------ time

    def next_deadline(self) -> int:
        """When :meth:`tick` next has something to do: a group timer or the next cleanup."""
        deadlines = (self.classic.next_deadline(), self.consumer.next_deadline(), self._next_cleanup_ms)
        return min(d for d in deadlines if d is not None)

    def tick(self, now_ms: int, *, offset_groups: Callable[[], Collection[str]] = frozenset) -> list[Completion]:
        """Fire the timers due at *now_ms* and, when due, the cleanup; the parked requests answered.

        *offset_groups* returns the ids of the groups with committed offsets; it is called only by a cleanup.
        """
        self.consumer.tick(now_ms)
        completions = self.classic.tick(now_ms)
        self._note_all()
        if now_ms >= self._next_cleanup_ms:
            self._next_cleanup_ms = now_ms + self.cleanup_interval_ms
            self.remove_empty_groups(offset_groups().__contains__, now_ms)
        return completions

    def remove_empty_groups(self, has_offsets: Callable[[str], bool], now_ms: int) -> list[str]:
        """Drop the groups of either type without members or committed offsets; their ids."""
        removed = self.classic.remove_empty_groups(has_offsets=has_offsets, now_ms=now_ms)
        removed += self.consumer.remove_empty_groups(has_offsets=has_offsets)
        self._noted.update(removed)
        if removed:
            log.info("removed %d empty group(s) without committed offsets: %s", len(removed),
                     ", ".join(map(repr, removed[:20])) + (", ..." if len(removed) > 20 else ""))
        return removed

    # ------------------------------------------------------------------ membership

    def consumer_heartbeat(self, **kwargs: Any) -> tuple[dict[str, Any], list[Completion]]:
        """ConsumerGroupHeartbeat (see :meth:`ConsumerGroups.heartbeat`) and the parked requests it answered.

        A join (epoch 0) to a classic group takes it over: an empty one is
        dropped, one with members of the consumer protocol type is upgraded (its
        members become classic members of the consumer group and their parked
        JoinGroup / SyncGroup get REBALANCE_IN_PROGRESS, so they rejoin). Other
        classic groups refuse (GROUP_ID_NOT_FOUND).
        """
        group_id, now_ms = kwargs["group_id"], kwargs["now_ms"]
        self._noted.add(group_id)
        completions: list[Completion] = []
        classic = self.classic.group(group_id)
        if kwargs["member_epoch"] == 0 and classic is not None and not self.consumer.has_group(group_id):
            if not classic.members:
                self.classic.drop_empty(group_id, now_ms)
            elif classic.protocol_type == PROTOCOL_TYPE:
                generation, members, completions = self.classic.release_for_upgrade(group_id, now_ms)
                self.consumer.adopt(group_id, generation, members, now_ms)
        return self.consumer.heartbeat(**kwargs), completions

    def join(
        self, request_id: int, *, topic_partitions: Callable[[str], int | None], **kwargs: Any
    ) -> list[Completion]:
        """JoinGroup: to a consumer group with members as one of its classic members (answered at once),
        else to the classic group (parked, see :meth:`ClassicGroups.join`; an empty consumer group is dropped)."""
        group_id = kwargs["group_id"]
        self._noted.add(group_id)
        if not self.consumer.has_members(group_id):
            self.consumer.drop_if_empty(group_id)
            return self.classic.join(request_id, **kwargs)
        session = kwargs["session_timeout_ms"]
        if not self.classic.min_session_timeout_ms <= session <= self.classic.max_session_timeout_ms:
            response = join_response(ErrorCode.invalid_session_timeout, kwargs["member_id"])
        else:
            response = self.consumer.classic_join(
                group_id=group_id,
                member_id=kwargs["member_id"],
                instance_id=kwargs["group_instance_id"],
                protocol_type=kwargs["protocol_type"],
                protocols=kwargs["protocols"],
                session_timeout_ms=session,
                rebalance_timeout_ms=kwargs["rebalance_timeout_ms"],
                require_known_member_id=kwargs["require_known_member_id"],
                topic_partitions=topic_partitions,
                client_id=kwargs["client_id"],
                client_host=kwargs["client_host"],
                now_ms=kwargs["now_ms"],
            )
        return [Completion(request_id, response)]

    def sync(self, request_id: int, **kwargs: Any) -> list[Completion]:
        """SyncGroup: the server's assignment for a consumer group's classic member, else the classic protocol."""
        self._noted.add(kwargs["group_id"])
        if not self.consumer.has_group(kwargs["group_id"]):
            return self.classic.sync(request_id, **kwargs)
        return [Completion(request_id, self.consumer.classic_sync(
            group_id=kwargs["group_id"],
            member_id=kwargs["member_id"],
            instance_id=kwargs["group_instance_id"],
            generation_id=kwargs["generation_id"],
            protocol_type=kwargs["protocol_type"],
            protocol_name=kwargs["protocol_name"],
            now_ms=kwargs["now_ms"],
        ))]

    def heartbeat(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None, now_ms: int
    ) -> ErrorCode:
        """Heartbeat: of a consumer group's classic member, else the classic protocol's (its error code)."""
        if self.consumer.has_group(group_id):
            return self.consumer.classic_heartbeat(group_id=group_id, member_id=member_id,
                                                   instance_id=group_instance_id, generation_id=generation_id,
                                                   now_ms=now_ms)
        return self.classic.heartbeat(group_id=group_id, generation_id=generation_id, member_id=member_id,
                                      group_instance_id=group_instance_id, now_ms=now_ms)

    def leave(
        self, *, group_id: str, members: Sequence[tuple[str, str | None]], now_ms: int
    ) -> tuple[dict[str, Any], list[Completion]]:
        """LeaveGroup of (member id, instance id) pairs: the response and the parked requests it answered."""
        self._noted.add(group_id)
        if self.consumer.has_group(group_id):
            return self.consumer.classic_leave(group_id=group_id, members=members), []
        return self.classic.leave(group_id=group_id, members=members, now_ms=now_ms)

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
                described.append(self.consumer.describe_as_classic(group_id))
            else:
                described += self.classic.describe(
                    [group_id], has_offsets=has_offsets, report_not_found=report_not_found
                )
        return described

    def has_group(self, group_id: str) -> bool:
        """Whether *group_id* is a classic or consumer group in memory here, with or without members (a group known
        only by its committed offsets is not: the offset store knows those)."""
        return self.consumer.has_group(group_id) or self.classic.group(group_id) is not None

    def delete(self, group_ids: Iterable[str], *, has_offsets: Callable[[str], bool], now_ms: int) -> list[dict[str, Any]]:
        """DeleteGroups over both types: ``{group_id, error_code}`` per distinct id."""
        results = []
        for group_id in dict.fromkeys(group_ids):
            self._noted.add(group_id)
            if self.consumer.has_group(group_id):
                results.append({"group_id": group_id, "error_code": self.consumer.delete(group_id)})
            else:
                results += self.classic.delete([group_id], has_offsets=has_offsets, now_ms=now_ms)
        return results

    def consumers(self) -> list[ConsumerInfo]:
        """Every member of every group, for ``SHOW CONSUMERS``."""
        return self.classic.consumers() + self.consumer.consumers()

    def group_stats(self) -> list[GroupStats]:
        """Every group this node has in memory, as metrics report it: classic groups, then consumer groups.

        Groups known only by their committed offsets (Kafka's "simple" groups) are not listed: they have no state,
        members or rebalances here.
        """
        return self.classic.stats() + self.consumer.stats()
