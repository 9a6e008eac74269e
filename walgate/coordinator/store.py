"""The coordinator's view of the storage engine: committed offsets (in the group's coordinator partition) and
partition counts.

:class:`EngineOffsetStore` is the :class:`~walgate.coordinator.offsets.OffsetStore` over
:class:`walgate.storage.engine.Engine`, which it reaches through the narrow :class:`OffsetEngine` protocol (so the
coordinator does not import storage). Every call runs on the coordinator lane, which owns the coordinator log, which is
why the engine is private here and the gateway keeps the store out of reach of the event loop
(:class:`walgate.gateway.kafka.groups.GroupService` hands it only to functions it runs on that lane). Topics and
partition counts come from the snapshot the storage lane publishes (``Engine.topics``), never from the catalog.
Each group's commits go to the engine in one call, which writes them with one write to the group's coordinator
partition, fsynced before :meth:`EngineOffsetStore.commit` returns (under group commit, before the storage thread's
call does); a write the disk refuses fails that group's records only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from walgate.coordinator.offsets import CommittedOffset, OffsetCommitRecord

__all__ = ["EngineOffsetStore", "OffsetEngine", "StoredOffset"]


class StoredOffset(Protocol):
    """A committed offset as the engine keeps it (``walgate.storage.coordinator_log.Committed``)."""

    @property
    def offset(self) -> int: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def metadata(self) -> str | None: ...

    @property
    def commit_ms(self) -> int: ...


class Topics(Protocol):
    """The published topics (``walgate.storage.topics_snapshot.TopicsSnapshot``)."""

    def partition_count(self, topic: str) -> int | None: ...

    def has_partition(self, topic: str, partition: int) -> bool: ...


class OffsetEngine(Protocol):
    """The engine methods the store uses (``walgate.storage.engine.Engine`` has them)."""

    def topics(self) -> Topics: ...

    def commit_offsets(
        self, group: str, entries: list[tuple[str, int, int, int, str | None]], now_ms: int
    ) -> Sequence[Exception | None]: ...

    def committed(self, group: str, topic: str, partition: int) -> StoredOffset | None: ...

    def delete_offsets(
        self, group: str | None = None, topic: str | None = None, partition: int | None = None
    ) -> int: ...

    def all_committed(self) -> Iterable[tuple[str, str, int, StoredOffset]]: ...


def _from_storage(c: StoredOffset) -> CommittedOffset:
    return CommittedOffset(c.offset, c.leader_epoch, c.metadata or "", c.commit_ms)


class EngineOffsetStore:
    """Committed offsets and partition counts, read from and written to *engine* (on its thread)."""

    def __init__(self, engine: OffsetEngine) -> None:
        self._engine = engine

    def commit(self, records: Sequence[OffsetCommitRecord]) -> list[Exception | None]:
        """Store *records* durably; per record, None or the error that refused it (StorageUnavailable: its group's
        write failed, the other groups' records are committed; NotFound: its topic went since it was validated)."""
        errors: list[Exception | None] = [None] * len(records)
        by_group: dict[str, list[int]] = {}
        for k, r in enumerate(records):
            by_group.setdefault(r.group_id, []).append(k)
        for group, ks in by_group.items():
            rs = [records[k] for k in ks]
            refused = self._engine.commit_offsets(
                group, [(r.topic, r.partition, r.offset, r.leader_epoch, r.metadata) for r in rs],
                max(r.commit_timestamp_ms for r in rs),
            )
            for k, error in zip(ks, refused):
                errors[k] = error
        return errors

    def fetch(self, group_id: str, topic: str, partition: int) -> CommittedOffset | None:
        """The committed offset of one partition, or None."""
        c = self._engine.committed(group_id, topic, partition)
        return None if c is None else _from_storage(c)

    def fetch_all(self, group_id: str) -> Mapping[tuple[str, int], CommittedOffset]:
        """Every committed offset of *group_id*, keyed by (topic, partition)."""
        return {(t, p): _from_storage(c) for g, t, p, c in self._engine.all_committed() if g == group_id}

    def delete(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """Remove the committed offsets of *partitions* durably (absent ones are ignored)."""
        for topic, partition in partitions:
            self._engine.delete_offsets(group_id, topic, partition)

    def has_offsets(self, group_id: str) -> bool:
        """Whether *group_id* has at least one committed offset."""
        return any(g == group_id for g, _, _, _ in self._engine.all_committed())

    def groups_with_offsets(self) -> set[str]:
        """Every group with at least one committed offset."""
        return {g for g, _, _, _ in self._engine.all_committed()}

    def partition_exists(self, topic: str, partition: int) -> bool:
        """Whether *topic* exists and has *partition*."""
        return self._engine.topics().has_partition(topic, partition)

    def topic_partitions(self, topic: str) -> int | None:
        """Partition count of *topic*, None if it does not exist."""
        return self._engine.topics().partition_count(topic)
