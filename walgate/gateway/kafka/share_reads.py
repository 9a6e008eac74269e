"""What a ShareFetch reads from the logs, on the storage lane, between its two share-coordinator calls (issue 23).

The share coordinator runs on the coordinator lane and never waits for the storage lane, so it cannot read a
partition while it acquires. A ShareFetch round therefore asks it first what acquiring needs
(:meth:`~walgate.coordinator.share_coordinator.ShareCoordinator.reads`: per share-partition, the first record it
could acquire and where its in-flight window ends), reads that here in one storage-lane call (:func:`read_logs`:
the watermarks, the batches from that record on, bounded by the window and the answer's bytes, and under
read_committed the aborted transactions among them), and then acquires on the coordinator lane against what was
read (:class:`LogReads`: the coordinator's watermarks, :meth:`LogReads.cap` its byte budget,
:meth:`LogReads.batches` the answer's batches). What was read may be older than the coordinator's state by then: a
record that became acquirable before the first one read (released meanwhile) is not acquired in this round (the
release wakes the fetch, whose next round reads from it), and the watermarks are those of the read, never newer.
A share-partition not made yet whose ``share.auto.offset.reset`` is "latest" is not read while its latest offset is
not known (a replicated partition's leader just elected, its high watermark below the start of its leader epoch:
:func:`_latest_known`): that round acquires nothing there and a later one starts it, never below the high watermark
its previous leader made visible.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from walgate.coordinator.share_coordinator import ReadWant
from walgate.coordinator.share_partition import Acquired
from walgate.storage.engine import Engine
from walgate.storage.errors import NotFound, OffsetNotAvailable
from walgate.storage.partitions import LATEST, PartitionOffsets
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.storage.wal import FileRegion

__all__ = ["LogRead", "LogReads", "read_logs"]

_HEADER = struct.Struct(">qiibihiqqq")  # RecordBatch v2 up to the producer id
_TRANSACTIONAL, _CONTROL = 0x10, 0x20

Batch = tuple[int, int, bytes | FileRegion]
"""(base offset, records, the stored or rendered batch)."""


@dataclass
class LogRead:
    """One share-partition's log as a round read it: its offsets (or why it could not be read), the batches from
    the first record it could acquire, and the offset ranges of aborted transactions among them (read_committed)."""

    offsets: PartitionOffsets | None = None
    error: Exception | None = None
    batches: list[Batch] = field(default_factory=list)
    aborted: list[tuple[int, int]] = field(default_factory=list)


def read_logs(engine: Engine, wants: list[ReadWant], committed: bool, max_bytes: int) -> dict[tuple[str, int], LogRead]:
    """On the storage lane: what ``wants`` asks of each share-partition's log (topic keys are topic ids), at most
    ``max_bytes`` of batches each (and one batch more: the answer's first always fits, KIP-74); a partition that
    cannot be read has its error."""
    out: dict[tuple[str, int], LogRead] = {}
    for want in wants:
        key = (want.topic, want.partition)
        read = out[key] = LogRead()
        try:
            name = engine.topic_name(uuid.UUID(want.topic))
            if name is None or not 0 <= want.partition < engine.partition_count(name):
                raise NotFound(f"topic id {want.topic} has no partition {want.partition}")
            if want.fresh and want.reset != "earliest" and not _latest_known(engine, name, want.partition):
                del out[key]  # not read: the share-partition is not made this round, a later one starts it
                continue
            offsets = read.offsets = engine.partitions.offsets(name, want.partition)
            first, end = want.first, want.end
            if want.fresh:
                first = offsets.log_start if want.reset == "earliest" else offsets.high_watermark
                end += first
            limit = min(offsets.last_stable if committed else offsets.high_watermark, end)
            if first is None or first >= limit or max_bytes <= 0:
                continue
            size = 0
            for base, count, batch in engine.partitions.batches(name, want.partition, max(first, offsets.log_start)):
                if base >= limit or size > max_bytes:
                    break
                read.batches.append((base, count, batch))
                size += len(batch)
            if committed and read.batches:
                read.aborted = _aborted(engine, name, want.partition, read.batches)
        except Exception as exc:  # noqa: BLE001 - answered per partition by the coordinator's round
            read.error = exc
    return out


def _latest_known(engine: Engine, name: str, partition: int) -> bool:
    """Whether the partition's latest offset is known: not on a replicated partition's leader just elected whose
    high watermark has not reached the start of its leader epoch (below its predecessor's high watermark, KIP-207),
    as ListOffsets answers (:class:`~walgate.storage.errors.OffsetNotAvailable`); Kafka's ``SharePartition`` takes
    its "latest" start through that same ListOffsets path and tries again."""
    try:
        engine.partitions.list_offset(name, partition, LATEST, read_committed=False)
    except OffsetNotAvailable:
        return False
    return True


def _aborted(engine: Engine, name: str, partition: int, batches: list[Batch]) -> list[tuple[int, int]]:
    """The offset ranges of the batches of aborted transactions among ``batches``; a TDengine topic has none."""
    if not engine.is_native(name):
        return []
    base, count, _ = batches[-1]
    aborted = engine.partitions.aborted(name, partition, batches[0][0], base + count)
    if not aborted:
        return []
    out = []
    for base, _, batch in batches:
        head = batch.read(_HEADER.size) if isinstance(batch, FileRegion) else bytes(batch[:_HEADER.size])
        if len(head) < _HEADER.size:
            continue
        _, _, _, _, _, attributes, last_delta, _, _, producer_id = _HEADER.unpack(head)
        if attributes & _TRANSACTIONAL and not attributes & _CONTROL and any(
                a.producer_id == producer_id and a.first_offset <= base <= a.last_offset for a in aborted):
            out.append((base, base + last_delta))
    return out


class LogReads:
    """A round's reads as the share coordinator's logs (:class:`~walgate.coordinator.share_coordinator.ShareLogs`'
    watermarks: those read, None for a partition this round did not read) and its answer's byte budget."""

    def __init__(self, topics: TopicsSnapshot, reads: dict[tuple[str, int], LogRead], max_bytes: int) -> None:
        self._topics = topics
        self.reads = reads
        self._left = max_bytes
        self._max_bytes = max_bytes

    def watermarks(self, topic: str, partition: int) -> tuple[int, int] | None:
        """Raises what reading the partition raised, or :class:`NotFound` for a topic deleted since."""
        name = self._topics.topic_name(uuid.UUID(topic))
        if name is None or not self._topics.has_partition(name, partition):
            raise NotFound(f"topic id {topic} has no partition {partition}")
        read = self.reads.get((topic, partition))
        if read is None:
            return None
        if read.error is not None:
            raise read.error
        assert read.offsets is not None  # (read, or its error)
        return read.offsets.log_start, read.offsets.high_watermark

    def stable(self, topic: str, partition: int) -> int:
        read = self.reads[(topic, partition)]
        assert read.offsets is not None  # (asked only after watermarks)
        return read.offsets.last_stable

    def cap(self, topic: str, partition: int, first: int, limit: int) -> int:
        """The coordinator's ``cap``: from ``first``, the end of the whole batches read that fit what is left of the
        budget (the answer's first batch always does), at most ``limit``; ``first`` (nothing) when the read does not
        cover it."""
        read = self.reads.get((topic, partition))
        if read is None or not read.batches or read.batches[0][0] > first or self._max_bytes <= 0:
            return first
        end = first
        for base, count, batch in read.batches:
            if base + count <= first:
                continue
            if base >= limit:
                break
            size = len(batch)
            if size > self._left and self._left < self._max_bytes:
                break
            self._left -= size
            end = base + count
            if self._left <= 0:
                break
        return min(end, limit)

    def batches(self, topic: str, partition: int, acquired: list[Acquired]) -> list[bytes | FileRegion]:
        """The batches read that hold the ``acquired`` offsets, in offset order."""
        read = self.reads.get((topic, partition))
        if read is None or not acquired:
            return []
        return [batch for base, count, batch in read.batches
                if any(a.first < base + count and a.last >= base for a in acquired)]

    def aborted(self, topic: str, partition: int) -> list[tuple[int, int]]:
        """The aborted transactions' offset ranges read for the partition (read_committed)."""
        read = self.reads.get((topic, partition))
        return read.aborted if read is not None else []
