"""A share-partition's durable value as the share coordinator's state RPCs carry it (KIP-932: WriteShareGroupState,
ReadShareGroupState), and the leader epoch that fences a deposed share-partition leader's writes.

The value is :meth:`SharePartition.to_record <walgate.coordinator.share_partition.SharePartition.to_record>`'s
``{"s": start, "e": end, "r": [[first, last, state, count], ...]}``, whose runs cover ``[start, end)`` without a
gap. On the wire it is the start offset and Kafka's state batches (first offset, last offset, delivery state,
delivery count), one per run; ``end`` is the last batch's last offset + 1 (``start`` without batches). walgate's
persister always writes a share-partition's whole state, so a start offset of -1 with no batches (Kafka's "start
offset not written" with nothing to write, which Kafka's coordinator never gets from its own leaders) is walgate's
deletion of the state, and a read of a share-partition without state answers the same.

A value stored by the coordinator records, under ``"l"``, the leader epoch of the data partition whose leader wrote
it (Kafka's ``ShareCoordinatorShard`` keeps it beside the state): a write of an older leader epoch is refused
(FENCED_LEADER_EPOCH, :func:`fenced`), so a leader that lost its partition cannot overwrite what its successor
wrote. :meth:`SharePartition.from_record` ignores it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

__all__ = ["NO_START", "StateBatch", "WireState", "epoch_of", "fenced", "from_wire", "to_wire", "with_epoch"]

NO_START = -1
"""The start offset of a deletion, and of a read without state."""


class StateBatch(NamedTuple):
    first: int
    last: int
    state: int
    delivery_count: int


class WireState(NamedTuple):
    """(start offset, state batches) of a share-partition as the state RPCs carry it."""

    start: int
    batches: list[StateBatch]


def to_wire(value: Any) -> WireState:
    """The wire form of a durable value (None: a deletion)."""
    if value is None:
        return WireState(NO_START, [])
    return WireState(int(value["s"]), [StateBatch(*(int(x) for x in run)) for run in value["r"]])


def from_wire(start: int, batches: Iterable[Sequence[int]]) -> Any:
    """The durable value of a wire form (None: no state, or a deletion); ValueError when the batches are not runs
    covering the offsets from ``start`` one after another (what :func:`to_wire` makes)."""
    runs = [[int(b[0]), int(b[1]), int(b[2]), int(b[3])] for b in batches]
    if start == NO_START and not runs:
        return None
    end = start
    for first, last, _, _ in runs:
        if first != end or last < first:
            raise ValueError(f"state batch {first}..{last} does not follow offset {end - 1}")
        end = last + 1
    if start < 0:
        raise ValueError(f"bad start offset {start}")
    return {"s": start, "e": end, "r": runs}


def with_epoch(value: Any, leader_epoch: int) -> Any:
    """``value`` (None: a deletion, kept so) recorded as written by the leader of ``leader_epoch``."""
    return None if value is None else {**value, "l": leader_epoch}


def epoch_of(value: Any) -> int:
    """The leader epoch a stored value was written in (-1: none recorded)."""
    return int(value.get("l", -1)) if isinstance(value, dict) else -1


def fenced(stored: Any, leader_epoch: int) -> bool:
    """Whether a write of ``leader_epoch`` is refused over the ``stored`` value (None: no state): an older epoch
    than the one it was written in."""
    return stored is not None and leader_epoch < epoch_of(stored)
