"""A connection's sequence gaps: an idempotent producer's batches refused before their append, which the batches it
sent after them on that connection may not pass.

A connection's Produce requests are appended while the ones before them wait for their answers
(:mod:`walgate.gateway.kafka.answer_order`); Kafka's broker reads a connection's next request only once it answered
the one before. So here a client's pipelined batches of a partition can meet the broker in different states: batch
``s`` refused before its append (NOT_ENOUGH_REPLICAS while the ISR is short, say), the ISR whole again, batch
``s + 1`` then checked, and refused OUT_OF_ORDER_SEQUENCE_NUMBER — which Kafka's broker would never have answered,
having appended ``s`` and ``s + 1`` once the answer before them was given. librdkafka takes that
OUT_OF_ORDER_SEQUENCE_NUMBER of a batch after a failed one as a sequence desynchronization it recovers from by bumping
its producer epoch (KIP-360) for every partition, and sends every batch not acknowledged yet again under new sequence
numbers: one an old leader had appended and its follower copied, whose answer the leader's death lost, is then
stored twice (what CI's duplicate of 2026-12-02 fits, ``value 212 at offsets [106, 107]`` written while the
partition's ISR was below ``min.insync.replicas``; not reproduced here in 22 runs of its test). So a batch beyond a gap this connection left
gets the refusal that left it, without its append, as Kafka's broker would have refused it had it met the same
state: the client sends it again after the refused one, in order.

Invariants: a gap is ``(producer id, epoch, first sequence, error)`` per partition, noted when that partition of a
request is refused with an error in :data:`GAP_ERRORS` (the refusals made before any append: nothing of the batch is
in the log, and the client retries it); it ends when that producer's batch at the gap's sequence comes again (then
checked as usual: it may leave the gap again), or a batch of another producer id or epoch comes, or once
:data:`IN_FLIGHT_AFTER` batches after it were refused (an idempotent producer keeps at most five requests in flight
on a connection, Kafka's ``max.in.flight.requests.per.connection`` bound: more came after it only if the client gave
the refused batch up, and then the sequence check answers what follows, as Kafka's would); a batch after the gap's
sequence (within half the sequence space, wrapping at 2^31) is refused with the gap's error; one before it (a retry
of an earlier batch) is checked as usual. Connection state only: one object per connection, used by its
requests in the order they came (the event loop).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from walgate.wire import batch_header
from walgate.wire.errors import ErrorCode, WireError

__all__ = ["GAP_ERRORS", "Gap", "ProduceGaps"]

GAP_ERRORS: Final = frozenset({ErrorCode.not_enough_replicas, ErrorCode.not_leader_or_follower,
                               ErrorCode.kafka_storage_error})
"""The refusals of a partition's batches made before their append that clients retry in order."""

IN_FLIGHT_AFTER: Final = 4
"""How many of a producer's batches of a partition can follow a refused one on its connection before the client
learns of the refusal: Kafka's five requests in flight for an idempotent producer, less the refused one."""

_SEQUENCE_WRAP: Final = 2**31


@dataclass(frozen=True, slots=True)
class Gap:
    """A batch of ``producer_id`` at ``epoch`` from sequence ``first_seq`` refused with ``error`` before its append;
    ``current_leader``: the (leader id, leader epoch) that refusal named (KIP-951), which the answers beyond it name
    too."""

    producer_id: int
    epoch: int
    first_seq: int
    error: ErrorCode
    current_leader: tuple[int, int] | None = None


def _first_batch(records: bytes) -> tuple[int, int, int] | None:
    """(producer id, epoch, first sequence) of the first batch of ``records``; None when there is no whole header
    (validation answers it) or no idempotent producer."""
    try:
        info = batch_header(records)
    except WireError:
        return None
    return None if info.producer_id < 0 else (info.producer_id, info.producer_epoch, info.base_sequence)


class ProduceGaps:
    """One connection's gaps (the module docstring), by (topic, partition)."""

    def __init__(self) -> None:
        self._gaps: dict[tuple[str, int], Gap] = {}
        self._after: dict[tuple[str, int], int] = {}  # batches refused beyond each gap

    def beyond(self, topic: str, partition: int, records: bytes) -> Gap | None:
        """The gap that partition ``records`` (its produced batches) lie beyond, to be refused with its error without
        their append; None when they may be checked as usual (the gap, when they close it or are another producer's
        or epoch's, forgotten)."""
        key = (topic, partition)
        gap = self._gaps.get(key)
        if gap is None:
            return None
        first = _first_batch(records)
        if first is None:
            return None
        producer_id, epoch, seq = first
        if (producer_id != gap.producer_id or epoch != gap.epoch or seq == gap.first_seq
                or self._after[key] == IN_FLIGHT_AFTER):
            del self._gaps[key], self._after[key]
            return None
        if not _after(seq, gap.first_seq):
            return None
        self._after[key] += 1
        return gap

    def refused(self, topic: str, partition: int, records: bytes, error: int,
                current_leader: tuple[int, int] | None = None) -> None:
        """Partition ``records`` were answered ``error`` (naming ``current_leader``, KIP-951) by the request that
        brought them: a gap when it is one of :data:`GAP_ERRORS` and they are an idempotent producer's (the earliest
        such batch of the partition kept)."""
        if error not in GAP_ERRORS:
            return
        first = _first_batch(records)
        if first is None:
            return
        producer_id, epoch, seq = first
        gap = self._gaps.get((topic, partition))
        if gap is None or (producer_id, epoch) != (gap.producer_id, gap.epoch) or _after(gap.first_seq, seq):
            self._gaps[(topic, partition)] = Gap(producer_id, epoch, seq, ErrorCode(error), current_leader)
            self._after[(topic, partition)] = 0


def _after(seq: int, other: int) -> bool:
    """Whether sequence ``seq`` comes after ``other`` (within half the sequence space: sequences wrap at 2^31)."""
    return 0 < (seq - other) % _SEQUENCE_WRAP < _SEQUENCE_WRAP // 2
