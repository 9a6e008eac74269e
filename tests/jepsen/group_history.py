"""A checker of what a consumer group's members saw while its coordinator failed (issue 25, "coordinator killed
mid-rebalance and mid-commit"): pure, typed; tests/cluster/history.py checks the records, this the group.

A history is the list of what the clients completed, in the order they did it (one lock orders them):

- :class:`Produced`: a record the producer had acknowledged (acks=all), at ``offset`` of ``partition``;
- :class:`Assigned` / :class:`Revoked`: a member's rebalance callbacks (a lost assignment is a revocation): between
  the two, the member owns the partitions; its first read of a partition after :class:`Assigned` is where it chose
  to start (its group's committed offset, or the log start with none);
- :class:`Read`: a member read (partition, offset, value);
- :class:`Commit`: a member's (or any client's) OffsetCommit of ``offset`` (the next offset to read) for
  ``partition``: ``ok`` when the coordinator acknowledged it, ``info`` when the client does not know (an error, a
  timeout: it may or may not be held);
- :class:`Fetched`: the group's committed offsets as one OffsetFetch answered them (partitions with none left out).

:func:`check` returns the violations (empty: none):

- ``unconsumed``: an acknowledged record no member read;
- ``commit-backwards``: an acknowledged commit below one acknowledged before it (a commit's acknowledgement is
  recorded before its member can rejoin, so a later one is from the same member or a later owner), or an OffsetFetch
  answer below an earlier one or below an earlier acknowledged commit;
- ``commit-lost``: an acknowledged commit above the group's offset read at the end (``final``: an OffsetFetch
  after every client stopped, from whichever node coordinates then);
- ``reread-below-commit``: a member's reads of a partition after its assignment start below the highest commit
  acknowledged before that assignment (at-least-once lets a new owner read again only what follows the last
  acknowledged commit);
- ``session-gap`` / ``session-rewind``: within one assignment a member's next read of a partition is not the next
  offset (the topic is written by one idempotent producer, without transactions: its offsets are contiguous);
- ``read-unowned``: a member read a partition outside its assignments.

:func:`rereads` counts the records read more than once (each is after the last acknowledged commit before its
reader's assignment, or ``reread-below-commit`` names it).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Produced", "Assigned", "Revoked", "Read", "Commit", "Fetched", "GroupOp", "GroupViolation", "check",
           "rereads", "owners"]

Kind = Literal["unconsumed", "commit-backwards", "commit-lost", "reread-below-commit", "session-gap",
               "session-rewind", "read-unowned"]


@dataclass(frozen=True)
class Produced:
    partition: int
    offset: int
    value: int


@dataclass(frozen=True)
class Assigned:
    member: str
    partitions: frozenset[int]


@dataclass(frozen=True)
class Revoked:
    member: str
    partitions: frozenset[int]


@dataclass(frozen=True)
class Read:
    member: str
    partition: int
    offset: int
    value: int


@dataclass(frozen=True)
class Commit:
    member: str
    partition: int
    offset: int
    outcome: Literal["ok", "info"]


@dataclass(frozen=True)
class Fetched:
    offsets: Mapping[int, int]


GroupOp = Produced | Assigned | Revoked | Read | Commit | Fetched


@dataclass(frozen=True)
class GroupViolation:
    kind: Kind
    partition: int
    detail: str


def check(history: Sequence[GroupOp], final: Mapping[int, int] | None = None) -> list[GroupViolation]:
    """Every violation in ``history`` (``final``: the group's committed offsets read at the end, when known)."""
    return (_unconsumed(history) + _backwards(history) + ([] if final is None else _lost(history, final))
            + _sessions(history))


def rereads(history: Sequence[GroupOp]) -> int:
    """How many reads were of a record read before."""
    counts = Counter((op.partition, op.offset) for op in history if isinstance(op, Read))
    return sum(n - 1 for n in counts.values())


def owners(assignments: Mapping[str, frozenset[int]], partitions: int) -> list[str]:
    """What is wrong with ``assignments`` (member -> partitions it holds) as a settled group's of a topic of
    ``partitions`` partitions: a partition held by no member or by several (empty: each by exactly one)."""
    held: dict[int, list[str]] = defaultdict(list)
    for member, parts in sorted(assignments.items()):
        for p in parts:
            held[p].append(member)
    return [f"partition {p} held by {held[p] or 'no member'}" for p in range(partitions) if len(held[p]) != 1]


def _unconsumed(history: Sequence[GroupOp]) -> list[GroupViolation]:
    read = {(op.partition, op.offset) for op in history if isinstance(op, Read)}
    return [GroupViolation("unconsumed", op.partition, f"record {op.value} at offset {op.offset} was acknowledged"
                           " and never read")
            for op in history if isinstance(op, Produced) and (op.partition, op.offset) not in read]


def _backwards(history: Sequence[GroupOp]) -> list[GroupViolation]:
    acked: dict[int, Commit] = {}  # partition -> the highest commit acknowledged so far
    fetched: dict[int, int] = {}  # partition -> the highest offset an OffsetFetch answered so far
    out = []
    for op in history:
        if isinstance(op, Commit) and op.outcome == "ok":
            last = acked.get(op.partition)
            if last is not None and op.offset < last.offset:
                out.append(GroupViolation("commit-backwards", op.partition, f"{op.member}'s commit of {op.offset} was"
                                          f" acknowledged after {last.member}'s of {last.offset}"))
            else:
                acked[op.partition] = op
        elif isinstance(op, Fetched):
            for p, offset in sorted(op.offsets.items()):
                bound = max(fetched.get(p, -1), acked[p].offset if p in acked else -1)
                if offset < bound:
                    out.append(GroupViolation("commit-backwards", p, f"OffsetFetch answered {offset} after {bound}"
                                              " was committed (acknowledged or answered before)"))
                fetched[p] = max(fetched.get(p, -1), offset)
    return out


def _lost(history: Sequence[GroupOp], final: Mapping[int, int]) -> list[GroupViolation]:
    highest: dict[int, Commit] = {}
    for op in history:
        if isinstance(op, Commit) and op.outcome == "ok" and (op.partition not in highest
                                                              or op.offset > highest[op.partition].offset):
            highest[op.partition] = op
    return [GroupViolation("commit-lost", p, f"{c.member}'s commit of {c.offset} was acknowledged, the group's"
                           f" offset read at the end is {final.get(p, 'none')}")
            for p, c in sorted(highest.items()) if c.offset > final.get(p, -1)]


def _sessions(history: Sequence[GroupOp]) -> list[GroupViolation]:
    acked: dict[int, int] = {}  # partition -> the highest acknowledged commit so far
    floor: dict[tuple[str, int], int] = {}  # (member, partition) -> the acknowledged commit when it was assigned
    last: dict[tuple[str, int], int | None] = {}  # (member, partition) -> its last read in this assignment
    out = []
    for op in history:
        if isinstance(op, Commit) and op.outcome == "ok":
            acked[op.partition] = max(acked.get(op.partition, 0), op.offset)
        elif isinstance(op, Assigned):
            for p in op.partitions:
                floor[(op.member, p)] = acked.get(p, 0)
                last[(op.member, p)] = None
        elif isinstance(op, Revoked):
            for p in op.partitions:
                last.pop((op.member, p), None)
        elif isinstance(op, Read):
            key = (op.member, op.partition)
            if key not in last:
                out.append(GroupViolation("read-unowned", op.partition, f"{op.member} read offset {op.offset} of a"
                                          " partition it was not assigned"))
                continue
            before = last[key]
            if before is None and op.offset < floor[key]:
                out.append(GroupViolation("reread-below-commit", op.partition, f"{op.member} started at offset"
                                          f" {op.offset}, below the commit of {floor[key]} acknowledged before its"
                                          " assignment"))
            elif before is not None and op.offset != before + 1:
                kind: Kind = "session-gap" if op.offset > before else "session-rewind"
                out.append(GroupViolation(kind, op.partition, f"{op.member} read offset {op.offset} after"
                                          f" {before} in one assignment"))
            last[key] = op.offset
    return out
