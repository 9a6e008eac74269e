"""One share-partition's record states (KIP-932, Kafka's ``SharePartition``): which records of one topic-partition a
share group has delivered, to whom, how often, and which are done.

Offsets below :attr:`SharePartition.start` (the share-partition start offset, SPSO) are done. Offsets in
``[start, end)`` each have a state in :attr:`SharePartition.records`; offsets from :attr:`SharePartition.end` (the
end offset, SPEO) on were never acquired: AVAILABLE with delivery count 0. States and transitions:

* AVAILABLE → ACQUIRED by :meth:`SharePartition.acquire` (one member, a lock until ``now + lock_ms``); the
  delivery count goes up by one at each acquisition.
* ACQUIRED → ACKNOWLEDGED (ACCEPT, or GAP: an offset holding no record) or ARCHIVED (REJECT), by the member holding
  it (:meth:`SharePartition.acknowledge`); RELEASE, an expired lock (:meth:`SharePartition.expire`) or the member
  leaving (:meth:`SharePartition.release_member`) make it AVAILABLE again, or ARCHIVED when its delivery count has
  reached the limit; RENEW keeps it ACQUIRED with a new lock.
* ACKNOWLEDGED and ARCHIVED are final. The start offset moves past every final record at its head, so every
  record below it is done and ``records`` only holds what is in flight or after it.

Invariants (tested with seeded random sequences): a record is ACQUIRED by at most one member; its delivery count
never goes down and grows by exactly one per acquisition; every record the group acknowledges or that reaches the
limit ends ACKNOWLEDGED or ARCHIVED and is never acquired again. An acknowledgement is checked whole before anything
changes: a range holding a record the member does not hold is refused (INVALID_RECORD_STATE) and changes nothing.

Durable form (:meth:`SharePartition.to_record`, :meth:`SharePartition.from_record`): the start offset and the
states after it as ranges; an ACQUIRED record is written AVAILABLE with its delivery count (a restarted node
delivers it again, and a poison record still counts towards the limit). Pure: time is the ``now_ms`` passed in.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

__all__ = ["Ack", "AckError", "Acquired", "RecordState", "SharePartition", "check_batch", "ranges_of"]


class RecordState(enum.IntEnum):
    """A record's state; the values are Kafka's ``RecordState`` ids (persisted)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class Ack(enum.IntEnum):
    """Acknowledge types as they travel in ShareFetch / ShareAcknowledge."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class AckError(ValueError):
    """An acknowledgement the partition's state refuses (Kafka's INVALID_RECORD_STATE or INVALID_REQUEST)."""

    def __init__(self, message: str, invalid_request: bool = False) -> None:
        super().__init__(message)
        self.invalid_request = invalid_request


class Acquired(NamedTuple):
    """Consecutive offsets ``first..last`` acquired with the same delivery count."""

    first: int
    last: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class _Record:
    state: RecordState
    count: int  # deliveries so far
    member: str = ""  # the holder while ACQUIRED
    deadline_ms: int = 0  # the holder's lock, while ACQUIRED


_FINAL: Final = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass
class SharePartition:
    """The record states of one share-partition (see the module docstring). ``lock_ms`` and ``delivery_limit`` are the
    group's ``share.record.lock.duration.ms`` and ``share.delivery.count.limit``; ``max_in_flight`` bounds the
    records between the start offset and the end offset (Kafka's ``group.share.partition.max.record.locks``)."""

    start: int
    lock_ms: int
    delivery_limit: int
    max_in_flight: int = 2000
    records: dict[int, _Record] = field(default_factory=dict)
    end: int = -1  # -1: start
    archived: int = 0  # records archived here since it was loaded (REJECT, the delivery limit): for metrics
    redelivered: int = 0  # acquisitions of a record delivered before, since it was loaded: for metrics
    _deadline: int | None = field(default=None, repr=False)  # the earliest lock, while _deadline_known
    _deadline_known: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if self.end < self.start:
            self.end = self.start

    def copy(self) -> SharePartition:
        """An independent copy (records are immutable values): change it, and keep it only once it is durable."""
        return SharePartition(self.start, self.lock_ms, self.delivery_limit, self.max_in_flight, dict(self.records),
                              self.end, self.archived, self.redelivered)

    def acquired(self) -> int:
        """Records ACQUIRED now."""
        return sum(1 for r in self.records.values() if r.state == RecordState.ACQUIRED)

    def state(self, offset: int) -> tuple[RecordState, int]:
        """(state, delivery count) of ``offset``."""
        if offset < self.start:
            return RecordState.ACKNOWLEDGED, 0
        rec = self.records.get(offset)
        return (rec.state, rec.count) if rec is not None else (RecordState.AVAILABLE, 0)

    def holder(self, offset: int) -> str | None:
        rec = self.records.get(offset)
        return rec.member if rec is not None and rec.state == RecordState.ACQUIRED else None

    def in_flight(self) -> int:
        """Records ACQUIRED now."""
        return sum(1 for r in self.records.values() if r.state == RecordState.ACQUIRED)

    def done(self) -> int:
        """Records from the start offset on that are ACKNOWLEDGED or ARCHIVED (they count for no lag)."""
        return sum(1 for r in self.records.values() if r.state in _FINAL)

    def next_deadline(self) -> int | None:
        """The earliest lock deadline, None when nothing is acquired (kept between changes: every request asks)."""
        if not self._deadline_known:
            deadlines = [r.deadline_ms for r in self.records.values() if r.state == RecordState.ACQUIRED]
            self._deadline, self._deadline_known = (min(deadlines) if deadlines else None), True
        return self._deadline

    def move_start(self, log_start: int) -> None:
        """The log's start moved (retention, DeleteRecords): records below it are gone, so done."""
        if log_start > self.start:
            self._deadline_known = False
            for offset in range(self.start, min(log_start, self.end)):
                self.records.pop(offset, None)
            self.start = log_start
            self.end = max(self.end, log_start)

    def first_available(self, log_end: int) -> int | None:
        """The lowest offset below ``log_end`` that :meth:`acquire` would take now (None: none)."""
        for offset in range(self.start, min(self.end, log_end)):
            rec = self.records.get(offset)
            if rec is None or rec.state == RecordState.AVAILABLE:
                return offset
        if self.end < log_end and self.end - self.start < self.max_in_flight:
            return self.end
        return None

    def acquire(self, member: str, log_end: int, max_records: int, now_ms: int) -> list[Acquired]:
        """Acquire for ``member`` up to ``max_records`` AVAILABLE records below ``log_end``, lowest offsets first
        (expired locks are released first); returns them as ranges of one delivery count."""
        self.expire(now_ms)
        taken: list[tuple[int, int]] = []
        deadline = now_ms + self.lock_ms
        offset = self.start
        while len(taken) < max_records and offset < log_end:
            if offset >= self.end:
                if offset - self.start >= self.max_in_flight:
                    break
                self.end = offset + 1
            rec = self.records.get(offset)
            if rec is None or rec.state == RecordState.AVAILABLE:
                count = (rec.count if rec is not None else 0) + 1
                if count > 1:
                    self.redelivered += 1
                self.records[offset] = _Record(RecordState.ACQUIRED, count, member, deadline)
                taken.append((offset, count))
                if self._deadline_known and (self._deadline is None or deadline < self._deadline):
                    self._deadline = deadline
            offset += 1
        return list(ranges_of(taken))

    def acknowledge(self, member: str, first: int, last: int, types: list[int], now_ms: int) -> None:
        """Apply one acknowledgement batch of ``member``: ``types`` holds one type for the whole range or one per
        offset. Refuses (:class:`AckError`), changing nothing, a range holding a record ``member`` does not hold."""
        check_batch(first, last, types)
        for offset in range(first, last + 1):
            rec = self.records.get(offset) if offset >= self.start else None
            if rec is None or rec.state != RecordState.ACQUIRED or rec.member != member:
                raise AckError(f"offset {offset} is not acquired by this member")
        for offset in range(first, last + 1):
            kind = Ack(types[0] if len(types) == 1 else types[offset - first])
            rec = self.records[offset]
            if kind in (Ack.ACCEPT, Ack.GAP):
                self.records[offset] = _Record(RecordState.ACKNOWLEDGED, rec.count)
            elif kind == Ack.REJECT:
                self.records[offset] = _Record(RecordState.ARCHIVED, rec.count)
                self.archived += 1
            elif kind == Ack.RELEASE:
                self.records[offset] = self._released(rec)
            else:
                self.records[offset] = _Record(RecordState.ACQUIRED, rec.count, member, now_ms + self.lock_ms)
        self._deadline_known = False
        self._advance()

    def expire(self, now_ms: int) -> bool:
        """Release every record whose lock ended by ``now_ms``; whether any was."""
        deadline = self.next_deadline()
        if deadline is None or deadline > now_ms:
            return False
        self._deadline_known = False
        expired = [o for o, r in self.records.items() if r.state == RecordState.ACQUIRED and r.deadline_ms <= now_ms]
        for offset in expired:
            self.records[offset] = self._released(self.records[offset])
        self._advance()
        return bool(expired)

    def release_member(self, member: str) -> bool:
        """Release every record ``member`` holds (it left or closed its session); whether it held any."""
        held = [o for o, r in self.records.items() if r.state == RecordState.ACQUIRED and r.member == member]
        self._deadline_known = False
        for offset in held:
            self.records[offset] = self._released(self.records[offset])
        self._advance()
        return bool(held)

    def _released(self, rec: _Record) -> _Record:
        if rec.count >= self.delivery_limit:
            self.archived += 1
            return _Record(RecordState.ARCHIVED, rec.count)
        return _Record(RecordState.AVAILABLE, rec.count)

    def _advance(self) -> None:
        while self.start < self.end:
            rec = self.records.get(self.start)
            if rec is None or rec.state not in _FINAL:
                break
            del self.records[self.start]
            self.start += 1

    def to_record(self) -> dict[str, Any]:
        """The durable form (module docstring): ``{"s": start, "e": end, "r": [[first, last, state, count], ...]}``."""
        runs: list[list[int]] = []
        for offset in range(self.start, self.end):
            state, count = self.state(offset)
            if state == RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            if runs and runs[-1][1] == offset - 1 and runs[-1][2] == state and runs[-1][3] == count:
                runs[-1][1] = offset
            else:
                runs.append([offset, offset, int(state), count])
        return {"s": self.start, "e": self.end, "r": runs}

    @classmethod
    def from_record(cls, value: Any, lock_ms: int, delivery_limit: int, max_in_flight: int = 2000) -> SharePartition:
        """The partition :meth:`to_record` wrote; raises KeyError, TypeError or ValueError on anything else."""
        start, end, runs = int(value["s"]), int(value["e"]), value["r"]
        if not 0 <= start <= end:
            raise ValueError(f"bad share-partition offsets {start}..{end}")
        sp = cls(start, lock_ms, delivery_limit, max_in_flight, end=end)
        for first, last, state, count in runs:
            if not start <= int(first) <= int(last) < end:
                raise ValueError(f"state range {first}..{last} outside {start}..{end}")
            kind = RecordState(int(state))
            if kind == RecordState.ACQUIRED:
                raise ValueError("an acquired record was recorded")
            for offset in range(int(first), int(last) + 1):
                sp.records[offset] = _Record(kind, int(count))
        sp._advance()
        return sp


def check_batch(first: int, last: int, types: list[int]) -> None:
    """Refuse (:class:`AckError`, INVALID_REQUEST) a malformed acknowledgement batch: an empty range, a type count
    that is neither one nor one per offset, an unknown type."""
    if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
        raise AckError(f"bad acknowledgement batch {first}..{last} with {len(types)} types", True)
    for t in types:
        if t not in Ack.__members__.values():
            raise AckError(f"unknown acknowledge type {t}", True)


def ranges_of(taken: list[tuple[int, int]]) -> Iterator[Acquired]:
    """(offset, delivery count) pairs in offset order as ranges of consecutive offsets with one count."""
    run: list[int] | None = None
    for offset, count in taken:
        if run is not None and offset == run[1] + 1 and count == run[2]:
            run[1] = offset
            continue
        if run is not None:
            yield Acquired(*run)
        run = [offset, offset, count]
    if run is not None:
        yield Acquired(*run)
