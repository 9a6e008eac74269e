"""Committed consumer-group offsets of every topic-partition, kept in the group's coordinator partition
(:mod:`walgate.storage.coordinator_partitions`); a commit is checked against the topics served here."""

from __future__ import annotations

from collections.abc import Iterator

from walgate.storage.coordinator_log import Committed
from walgate.storage.errors import StorageError
from walgate.storage.store import Store

__all__ = ["GroupOffsets"]


class GroupOffsets:
    def __init__(self, store: Store) -> None:
        self.store = store

    def commit(self, group: str, entries: list[tuple[str, int, int, int, str | None]], now_ms: int) -> list[StorageError | None]:
        """Durably commit ``(topic, partition, offset, leader_epoch, metadata)`` entries for ``group``.

        Returns, per entry, None or the error that refused it: NotFound (unknown topic or partition) or the error of
        the write (StorageUnavailable: the disk refused it; every accepted entry is refused with it, as they are one
        write). The accepted ones are written with one write, fsynced before this returns (under group commit, before
        the storage thread's call does)."""
        errors: list[StorageError | None] = []
        items: list[tuple[str, int, Committed]] = []
        for topic, partition, offset, epoch, metadata in entries:
            try:
                self.store.partition(topic, partition)
            except StorageError as exc:
                errors.append(exc)
                continue
            errors.append(None)
            items.append((topic, partition, Committed(offset, epoch, metadata, now_ms)))
        try:
            self.store.coordinator.commit(group, items)
        except StorageError as exc:
            return [e if e is not None else exc for e in errors]
        return errors

    def get(self, group: str, topic: str, partition: int) -> Committed | None:
        """The offset ``group`` committed for a topic-partition (None: none, or no such partition)."""
        try:
            self.store.partition(topic, partition)
        except StorageError:
            return None
        return self.store.coordinator.get(group, topic, partition)

    def delete(self, group: str | None = None, topic: str | None = None, partition: int | None = None) -> int:
        """Delete committed offsets matching the filters (durably); returns how many went.

        Without a group every coordinator partition is tried: one whose write the disk refuses keeps its offsets, the
        others delete theirs, then the first error is raised (deleting again is safe)."""
        return self.store.coordinator.delete(group, topic, partition)

    def all(self) -> Iterator[tuple[str, str, int, Committed]]:
        """Every committed offset: (group, topic, partition, committed)."""
        return self.store.coordinator.items()
