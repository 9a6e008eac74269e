"""The coordinator's view of the storage engine: committed offsets (in the partition's vnode) and partition counts.

Every call runs on the thread that owns the engine, which is why the engine is
private here and the gateway keeps the store out of reach of the event loop
(:class:`walgate.gateway.kafka.groups.GroupService` hands it only to functions
it runs on the storage thread). Commits are grouped by vnode and fsynced
before :meth:`EngineOffsetStore.commit` returns
(:meth:`walgate.storage.engine.Engine.commit_offsets`); a vnode whose write the
disk refuses fails only its own partitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from walgate.coordinator.offsets import CommittedOffset, OffsetCommitRecord
from walgate.storage.committed import Committed
from walgate.storage.engine import Engine

__all__ = ["EngineOffsetStore"]


def _from_storage(c: Committed) -> CommittedOffset:
    return CommittedOffset(c.offset, c.leader_epoch, c.metadata or "", c.commit_ms)


class EngineOffsetStore:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def commit(self, records: Sequence[OffsetCommitRecord]) -> list[Exception | None]:
        """Store *records* durably; per record, None or the error that refused it (StorageUnavailable: its vnode's
        write failed, the other vnodes' records are committed; NotFound: its topic went since it was validated)."""
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
        c = self._engine.committed(group_id, topic, partition)
        return None if c is None else _from_storage(c)

    def fetch_all(self, group_id: str) -> Mapping[tuple[str, int], CommittedOffset]:
        return {(t, p): _from_storage(c) for g, t, p, c in self._engine.all_committed() if g == group_id}

    def delete(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        for topic, partition in partitions:
            self._engine.delete_offsets(group_id, topic, partition)

    def has_offsets(self, group_id: str) -> bool:
        return any(g == group_id for g, _, _, _ in self._engine.all_committed())

    def groups_with_offsets(self) -> Iterable[str]:
        return {g for g, _, _, _ in self._engine.all_committed()}

    def partition_exists(self, topic: str, partition: int) -> bool:
        return self._engine.has_partition(topic, partition)

    def topic_partitions(self, topic: str) -> int | None:
        """Partition count of *topic*, None if it does not exist."""
        engine = self._engine
        return engine.partition_count(topic) if topic in engine.catalog.topics else None
