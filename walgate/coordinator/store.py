"""The coordinator's :class:`OffsetStore` over the storage engine: offsets live in the partition's vnode.

Every call runs on the thread that owns the engine. Commits are grouped by
vnode and fsynced before :meth:`EngineOffsetStore.commit` returns
(:meth:`walgate.storage.engine.Engine.commit_offsets`).
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
        self.engine = engine

    def commit(self, records: Sequence[OffsetCommitRecord]) -> None:
        by_group: dict[str, list[OffsetCommitRecord]] = {}
        for r in records:
            by_group.setdefault(r.group_id, []).append(r)
        for group, rs in by_group.items():
            errors = self.engine.commit_offsets(
                group, [(r.topic, r.partition, r.offset, r.leader_epoch, r.metadata) for r in rs],
                max(r.commit_timestamp_ms for r in rs),
            )
            failed = next((e for e in errors if e is not None), None)
            if failed is not None:  # the coordinator checked the partitions exist; a race with DROP TOPIC
                raise failed

    def fetch(self, group_id: str, topic: str, partition: int) -> CommittedOffset | None:
        c = self.engine.committed(group_id, topic, partition)
        return None if c is None else _from_storage(c)

    def fetch_all(self, group_id: str) -> Mapping[tuple[str, int], CommittedOffset]:
        return {(t, p): _from_storage(c) for g, t, p, c in self.engine.all_committed() if g == group_id}

    def delete(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        for topic, partition in partitions:
            self.engine.delete_offsets(group_id, topic, partition)

    def has_offsets(self, group_id: str) -> bool:
        return any(g == group_id for g, _, _, _ in self.engine.all_committed())

    def groups_with_offsets(self) -> Iterable[str]:
        return {g for g, _, _, _ in self.engine.all_committed()}
