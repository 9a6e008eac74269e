"""A fake-clock harness around ClassicGroups, an in-memory OffsetStore, consumer-protocol bytes built with kio."""

from __future__ import annotations

import io
import itertools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from kio.schema.consumer_protocol_assignment.v1 import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v1.data import TopicPartition as AssignedTopic
from kio.schema.consumer_protocol_subscription.v1 import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v1.data import TopicPartition as OwnedTopic
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i32

from walgate.coordinator import ClassicGroup, ClassicGroups, CommittedOffset, OffsetCommitRecord


def sub(*topics: str, owned: Mapping[str, Sequence[int]] | None = None, version: int = 1) -> bytes:
    """ConsumerProtocolSubscription bytes (int16 version + kio's v1 encoding)."""
    buf = io.BytesIO()
    entity_writer(ConsumerProtocolSubscription)(
        buf,
        ConsumerProtocolSubscription(
            topics=topics,
            user_data=None,
            owned_partitions=tuple(
                OwnedTopic(topic=t, partitions=tuple(i32(p) for p in ps)) for t, ps in (owned or {}).items()
            ),
        ),
    )
    return version.to_bytes(2, "big", signed=True) + buf.getvalue()


def asg(partitions: Mapping[str, Sequence[int]], version: int = 1) -> bytes:
    """ConsumerProtocolAssignment bytes (int16 version + kio's v1 encoding)."""
    buf = io.BytesIO()
    entity_writer(ConsumerProtocolAssignment)(
        buf,
        ConsumerProtocolAssignment(
            assigned_partitions=tuple(
                AssignedTopic(topic=t, partitions=tuple(i32(p) for p in ps)) for t, ps in partitions.items()
            ),
            user_data=None,
        ),
    )
    return version.to_bytes(2, "big", signed=True) + buf.getvalue()


SUB_T = sub("t")
RANGE = (("range", SUB_T),)


class Harness:
    """ClassicGroups on a fake clock (plain ints); answers of requests collected by request id.

    Member ids are ``<client or instance id>-<n>`` with n counting 1, 2, 3, ...
    """

    def __init__(self, **config: Any) -> None:
        counter = itertools.count(1)
        self.groups = ClassicGroups(member_id_suffix=lambda: str(next(counter)), **config)
        self.now = 0
        self.answers: dict[Hashable, dict[str, Any]] = {}
        self._ids = itertools.count(1)

    def _collect(self, completions: list[Any]) -> None:
        for completion in completions:
            assert completion.request_id not in self.answers, completion
            self.answers[completion.request_id] = completion.response

    def answer(self, request_id: Hashable) -> dict[str, Any] | None:
        """The response to *request_id* if it was answered (once), else None (still parked)."""
        return self.answers.pop(request_id, None)

    def group(self, group_id: str = "g") -> ClassicGroup:
        group = self.groups.group(group_id)
        assert group is not None
        return group

    def sleep(self, ms: int) -> None:
        self.sleep_until(self.now + ms)

    def sleep_until(self, t: int) -> None:
        """Advance the clock to *t*, ticking at every deadline on the way (as the gateway's timer does)."""
        while (deadline := self.groups.next_deadline()) is not None and deadline <= t:
            self.now = max(self.now, deadline)
            self._collect(self.groups.tick(self.now))
        self.now = t

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        instance: str | None = None,
        client: str = "c",
        protocols: Sequence[tuple[str, bytes]] = RANGE,
        protocol_type: str = "consumer",
        session: int = 10_000,
        rebalance: int = 30_000,
        require_known: bool = True,
        skip: bool = False,
    ) -> Hashable:
        request_id = ("join", next(self._ids))
        self._collect(
            self.groups.join(
                request_id,
                group_id=group,
                member_id=member_id,
                group_instance_id=instance,
                client_id=client,
                client_host=f"/10.0.0.{len(client)}",
                protocol_type=protocol_type,
                protocols=protocols,
                session_timeout_ms=session,
                rebalance_timeout_ms=rebalance,
                require_known_member_id=require_known,
                supports_skip_assignment=skip,
                now_ms=self.now,
            )
        )
        return request_id

    def dance(self, client: str, **kwargs: Any) -> tuple[str, Hashable]:
        """The v4+ join: MEMBER_ID_REQUIRED, then the join with the given id (returned, parked or not).

        Static members (``instance=``) join at once; their new member id is returned.
        """
        instance = kwargs.get("instance")
        if instance is not None:
            request_id = self.join(client=client, **kwargs)
            return self.group(kwargs.get("group", "g")).static_members[instance], request_id
        first = self.answer(self.join(client=client, **kwargs))
        assert first is not None and first["error_code"] == ErrorCode.member_id_required
        return first["member_id"], self.join(first["member_id"], client=client, **kwargs)

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: Mapping[str, bytes] | None = None,
        *,
        group: str = "g",
        instance: str | None = None,
        protocol_type: str | None = "consumer",
        protocol_name: str | None = "range",
    ) -> Hashable:
        request_id = ("sync", next(self._ids))
        self._collect(
            self.groups.sync(
                request_id,
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
                assignments=assignments or {},
                now_ms=self.now,
            )
        )
        return request_id

    def heartbeat(self, member_id: str, generation: int, *, group: str = "g", instance: str | None = None) -> ErrorCode:
        return self.groups.heartbeat(
            group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance, now_ms=self.now
        )

    def leave(self, *members: tuple[str, str | None], group: str = "g") -> dict[str, Any]:
        response, completions = self.groups.leave(group_id=group, members=members, now_ms=self.now)
        self._collect(completions)
        return response

    def stable_pair(self, assignment_a: bytes = b"A", assignment_b: bytes = b"B") -> tuple[str, str]:
        """Members c-1 (leader) and d-2 joined at t=0 and synced at t=4000: Stable, generation 1."""
        a, join_a = self.dance("c")
        b, join_b = self.dance("d")
        self.sleep_until(4_000)
        assert self.answer(join_a)["generation_id"] == 1  # type: ignore[index]
        assert self.answer(join_b)["generation_id"] == 1  # type: ignore[index]
        sync_b = self.sync(b, 1)
        sync_a = self.sync(a, 1, {a: assignment_a, b: assignment_b})
        assert self.answer(sync_a)["assignment"] == assignment_a  # type: ignore[index]
        assert self.answer(sync_b)["assignment"] == assignment_b  # type: ignore[index]
        return a, b


class MemoryOffsetStore:
    """The OffsetStore protocol over a dict; counts the durable writes."""

    def __init__(self) -> None:
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self.writes = 0

    def commit(self, records: Sequence[OffsetCommitRecord]) -> list[Exception | None]:
        self.writes += 1
        for r in records:
            self.offsets.setdefault(r.group_id, {})[(r.topic, r.partition)] = CommittedOffset(
                r.offset, r.leader_epoch, r.metadata, r.commit_timestamp_ms
            )
        return [None] * len(records)

    def fetch(self, group_id: str, topic: str, partition: int) -> CommittedOffset | None:
        return self.offsets.get(group_id, {}).get((topic, partition))

    def fetch_all(self, group_id: str) -> Mapping[tuple[str, int], CommittedOffset]:
        return dict(self.offsets.get(group_id, {}))

    def delete(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        self.writes += 1
        group = self.offsets.get(group_id, {})
        for key in partitions:
            group.pop(key, None)
        if not group:
            self.offsets.pop(group_id, None)

    def has_offsets(self, group_id: str) -> bool:
        return bool(self.offsets.get(group_id))

    def groups_with_offsets(self) -> Iterable[str]:
        return list(self.offsets)
