"""The LRU of record batches rendered from TDengine topics' WAL entries, bounded in bytes.

Batches are rendered once per (topic id, partition, WAL version): dense offsets are never renumbered, so a rendered
batch (base offset included) is final and every consumer and group reuses it. The key holds the topic's id, not its
name, so a topic dropped and created again under its name never meets the old topic's batches; those age out. The
cache belongs to the partitions that fill it (:class:`~walgate.storage.partitions.LocalPartitions`) and is only
touched by exclusive storage-lane calls (:mod:`walgate.storage.lanes`).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict

__all__ = ["BatchCache"]


class BatchCache:
    """LRU of rendered record batches keyed by (topic id, partition, version), bounded in bytes; counts the
    :meth:`get` calls that found their batch (``hits``) and those that did not (``misses``)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[tuple[uuid.UUID | None, int, int], bytes] = OrderedDict()

    def get(self, key: tuple[uuid.UUID | None, int, int]) -> bytes | None:
        batch = self._items.get(key)
        if batch is not None:
            self._items.move_to_end(key)
            self.hits += 1
        else:
            self.misses += 1
        return batch

    def put(self, key: tuple[uuid.UUID | None, int, int], batch: bytes) -> None:
        if key in self._items:
            return
        self._items[key] = batch
        self.size += len(batch)
        while self.size > self.max_bytes and self._items:
            _, old = self._items.popitem(last=False)
            self.size -= len(old)

    def forget_from(self, topic_ids: set[uuid.UUID | None], partition: int, version: int) -> None:
        """Drop the batches of ``topic_ids``' ``partition`` rendered from WAL versions ``version`` and later (its WAL
        was cut back there: those versions will hold other entries)."""
        for key in [k for k in self._items if k[1] == partition and k[2] >= version and k[0] in topic_ids]:
            self.size -= len(self._items.pop(key))
