"""Committed consumer-group offsets of every topic-partition, kept in the partition's vnode (committed.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from walgate.storage.committed import Committed
from walgate.storage.errors import StorageError
from walgate.storage.store import Store
from walgate.storage.vnode import Vnode

__all__ = ["GroupOffsets"]


class GroupOffsets:
    def __init__(self, store: Store) -> None:
        self.store = store

    def commit(self, group: str, entries: list[tuple[str, int, int, int, str | None]], now_ms: int) -> list[StorageError | None]:
        """Durably commit ``(topic, partition, offset, leader_epoch, metadata)`` entries for ``group``.

        Returns, per entry, None or the error that refused it: NotFound (unknown
        topic or partition) or the error of its vnode's write (StorageUnavailable:
        the disk refused it; the entries of other vnodes are committed). The
        accepted ones are fsynced, one write per vnode, before this returns."""
        errors: list[StorageError | None] = []
        per_vnode: dict[int, tuple[Vnode, list[int], list[tuple[str, int, Committed]]]] = {}
        for k, (topic, partition, offset, epoch, metadata) in enumerate(entries):
            try:
                _, vnode, _ = self.store.partition(topic, partition)
            except StorageError as exc:
                errors.append(exc)
                continue
            errors.append(None)
            _, ks, items = per_vnode.setdefault(id(vnode), (vnode, [], []))
            ks.append(k)
            items.append((topic, partition, Committed(offset, epoch, metadata, now_ms)))
        for vnode, ks, items in per_vnode.values():
            try:
                vnode.offsets.commit(group, items)
            except StorageError as exc:
                for k in ks:
                    errors[k] = exc
        return errors

    def get(self, group: str, topic: str, partition: int) -> Committed | None:
        """The offset ``group`` committed for a topic-partition (None: none, or no such partition)."""
        try:
            _, vnode, _ = self.store.partition(topic, partition)
        except StorageError:
            return None
        return vnode.offsets.get(group, topic, partition)

    def delete(self, group: str | None = None, topic: str | None = None, partition: int | None = None) -> int:
        """Delete committed offsets matching the filters (durably); returns how many went.

        Every vnode is tried: one whose write the disk refuses keeps its offsets, the others delete theirs, then
        the first error is raised (deleting again is safe)."""
        deleted, error = 0, None
        for vnodes in self.store.vnodes.values():
            for vnode in vnodes:
                try:
                    deleted += vnode.offsets.delete(group, topic, partition)
                except StorageError as exc:
                    error = error or exc
        if error is not None:
            raise error
        return deleted

    def all(self, vnodes: Iterable[tuple[str, int]] | None = None) -> Iterator[tuple[str, str, int, Committed]]:
        """Every committed offset (or those kept in ``vnodes``: (database, vnode index), the ones that exist):
        (group, topic, partition, committed)."""
        if vnodes is None:
            chosen: Iterable[Vnode] = (v for db in self.store.vnodes.values() for v in db)
        else:
            chosen = (self.store.vnodes[db][i] for db, i in vnodes if i < len(self.store.vnodes.get(db, ())))
        for vnode in chosen:
            for (group, topic, partition), c in vnode.offsets.items():
                yield group, topic, partition, c
