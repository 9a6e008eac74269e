"""A replica's leader-epoch cache and the follower's truncation by epoch (KIP-101, KIP-279).

Every replica keeps, beside its log, which leader epoch wrote which part of it: ``epoch -> start offset`` of the
first entry that epoch's leader wrote (Kafka's ``LeaderEpochFileCache``; in a vnode the offset is the WAL version).
A leader appends an entry when it becomes leader; a follower when it appends the first fetched entry of a new epoch;
both cut it back when their log is truncated. A follower that starts following a new leader asks the leader where
its own latest epoch ends (OffsetForLeaderEpoch) and truncates there before fetching, so that a tail written by a
leader that later lost its leadership never survives on a follower (the divergence KIP-101 fixed), and repeats while
the leader does not know the follower's epoch (a fast double failover, KIP-279).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_OFFSET", "EpochEntry", "EpochEnd", "LeaderEpochCache", "TruncationStep",
           "follower_truncation"]

UNDEFINED_EPOCH = -1
"""Kafka's ``UNDEFINED_EPOCH``: no epoch (an empty cache, or an epoch below every epoch the leader knows)."""
UNDEFINED_OFFSET = -1
"""Kafka's ``UNDEFINED_EPOCH_OFFSET``: the leader holds nothing to compare with."""


@dataclass(frozen=True)
class EpochEntry:
    """The first offset written in leader epoch ``epoch``."""

    epoch: int
    start_offset: int


@dataclass(frozen=True)
class EpochEnd:
    """An OffsetForLeaderEpoch answer: the largest epoch ``<=`` the one asked that the log holds, and the offset
    where it ends (the start offset of the next epoch, or the log end for the latest epoch)."""

    epoch: int
    end_offset: int


class LeaderEpochCache:
    """``epoch -> start offset`` of one replica's log.

    Invariant: epochs strictly increase, start offsets never decrease, and every start offset is below the log end
    the cache was last told about (an epoch that wrote nothing before a truncation is dropped with it).
    """

    def __init__(self, entries: tuple[EpochEntry, ...] = ()) -> None:
        self._entries: list[EpochEntry] = []
        for entry in entries:
            self.assign(entry.epoch, entry.start_offset)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The latest epoch, or :data:`UNDEFINED_EPOCH` when the cache is empty."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (a leader taking over, or a follower appending the
        first entry of ``epoch``). The same epoch again is a no-op; an entry that would break the invariant
        (a later epoch or a later start already recorded) is replaced, as Kafka's ``assign`` does when the log
        was truncated under it."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"leader epoch {epoch} at offset {start_offset}: both must be >= 0")
        if self._entries and self._entries[-1].epoch == epoch and self._entries[-1].start_offset <= start_offset:
            return
        self._entries = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        self._entries.append(EpochEntry(epoch, start_offset))

    def epoch_at(self, offset: int) -> int:
        """The epoch whose leader wrote ``offset``: the latest one starting at or before it (Kafka's
        ``LeaderEpochFileCache.epochForOffset``); :data:`UNDEFINED_EPOCH` when every epoch starts after it."""
        found = UNDEFINED_EPOCH
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset`` entries: drop the epochs that start at or after it."""
        self._entries = [e for e in self._entries if e.start_offset < end_offset]

    def end_offset_for(self, epoch: int, log_end: int) -> EpochEnd:
        """OffsetForLeaderEpoch as a leader answers it (KIP-101; Kafka's ``LeaderEpochFileCache.endOffsetFor``).

        * the latest epoch: it ends at the log end;
        * an earlier epoch the cache holds, or one between two it holds: the largest epoch ``<= epoch`` and the
          start of the first epoch after it;
        * an epoch below every one held: ``epoch`` itself and the first start offset (what lies below was never
          written by a later leader);
        * an undefined epoch, an empty cache or an epoch above the latest: undefined.
        """
        if epoch == UNDEFINED_EPOCH or not self._entries or epoch > self._entries[-1].epoch:
            return EpochEnd(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        if epoch == self._entries[-1].epoch:
            return EpochEnd(epoch, log_end)
        higher = next(e for e in self._entries if e.epoch > epoch)
        floor = [e for e in self._entries if e.epoch <= epoch]
        if not floor:
            return EpochEnd(epoch, higher.start_offset)
        return EpochEnd(floor[-1].epoch, higher.start_offset)


@dataclass(frozen=True)
class TruncationStep:
    """Where a follower truncates its log after one OffsetForLeaderEpoch answer; ``done`` false means: ask the
    leader again with the latest epoch left after this truncation (KIP-279)."""

    offset: int
    done: bool


def follower_truncation(cache: LeaderEpochCache, log_end: int, answer: EpochEnd) -> TruncationStep:
    """The truncation a follower does when the leader answered ``answer`` for the follower's latest epoch
    (KIP-101, KIP-279; Kafka's ``AbstractFetcherThread.getOffsetTruncationState``).

    * The leader holds nothing (an undefined end offset): everything goes, the follower fetches from the start.
    * The follower also holds ``answer.epoch``: truncate to the smaller of the two ends of that epoch; done.
    * The follower does not hold it (the leader's answer names an older epoch than the follower's): truncate to
      where the follower's first epoch after it starts, and ask again with the follower's epoch now latest. Each
      repetition lowers the follower's latest epoch, so the exchange ends.
    """
    if answer.end_offset == UNDEFINED_OFFSET:
        return TruncationStep(0, True)
    if answer.epoch == UNDEFINED_EPOCH:
        return TruncationStep(min(answer.end_offset, log_end), True)
    own = cache.end_offset_for(answer.epoch, log_end)
    if own.epoch == answer.epoch:
        return TruncationStep(min(answer.end_offset, own.end_offset, log_end), True)
    if own.end_offset == UNDEFINED_OFFSET:
        return TruncationStep(min(answer.end_offset, log_end), True)
    return TruncationStep(min(answer.end_offset, own.end_offset, log_end), False)
