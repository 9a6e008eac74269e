"""Committed consumer-group offsets of every topic-partition, kept in the group's coordinator partition
(:mod:`walgate.storage.coordinator_partitions`); a commit is checked against the topics served here, as the storage
lane last published them (:mod:`walgate.storage.topics_snapshot`).

The coordinator log belongs to the coordinator lane: every method runs there (through ``store.coordinator_lane``,
at once when called on it), so storage-lane callers (a topic drop, DROP CONSUMER GROUP, SHOW SUBSCRIPTIONS) wait
for it and never touch the log themselves."""

from __future__ import annotations

from walgate.storage.coordinator_log import Committed
from walgate.storage.errors import NotFound, StorageError
from walgate.storage.store import Store

__all__ = ["GroupOffsets"]


class GroupOffsets:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.left: set[str] = set()
        """Topics dropped since the start whose offsets' deletion the disk refused (storage lane): a topic created
        under such a name first deletes them (:meth:`clear_left`), so it never starts with its namesake's offsets."""

    def delete_of_dropped(self, topic: str) -> None:
        """On the storage lane, after ``topic``'s drop was recorded: delete its committed offsets; when the disk
        refuses it, remember the name (:attr:`left`) and raise the error."""
        try:
            self.delete(topic=topic)
        except StorageError:
            self.left.add(topic)
            raise

    def clear_left(self, topic: str) -> None:
        """Before a topic named ``topic`` is created (storage lane): delete the offsets its dropped namesake left;
        the disk's error when it refuses again (the creation is then refused: nothing of it is written yet)."""
        if topic in self.left:
            self.delete(topic=topic)
            self.left.discard(topic)

    def commit(self, group: str, entries: list[tuple[str, int, int, int, str | None]], now_ms: int) -> list[StorageError | None]:
        """Durably commit ``(topic, partition, offset, leader_epoch, metadata)`` entries for ``group``.

        Returns, per entry, None or the error that refused it: NotFound (unknown topic or partition) or the error of
        the write (StorageUnavailable: the disk refused it; every accepted entry is refused with it, as they are one
        write). The accepted ones are written with one write, fsynced before this returns (under group commit, before
        the storage thread's call does)."""
        return self.store.coordinator_lane.run(lambda: self._commit(group, entries, now_ms))

    def _commit(self, group: str, entries: list[tuple[str, int, int, int, str | None]],
                now_ms: int) -> list[StorageError | None]:
        topics = self.store.topics()
        errors: list[StorageError | None] = []
        items: list[tuple[str, int, Committed]] = []
        for topic, partition, offset, epoch, metadata in entries:
            if topic not in topics:
                errors.append(NotFound(f"Topic not exist: {topic}"))
            elif not topics.has_partition(topic, partition):
                errors.append(NotFound(f"Topic {topic} has no partition {partition}"))
            else:
                errors.append(None)
                items.append((topic, partition, Committed(offset, epoch, metadata, now_ms)))
        try:
            self.store.coordinator.commit(group, items)
        except StorageError as exc:
            return [e if e is not None else exc for e in errors]
        return errors

    def get(self, group: str, topic: str, partition: int) -> Committed | None:
        """The offset ``group`` committed for a topic-partition (None: none, or no such partition)."""
        def get() -> Committed | None:
            if not self.store.topics().has_partition(topic, partition):
                return None
            return self.store.coordinator.get(group, topic, partition)
        return self.store.coordinator_lane.run(get)

    def delete(self, group: str | None = None, topic: str | None = None, partition: int | None = None) -> int:
        """Delete committed offsets matching the filters (durably); returns how many went.

        Without a group every coordinator partition is tried: one whose write the disk refuses keeps its offsets, the
        others delete theirs, then the first error is raised (deleting again is safe)."""
        return self.store.coordinator_lane.run(lambda: self.store.coordinator.delete(group, topic, partition))

    def all(self) -> list[tuple[str, str, int, Committed]]:
        """Every committed offset: (group, topic, partition, committed)."""
        return self.store.coordinator_lane.run(lambda: list(self.store.coordinator.items()))

    def delete_dropped(self) -> list[str]:
        """At start, on the storage lane: delete the offsets of topics the catalog dropped (a stop between a topic's
        drop and the deletion of its offsets left them; ``Catalog.dropped``: never a topic whose record was damaged,
        which ``walgate repair`` may bring back); the topics they were of."""
        catalog = self.store.catalog
        dropped = catalog.dropped - catalog.topics.keys()

        def delete() -> list[str]:
            gone = sorted({t for _, t, _, _ in self.store.coordinator.items() if t in dropped})
            for topic in gone:
                self.store.coordinator.delete(topic=topic)
            return gone
        return self.store.coordinator_lane.run(delete) if dropped else []
