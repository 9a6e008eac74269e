"""A checker of what Kafka clients saw and replicas hold, after jepsen's Kafka workload (``jepsen/tests/kafka.clj``):
pure, typed.

A history is the list of operations clients completed, each process's in the order it did them:

- :class:`Send`: one or more :class:`Write` (several: one transaction), with its outcome: ``ok`` (acknowledged;
  a transaction committed), ``fail`` (definitely not written: a non-retriable error, an aborted transaction) or
  ``info`` (unknown: a timeout, the client died). An acknowledged write may carry the offset the broker gave it.
- :class:`Poll`: what one consumer read, per partition (the "key"), as (offset, value) pairs in the order read.
- :class:`Assign`: the consumer was assigned, subscribed, rebalanced or seeked: where it reads from next is its
  own choice, so its next poll is not compared with its last.
- :class:`FinalRead`: a full read of one partition, from its first offset to its end, after the writes stopped
  (through one node: several may read the same partition); it is a poll of its own, read from the start.
- :class:`Replica`: one replica's copy of a partition's log at the end (entry by entry: version -> a digest of the
  entry; and its offset index, record by record: (topic, version) -> a digest of the record) and the high watermark
  that replica knows.

Every value is written once in a history (the workload makes them unique). :func:`check` derives each partition's
log (offset -> the values seen there, from acknowledgements and reads) and returns the violations:

- ``lost-write``: an acknowledged (or committed) write that readers should have seen and did not: it sits at or
  below the offset of some value that was read in its partition, and no poll ever read it (jepsen's lost-write);
  or one that a :class:`FinalRead` of its partition does not hold. A write whose offset nobody learnt (never read, no
  offset in its acknowledgement) in a partition no final read covers cannot be judged: a test that wants every
  acknowledged write checked reads each partition in full at the end (or acknowledges one more per partition at the
  end and reads up to it);
- ``duplicate``: one value at two offsets, or in two partitions;
- ``inconsistent-offsets``: two values at one offset of a partition (by reads, or a read and an acknowledgement);
- ``aborted-read``: a read of a value whose send failed or whose transaction aborted (read_committed: G1a);
- ``phantom-read``: a read of a value no send wrote;
- ``nonmonotonic-poll``: a consumer read an offset at or below one it read before in that partition, with no
  :class:`Assign` in between;
- ``poll-skip``: a consumer's next read in a partition jumped over offsets that hold values others saw;
- ``replica-divergence``: two replicas of a partition hold different entries (or one lacks an entry), or different
  offset index records, at a version below the lower of their high watermarks (issue 25: every replica's WAL is the
  leader's, entry by entry, and its offset index too, up to the high watermark).

- ``write-cycle``: jepsen's G0 within one process: its sends (transactions: a :class:`Send` of several writes, one
  after the other) ordered one way in one partition's log and the other way in another's, i.e. a cycle in the graph
  whose edges join its sends of values at consecutive offsets of a partition (ww dependencies, Adya's G0;
  ``networkx`` finds the cycles). Across processes Kafka promises no such order (its transactions are atomic, not
  serializable: two producers' concurrent transactions may be ordered both ways), so none is checked.

Values of ``info`` sends may appear or not: that is no violation. What is not checked: cycles through reads (G1c,
G-single: a :class:`Poll` here reads only, in no transaction that also writes, so no such cycle can be formed) and
the order of one producer's sends.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import networkx as nx

__all__ = ["Write", "Send", "Poll", "Assign", "FinalRead", "Replica", "Op", "Violation", "check", "Value",
           "Outcome"]

Value = int | str
Outcome = Literal["ok", "fail", "info"]
Kind = Literal["lost-write", "duplicate", "inconsistent-offsets", "aborted-read", "phantom-read",
               "nonmonotonic-poll", "poll-skip", "replica-divergence", "write-cycle"]


@dataclass(frozen=True)
class Write:
    """``value`` sent to partition ``key``; ``offset``: where the broker said it went (acknowledged sends only)."""

    key: str
    value: Value
    offset: int | None = None


@dataclass(frozen=True)
class Send:
    process: int
    writes: tuple[Write, ...]
    outcome: Outcome


@dataclass(frozen=True)
class Poll:
    process: int
    reads: Mapping[str, Sequence[tuple[int, Value]]]


@dataclass(frozen=True)
class Assign:
    process: int


@dataclass(frozen=True)
class FinalRead:
    """Every (offset, value) of partition ``key`` from its first offset to its end, read by ``process`` after the
    writes stopped."""

    process: int
    key: str
    reads: Sequence[tuple[int, Value]]


@dataclass(frozen=True)
class Replica:
    """Node ``node``'s copy of partition ``key``: ``entries`` maps each WAL version it holds to a digest of that
    entry, ``index`` each (topic, version) its offset indexes hold a record of (the record of the entry at that
    version: its offset, count and running maximum timestamp) to a digest of that record; ``hw``: the high watermark
    it knows (versions below it are committed)."""

    node: int
    key: str
    hw: int
    entries: Mapping[int, bytes]
    index: Mapping[tuple[str, int], bytes] = field(default_factory=dict)


Op = Send | Poll | Assign | FinalRead | Replica


@dataclass(frozen=True)
class Violation:
    kind: Kind
    key: str
    detail: str
    values: tuple[Value, ...] = field(default=())


@dataclass
class _Log:
    """One partition as the history saw it: offset -> values, value -> offsets, values read."""

    at: dict[int, set[Value]] = field(default_factory=lambda: defaultdict(set))
    offsets_of: dict[Value, set[int]] = field(default_factory=lambda: defaultdict(set))
    read: set[Value] = field(default_factory=set)

    def see(self, offset: int, value: Value) -> None:
        self.at[offset].add(value)
        self.offsets_of[value].add(offset)


def check(history: Sequence[Op]) -> list[Violation]:
    """Every violation in ``history`` (empty: none found), grouped by kind, then by partition."""
    sends = [op for op in history if isinstance(op, Send)]
    writer: dict[Value, Send] = {}
    for s in sends:
        for w in s.writes:
            if w.value in writer:
                raise ValueError(f"value {w.value!r} is written twice: the workload must write each value once")
            writer[w.value] = s
    logs: dict[str, _Log] = defaultdict(_Log)
    for s in sends:
        if s.outcome == "ok":
            for w in s.writes:
                if w.offset is not None:
                    logs[w.key].see(w.offset, w.value)
    reads = _as_polls(history)
    for op in reads:
        if isinstance(op, Poll):
            for key, pairs in op.reads.items():
                for offset, value in pairs:
                    logs[key].see(offset, value)
                    logs[key].read.add(value)
    finals = [op for op in history if isinstance(op, FinalRead)]
    return (_lost_writes(logs) + _not_in_final_reads(sends, finals) + _duplicates(logs) + _inconsistent(logs)
            + _bad_reads(logs, writer) + _poll_order(reads, logs)
            + _divergence([op for op in history if isinstance(op, Replica)]) + _write_cycles(logs, sends, writer))


def _write_cycles(logs: dict[str, _Log], sends: list[Send], writer: dict[Value, Send]) -> list[Violation]:
    """G0 within a process: each strongly connected set of sends in the ww graph (an edge from a process's send of
    the value at one offset of a partition to its send of the value at the next offset holding one of its values,
    where each holds one value its send wrote to that partition, held at that offset only: duplicates and phantoms
    are their own rules' violations), one cycle of it named."""
    index = {id(s): i for i, s in enumerate(sends)}
    graph: nx.DiGraph[int] = nx.DiGraph()
    for key, log in sorted(logs.items()):
        before: dict[int, int] = {}  # process -> its send of the last value seen in the partition
        for offset in sorted(log.at):
            values = log.at[offset]
            value = next(iter(values))
            send = writer.get(value) if len(values) == 1 and len(log.offsets_of[value]) == 1 else None
            if send is None or all(w.key != key for w in send.writes if w.value == value):
                continue
            now, last = index[id(send)], before.get(send.process)
            if last is not None and last != now:
                graph.add_edge(last, now, key=key)
            before[send.process] = now
    out = []
    for component in sorted(nx.strongly_connected_components(graph), key=min):
        if len(component) > 1:
            cycle = nx.find_cycle(graph.subgraph(component))
            named = [(sends[a].writes[0].value, graph.edges[a, b]["key"]) for a, b, *_ in cycle]
            out.append(Violation("write-cycle", str(named[0][1]), f"{len(component)} sends ordered both ways across "
                                 "partitions (G0); a cycle, each send by its first value and the partition ordering it "
                                 f"before the next: {named}", tuple(v for v, _ in named)))
    return out


def _as_polls(history: Sequence[Op]) -> list[Op]:
    """The history with each final read as what it is to a consumer: an assignment, then one poll from the start."""
    out: list[Op] = []
    for op in history:
        if isinstance(op, FinalRead):
            out += [Assign(op.process), Poll(op.process, {op.key: op.reads})]
        elif not isinstance(op, Replica):
            out.append(op)
    return out


def _not_in_final_reads(sends: list[Send], finals: list[FinalRead]) -> list[Violation]:
    """Acknowledged writes missing from a full read of their partition (each final read is judged on its own: a
    node that serves a shorter log than another lost them too)."""
    out = []
    for final in finals:
        held = {value for _, value in final.reads}
        for s in sends:
            for w in s.writes:
                if s.outcome == "ok" and w.key == final.key and w.value not in held:
                    out.append(Violation("lost-write", w.key, f"value {w.value!r} was acknowledged, but the full"
                                         f" read of {final.key} by {final.process} does not hold it", (w.value,)))
    return out


def _divergence(replicas: list[Replica]) -> list[Violation]:
    """Each pair of replicas of a partition, entry by entry and offset index record by record below the lower of
    their high watermarks."""
    out = []
    by_key: dict[str, list[Replica]] = defaultdict(list)
    for r in replicas:
        by_key[r.key].append(r)
    for key, copies in sorted(by_key.items()):
        copies.sort(key=lambda r: r.node)
        for i, a in enumerate(copies):
            for b in copies[i + 1:]:
                bound = min(a.hw, b.hw)
                versions = sorted(v for v in set(a.entries) | set(b.entries) if v < bound)
                differ = [v for v in versions if a.entries.get(v) != b.entries.get(v)]
                if differ:
                    out.append(Violation("replica-divergence", key, f"nodes {a.node} and {b.node} differ below"
                                         f" high watermark {bound} at versions {differ[:10]}"
                                         f"{' ...' if len(differ) > 10 else ''} ({len(differ)} in all)"))
                records = sorted(k for k in set(a.index) | set(b.index) if k[1] < bound)
                unlike = [k for k in records if a.index.get(k) != b.index.get(k)]
                if unlike:
                    out.append(Violation("replica-divergence", key, f"nodes {a.node} and {b.node}'s offset indexes "
                                         f"differ below high watermark {bound} at (topic, version) {unlike[:10]}"
                                         f"{' ...' if len(unlike) > 10 else ''} ({len(unlike)} in all)"))
    return out


def _lost_writes(logs: dict[str, _Log]) -> list[Violation]:
    """Values the log holds but nobody read are acknowledged writes (a read value is read): those at or below the
    highest first offset of a value read in their partition are lost."""
    out = []
    for key, log in sorted(logs.items()):
        if not log.read:
            continue
        bound = max(min(log.offsets_of[v]) for v in log.read)  # every reader that got there passed the rest
        for value, offsets in sorted(log.offsets_of.items(), key=lambda kv: (max(kv[1]), str(kv[0]))):
            if value in log.read or max(offsets) > bound:
                continue
            out.append(Violation("lost-write", key, f"value {value!r} at offset {max(offsets)} was acknowledged,"
                                 f" and offset {bound} was read, but no poll read it", (value,)))
    return out


def _duplicates(logs: dict[str, _Log]) -> list[Violation]:
    out = []
    keys_of: dict[Value, set[str]] = defaultdict(set)
    for key, log in sorted(logs.items()):
        for value, offsets in sorted(log.offsets_of.items(), key=lambda kv: str(kv[0])):
            keys_of[value].add(key)
            if len(offsets) > 1:
                out.append(Violation("duplicate", key, f"value {value!r} at offsets {sorted(offsets)}", (value,)))
    for value, keys in sorted(keys_of.items(), key=lambda kv: str(kv[0])):
        if len(keys) > 1:
            out.append(Violation("duplicate", min(keys), f"value {value!r} in partitions {sorted(keys)}", (value,)))
    return out


def _inconsistent(logs: dict[str, _Log]) -> list[Violation]:
    return [Violation("inconsistent-offsets", key, f"offset {offset} holds {sorted(map(repr, values))}",
                      tuple(sorted(values, key=str)))
            for key, log in sorted(logs.items()) for offset, values in sorted(log.at.items()) if len(values) > 1]


def _bad_reads(logs: dict[str, _Log], writer: dict[Value, Send]) -> list[Violation]:
    out = []
    for key, log in sorted(logs.items()):
        for value in sorted(log.read, key=str):
            send = writer.get(value)
            if send is None:
                out.append(Violation("phantom-read", key, f"value {value!r} was read but never sent", (value,)))
            elif send.outcome == "fail":
                out.append(Violation("aborted-read", key, f"value {value!r} was read, yet its send failed or its"
                                     " transaction aborted", (value,)))
    return out


def _poll_order(history: Sequence[Op], logs: dict[str, _Log]) -> list[Violation]:
    """Each consumer's reads of a partition, across its polls until an Assign: offsets rise, nothing skipped."""
    known = {key: sorted(log.at) for key, log in logs.items()}
    index = {key: {o: i for i, o in enumerate(offsets)} for key, offsets in known.items()}
    last: dict[tuple[int, str], int] = {}  # (process, key) -> the last offset it read
    out = []
    for op in history:
        if isinstance(op, Assign):
            for pk in [pk for pk in last if pk[0] == op.process]:
                del last[pk]
        if not isinstance(op, Poll):
            continue
        for key, pairs in op.reads.items():
            for offset, value in pairs:
                before = last.get((op.process, key))
                last[(op.process, key)] = offset
                if before is None:
                    continue
                if offset <= before:
                    out.append(Violation("nonmonotonic-poll", key, f"consumer {op.process} read offset {offset}"
                                         f" ({value!r}) after offset {before}", (value,)))
                elif index[key][offset] - index[key][before] > 1:
                    skipped = known[key][index[key][before] + 1:index[key][offset]]
                    out.append(Violation("poll-skip", key, f"consumer {op.process} read offset {offset} right"
                                         f" after {before}, skipping offsets {skipped} that hold values", (value,)))
    return out
