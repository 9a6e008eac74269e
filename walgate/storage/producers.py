"""Idempotent- and transactional-producer state of one Kafka-native partition, and producer id allocation.

Kafka's ``ProducerStateManager`` / ``ProducerAppendInfo`` rules, per
(producer id, partition), for batches of an idempotent producer (producer id
>= 0; a producer id of -1 is not idempotent and is always appended):

* the five most recent batches (first sequence, last sequence, base offset)
  are kept; a batch repeating one of them is a *duplicate*: nothing is written
  and the original base offset is answered (a retry whose first answer was lost);
* a batch of the current epoch whose sequences all lie before the oldest kept batch and at or after the first
  sequence this partition holds of that epoch was written before and fell out of the five: an
  :class:`EarlierBatch`, which the partition looks up in its log (:meth:`NativeTopics.append_batches
  <walgate.storage.native_topics.NativeTopics.append_batches>`) to answer its original offset. Kafka answers
  OUT_OF_ORDER_SEQUENCE_NUMBER here; its Java client retries that forever once a later batch of the partition was
  acknowledged (``TransactionManager.canRetry``: not the next sequence, no epoch bump): the 2026-11-30 CI finding,
  "sequence 0, expected 33" over and over, a first batch retried after the run's later batches of the partition;
* an epoch below the producer's current one: INVALID_PRODUCER_EPOCH (fenced);
* an epoch above it starts over: its first sequence must be 0;
* otherwise the first sequence must follow the last one (wrapping at 2^31):
  OUT_OF_ORDER_SEQUENCE_NUMBER; a producer whose batches a transaction marker of
  a new epoch cleared starts at 0;
* a producer id this partition has no state for (new, or its batches were
  deleted by retention) is accepted at any sequence, as Kafka does.

Transactions (KIP-98): a transactional batch (attribute bit 4) opens its
producer's *ongoing transaction* at the batch's base offset, unless one is open;
a non-transactional batch while one is open is INVALID_TXN_STATE. A transaction
marker (a control batch holding an EndTransactionMarker, which only the broker
writes) ends it: a marker whose epoch is below the producer's is
INVALID_PRODUCER_EPOCH, one whose coordinator epoch is below the last one seen
TRANSACTION_COORDINATOR_FENCED. A transaction ended by an ABORT marker enters
the aborted list, (producer id, first offset, marker offset), which read_committed
Fetch answers from (:meth:`PartitionProducers.aborted_between`). The *last stable
offset* (:meth:`PartitionProducers.last_stable`) is the smallest first offset of
the open transactions and of the ended ones whose marker is not yet below the
high watermark (Kafka's unreplicated transactions: a marker that is written but
not durable yet could still be lost), else the high watermark, never below the log
start.

The state is derived from the batch headers in the WAL, so it is rebuilt by
replaying them (:meth:`PartitionProducers.record`, :meth:`PartitionProducers.record_marker`) when a topic is opened.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, NamedTuple

from walgate.storage import fileio, lines
from walgate.storage.clock import SYSTEM_CLOCK, Clock
from walgate.storage.damage import DamageLog
from walgate.storage.errors import InvalidValue, StorageError, StorageUnavailable
from walgate.storage.fileio import SyncLatency
from walgate.wire.errors import ErrorCode

__all__ = ["AbortedTxn", "ActiveProducer", "PartitionProducers", "ProducerIds", "DuplicateBatch", "EarlierBatch",
           "SequenceError", "BATCHES_KEPT"]

log = logging.getLogger("walgate.producers")

BATCHES_KEPT: Final = 5
_SEQUENCE_WRAP: Final = 2**31


class SequenceError(StorageError):
    """A batch refused by the idempotence or transaction rules; ``error_code`` is the Kafka error Produce answers."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    """The batch was appended before: its base offset."""

    base_offset: int


@dataclass(frozen=True, slots=True)
class EarlierBatch:
    """The batch repeats one of producer ``producer_id`` at ``epoch`` written before the five batches kept (see the
    module docstring): its sequences ``first_seq``..``last_seq``; the oldest batch kept starts at offset ``before``,
    so the original lies below it."""

    producer_id: int
    epoch: int
    first_seq: int
    last_seq: int
    before: int


class AbortedTxn(NamedTuple):
    """An aborted transaction: its producer, its first offset and its ABORT marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int


