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

import json
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from walgate.storage.errors import StorageError

__all__ = ["PartitionProducers", "ProducerIds", "DuplicateBatch", "SequenceError", "BATCHES_KEPT"]

BATCHES_KEPT: Final = 5
_SEQUENCE_WRAP: Final = 2**31


class SequenceError(StorageError):
    """A batch refused by the idempotence rules; ``code`` is the Kafka error name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


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


class ProducerIds:
    """Allocates producer ids in durable blocks, so none is handed out twice across restarts.

    The file holds the first id of the next block; it is advanced (and fsynced)
    before any id of a new block is given out, as Kafka's broker reserves blocks.
    """

    BLOCK: Final = 1000

    def __init__(self, path: Path) -> None:
        self._path = path
        self._next = json.loads(path.read_text())["next_block"] if path.exists() else 0
        self._limit = self._next

    def allocate(self) -> int:
        if self._next >= self._limit:
            self._limit = self._next + self.BLOCK
            tmp = self._path.with_suffix(".tmp")
            with tmp.open("w") as f:
                json.dump({"next_block": self._limit}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path)
        pid = self._next
        self._next += 1
        return pid
