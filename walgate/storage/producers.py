"""Idempotent-producer state of one Kafka-native partition, and producer id allocation.

Kafka's ``ProducerStateManager`` / ``ProducerAppendInfo`` rules, per
(producer id, partition), for batches of an idempotent producer (producer id
>= 0; a producer id of -1 is not idempotent and is always appended):

* the five most recent batches (first sequence, last sequence, base offset)
  are kept; a batch repeating one of them is a *duplicate*: nothing is written
  and the original base offset is answered (a retry whose first answer was lost);
* an epoch below the producer's current one: INVALID_PRODUCER_EPOCH (fenced);
* an epoch above it starts over: its first sequence must be 0;
* otherwise the first sequence must follow the last one (wrapping at 2^31):
  OUT_OF_ORDER_SEQUENCE_NUMBER;
* a producer id this partition has no state for (new, or its batches were
  deleted by retention) is accepted at any sequence, as Kafka does.

The state is derived from the batch headers in the WAL, so it is rebuilt by
replaying them (:meth:`PartitionProducers.record`) when a topic is opened.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from walgate.storage import fileio, lines
from walgate.storage.damage import DamageLog
from walgate.storage.errors import StorageError, StorageUnavailable

__all__ = ["PartitionProducers", "ProducerIds", "DuplicateBatch", "SequenceError", "BATCHES_KEPT"]

log = logging.getLogger("walgate.producers")

BATCHES_KEPT: Final = 5
_SEQUENCE_WRAP: Final = 2**31


class SequenceError(StorageError):
    """A batch refused by the idempotence rules; ``kafka_error`` is the Kafka error name."""

    def __init__(self, kafka_error: str, message: str) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    """The batch was appended before: its base offset."""

    base_offset: int


@dataclass(slots=True)
class _Producer:
    epoch: int
    batches: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))


class PartitionProducers:
    """Producer id -> epoch and recent batches, for one partition."""

    def __init__(self) -> None:
        self._producers: dict[int, _Producer] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int, count: int) -> DuplicateBatch | None:
        """None if the batch may be appended, a :class:`DuplicateBatch`, or raises :class:`SequenceError`."""
        if producer_id < 0:
            return None
        state = self._producers.get(producer_id)
        if state is None:
            return None
        if epoch < state.epoch:
            raise SequenceError("invalid_producer_epoch",
                                f"producer {producer_id} epoch {epoch} is older than its current epoch {state.epoch}")
        if epoch > state.epoch:
            if first_seq != 0:
                raise SequenceError("out_of_order_sequence_number",
                                    f"producer {producer_id}: a new epoch {epoch} must start at sequence 0, not {first_seq}")
            return None
        last_seq = (first_seq + count - 1) % _SEQUENCE_WRAP
        for first, last, base_offset in state.batches:
            if first == first_seq and last == last_seq:
                return DuplicateBatch(base_offset)
        expected = (state.batches[-1][1] + 1) % _SEQUENCE_WRAP if state.batches else first_seq
        if first_seq != expected:
            raise SequenceError("out_of_order_sequence_number",
                                f"producer {producer_id}: sequence {first_seq}, expected {expected}")
        return None

    def record(self, producer_id: int, epoch: int, first_seq: int, count: int, base_offset: int) -> None:
        """Remember an appended batch (also used to replay the WAL)."""
        if producer_id < 0:
            return
        state = self._producers.get(producer_id)
        if state is None or epoch > state.epoch:
            state = self._producers[producer_id] = _Producer(epoch)
        state.batches.append((first_seq, (first_seq + count - 1) % _SEQUENCE_WRAP, base_offset))

    def max_producer_id(self) -> int:
        """The largest producer id with state here (-1: none)."""
        return max(self._producers, default=-1)


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
    """

    BLOCK: Final = 1000

    def __init__(self, path: Path, damage: DamageLog | None = None) -> None:
        self._path = path
        self._next = self._load(damage)
        self._limit = self._next

    @staticmethod
    def create(path: Path) -> None:
        """The file of a new data dir: ids start at 0."""
        fileio.replace_file(path, lines.encode({"next_block": 0}))

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
        recovered = self.recovered_next()
        reason = f"{what}; ids go on from {recovered}, above any handed out before"
        if damage is None:
            log.warning("%s: %s", self._path, reason)
        else:
            damage.report(self._path, 0, len(raw), reason, "reset", raw)
        return recovered

    @classmethod
    def recovered_next(cls) -> int:
        """Where ids go on when the file is lost (see the class docstring)."""
        return time.time_ns() // 1000 + cls.BLOCK

    def at_least(self, producer_id: int) -> None:
        """Never hand out an id below ``producer_id``."""
        self._next = max(self._next, producer_id)

    def allocate(self) -> int:
        if self._next >= self._limit:
            limit = self._next + self.BLOCK
            try:
                fileio.replace_file(self._path, lines.encode({"next_block": limit}))
            except OSError as exc:
                raise StorageUnavailable(f"The producer id block could not be written ({exc.strerror or exc})") from None
            self._limit = limit
        pid = self._next
        self._next += 1
        return pid