class ActiveProducer(NamedTuple):
    """What DescribeProducers answers of one producer (-1: unknown / none)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    txn_start_offset: int


@dataclass(slots=True)
class _Producer:
    epoch: int
    batches: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    txn_first: int = -1  # first offset of its ongoing transaction; -1: none
    low_seq: int = -1  # the first sequence of the first batch held in this epoch; -1: none


class PartitionProducers:
    """Producer id -> epoch, recent batches and ongoing transaction, for one partition; the aborted list."""

    def __init__(self) -> None:
        self._producers: dict[int, _Producer] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self._unstable: list[tuple[int, int]] = []  # ended transactions: (first offset, marker offset)
        self._aborted: list[AbortedTxn] = []  # by marker offset

    def check(self, producer_id: int, epoch: int, first_seq: int, count: int,
              transactional: bool = False) -> DuplicateBatch | EarlierBatch | None:
        """None if the batch may be appended, a :class:`DuplicateBatch`, an :class:`EarlierBatch` (to look up), or
        raises :class:`SequenceError`."""
        if producer_id < 0:
            return None
        state = self._producers.get(producer_id)
        if state is None:
            return None
        if epoch < state.epoch:
            raise SequenceError(ErrorCode.invalid_producer_epoch,
                                f"producer {producer_id} epoch {epoch} is older than its current epoch {state.epoch}")
        if epoch > state.epoch:
            if first_seq != 0:
                raise SequenceError(ErrorCode.out_of_order_sequence_number,
                                    f"producer {producer_id}: a new epoch {epoch} must start at sequence 0, not {first_seq}")
        else:
            last_seq = (first_seq + count - 1) % _SEQUENCE_WRAP
            for first, last, base_offset in state.batches:
                if first == first_seq and last == last_seq:
                    return DuplicateBatch(base_offset)
            expected = (state.batches[-1][1] + 1) % _SEQUENCE_WRAP if state.batches else 0
            if state.batches and 0 <= state.low_seq <= first_seq <= last_seq < state.batches[0][0]:
                return EarlierBatch(producer_id, epoch, first_seq, last_seq, state.batches[0][2])
            if first_seq != expected:
                raise SequenceError(ErrorCode.out_of_order_sequence_number,
                                    f"producer {producer_id}: sequence {first_seq}, expected {expected}")
        if state.txn_first >= 0 and not transactional:
            raise SequenceError(ErrorCode.invalid_txn_state, f"producer {producer_id} has a transaction open since offset "
                                f"{state.txn_first}: a non-transactional batch is refused")
        return None

    def record(self, producer_id: int, epoch: int, first_seq: int, count: int, base_offset: int,
               transactional: bool = False, timestamp: int = -1) -> None:
        """Remember an appended batch (also used to replay the WAL); a transactional one opens its producer's
        transaction at ``base_offset`` unless one is open."""
        if producer_id < 0:
            return
        state = self._state(producer_id, epoch)
        if not state.batches:
            state.low_seq = first_seq
        state.batches.append((first_seq, (first_seq + count - 1) % _SEQUENCE_WRAP, base_offset))
        state.last_timestamp = timestamp
        if transactional and state.txn_first < 0:
            state.txn_first = self._ongoing[producer_id] = base_offset

    def _state(self, producer_id: int, epoch: int) -> _Producer:
        """The producer's state at ``epoch`` (an appended batch or marker, checked before): created if new; another
        epoch starts over, without the batches of the one before."""
        state = self._producers.get(producer_id)
        if state is None:
            state = self._producers[producer_id] = _Producer(epoch)
        elif epoch != state.epoch:
            state.epoch = epoch
            state.batches.clear()
            state.low_seq = -1
        return state

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Raises :class:`SequenceError` when a marker of this producer epoch and coordinator epoch is fenced."""
        state = self._producers.get(producer_id)
        if state is None:
            return
        if epoch < state.epoch:
            raise SequenceError(ErrorCode.invalid_producer_epoch, f"a transaction marker of producer {producer_id} epoch "
                                f"{epoch} is older than its current epoch {state.epoch}")
        if coordinator_epoch < state.coordinator_epoch:
            raise SequenceError(ErrorCode.transaction_coordinator_fenced, f"a transaction marker of producer {producer_id} "
                                f"from coordinator epoch {coordinator_epoch}, older than {state.coordinator_epoch}")

    def record_marker(self, producer_id: int, epoch: int, coordinator_epoch: int, commit: bool, offset: int,
                      timestamp: int) -> None:
        """Remember an appended transaction marker at ``offset`` (also used to replay the WAL): it ends the
        producer's transaction, if one is open; an ABORT enters the aborted list."""
        state = self._state(producer_id, epoch)
        state.coordinator_epoch = coordinator_epoch
        state.last_timestamp = timestamp
        if state.txn_first >= 0:
            self._unstable.append((state.txn_first, offset))
            if not commit:
                self._aborted.append(AbortedTxn(producer_id, state.txn_first, offset))
            del self._ongoing[producer_id]
            state.txn_first = -1

    def copy_for(self, producer_ids: set[int]) -> PartitionProducers:
        """A scratch copy holding the state of ``producer_ids`` only: enough to check batches of those producers
        that follow one another, without copying the partition's whole state."""
        scratch = PartitionProducers()
        for pid in producer_ids & self._producers.keys():
            s = self._producers[pid]
            scratch._producers[pid] = _Producer(s.epoch, deque(s.batches, maxlen=BATCHES_KEPT), s.coordinator_epoch,
                                                s.last_timestamp, s.txn_first, s.low_seq)
        return scratch

    def max_producer_id(self) -> int:
        """The largest producer id with state here (-1: none)."""
        return max(self._producers, default=-1)

    def ongoing(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction."""
        return dict(self._ongoing)

    def last_stable(self, log_start: int, high_watermark: int) -> int:
        """The last stable offset (see the module docstring) under ``high_watermark``, not below ``log_start``."""
        self._unstable = [(first, marker) for first, marker in self._unstable if marker >= high_watermark]
        first = min(min(self._ongoing.values(), default=high_watermark),
                    min((f for f, _ in self._unstable), default=high_watermark))
        return min(max(first, log_start), high_watermark)

    def aborted_between(self, start: int, upper: int, log_start: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping offsets [start, upper): marker at or after ``start``, first offset
        before ``upper`` (Kafka's ``TransactionIndex.collectAbortedTxns``); those wholly below ``log_start`` are
        forgotten."""
        drop = bisect_left(self._aborted, log_start, key=lambda a: a.last_offset)
        if drop:
            del self._aborted[:drop]
        k = bisect_left(self._aborted, start, key=lambda a: a.last_offset)
        return [a for a in self._aborted[k:] if a.first_offset < upper]

    def forget_aborted(self, marker_offsets: set[int]) -> None:
        """Drop the aborted transactions whose ABORT marker, at one of ``marker_offsets``, the log cleaner removed
        (after every batch of theirs): a reader told of one would skip its producer's batches until a marker that is
        gone (Kafka's cleaner leaves such a transaction out of the segment's rewritten transaction index)."""
        self._aborted = [a for a in self._aborted if a.last_offset not in marker_offsets]

    def active(self) -> list[ActiveProducer]:
        """Every producer with state here, as DescribeProducers answers it."""
        return [ActiveProducer(pid, s.epoch, s.batches[-1][1] if s.batches else -1, s.last_timestamp,
                               s.coordinator_epoch, s.txn_first) for pid, s in sorted(self._producers.items())]


class ProducerIds:
    """Allocates producer ids in durable blocks, so none is handed out twice across restarts.

    ``producer_ids.log`` holds the first id of the next block as one checksummed line
    (:mod:`walgate.storage.lines`), ``{"next_block": n}``; it is replaced atomically
    (:func:`walgate.storage.fileio.replace_file`) before any id of a new block is given out, as Kafka's broker
    reserves blocks. When the disk refuses that write, :meth:`allocate` raises
    :class:`~walgate.storage.errors.StorageUnavailable` and hands out nothing.

    The data dir creates the file (:meth:`create`) with the data dir, so a missing file was lost. A file that is
    missing or does not verify is reported and ids go on from the current time in microseconds since the epoch
    (plus a block): above any id handed out before, as long as fewer than one id per microsecond were ever
    allocated. The engine also lifts the next id above every producer id its WALs hold (:meth:`at_least`).

    Shared by two lanes (issue 23): the storage lane allocates for idempotent producers, the coordinator lane for
    transactional ones; a lock orders them (its writes are rare, one per block).

    Cluster mode (:meth:`cluster`, docs/cluster.md): a producer's partitions may be on several nodes, so an id must
    be unique in the cluster, not only on the node that gave it. The node's counter (the file above, unchanged) is
    then spread: its ``n``-th id is ``n * NODES + node id``, so two nodes never give the same id without asking one
    another (node ids are below :data:`NODES`), and none is below an id the node gave or saw before. The factor
    keeps ids within 63 bits while counters stay below 2**53 (the clock-based recovery starts near 2**51).
    """

    BLOCK: Final = 1000
    NODES: Final = 1024

    def __init__(self, path: Path, damage: DamageLog | None = None, clock: Clock = SYSTEM_CLOCK,
                 syncs: SyncLatency | None = None) -> None:
        self._path = path
        self._syncs = SyncLatency() if syncs is None else syncs  # its engine's fsync times
        self._clock = clock  # where ids go on when the file is lost
        self._loaded = self._load(damage)
        self._next = self._limit = self._loaded  # the counter: the next to give, and the durable block's end
        self._floor = 0  # the lowest id that may still be given (every id given or seen is below it)
        self._node: int | None = None  # cluster mode: this node's id (ids are spread by it)
        self._lock = threading.Lock()

    @staticmethod
    def create(path: Path, syncs: SyncLatency | None = None) -> None:
        """The file of a new data dir: ids start at 0 (its fsyncs timed into ``syncs``, the engine's)."""
        fileio.replace_file(path, lines.encode({"next_block": 0}), syncs=SyncLatency() if syncs is None else syncs)

    def _load(self, damage: DamageLog | None) -> int:
        raw = b""
        try:
            raw = self._path.read_bytes()
            value = lines.decode(raw.rstrip(b"\n"))["next_block"]
            if type(value) is not int or value < 0:
                raise ValueError(f"next block {value!r}")
            return value
        except FileNotFoundError:
            return self._recovered(damage, "producer ids: the file is missing", raw)
        except (ValueError, KeyError, TypeError) as exc:
            return self._recovered(damage, f"producer ids: {exc}", raw)

    def _recovered(self, damage: DamageLog | None, what: str, raw: bytes) -> int:
        recovered = self.recovered_next(self._clock)
        reason = f"{what}; ids go on from {recovered}, above any handed out before"
        if damage is None:
            log.warning("%s: %s", self._path, reason)
        else:
            damage.report(self._path, 0, len(raw), reason, "reset", raw)
        return recovered

    @classmethod
    def recovered_next(cls, clock: Clock) -> int:
        """Where ids go on when the file is lost (see the class docstring), by ``clock``'s wall time."""
        return clock.time_ns() // 1000 + cls.BLOCK

    def cluster(self, node: int) -> None:
        """Cluster mode as node ``node`` (see the class docstring); before any id is given in this mode."""
        if not 0 <= node < self.NODES:
            raise InvalidValue(f"node id {node}: a cluster's node ids must be below {self.NODES} (producer ids are "
                               "spread by them)")
        with self._lock:
            self._node = node
            self._next = max(self._loaded, self._counter(self._floor))

    def _counter(self, producer_id: int) -> int:
        """The least counter value whose id is not below ``producer_id``."""
        if self._node is None:
            return producer_id
        return max(0, -(-(producer_id - self._node) // self.NODES))

    def at_least(self, producer_id: int) -> None:
        """Never hand out an id below ``producer_id``."""
        with self._lock:
            self._floor = max(self._floor, producer_id)
            self._next = max(self._next, self._counter(producer_id))

    def allocate(self) -> int:
        with self._lock:
            n = self._allocate()
            pid = n if self._node is None else n * self.NODES + self._node
            self._floor = max(self._floor, pid + 1)
            return pid

    def _allocate(self) -> int:
        if self._next >= self._limit:
            limit = self._next + self.BLOCK
            try:
                fileio.replace_file(self._path, lines.encode({"next_block": limit}), syncs=self._syncs)
            except OSError as exc:
                raise StorageUnavailable(f"The producer id block could not be written ({exc.strerror or exc})") from None
            self._limit = limit
        pid = self._next
        self._next += 1
        return pid
