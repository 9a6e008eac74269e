"""The history checker (history.py) on hand-made histories: each violation is found in a history that has it, and
nothing is reported for the same history without it."""

from __future__ import annotations

import pytest
from history import Assign, FinalRead, Op, Poll, Replica, Send, Write, check
from hypothesis import given
from hypothesis import strategies as st


def ok(process: int, key: str, value: int, offset: int | None) -> Send:
    return Send(process, (Write(key, value, offset),), "ok")


def kinds(history: list[Op]) -> list[str]:
    return [v.kind for v in check(history)]


def writes_0_to_3() -> list[Op]:
    return [ok(0, "p0", v, v) for v in range(4)]


def test_a_clean_history_has_no_violation() -> None:
    history = writes_0_to_3() + [Poll(1, {"p0": [(0, 0), (1, 1)]}), Poll(1, {"p0": [(2, 2), (3, 3)]}),
                                 Poll(2, {"p0": [(0, 0), (1, 1), (2, 2), (3, 3)]})]
    assert check(history) == []


def test_lost_write() -> None:
    history = writes_0_to_3() + [Poll(1, {"p0": [(0, 0)]}), Assign(1), Poll(1, {"p0": [(2, 2), (3, 3)]})]
    [violation] = check(history)
    assert (violation.kind, violation.key, violation.values) == ("lost-write", "p0", (1,))
    # value 3 never read, but no read got past offset 2: it may simply not have been read yet
    assert check(writes_0_to_3() + [Poll(1, {"p0": [(0, 0), (1, 1), (2, 2)]})]) == []


def test_a_transaction_of_unknown_outcome_read_in_part_is_no_violation() -> None:
    txn = Send(0, (Write("p0", 10), Write("p1", 11)), "info")  # the client died before the commit's answer
    history: list[Op] = [txn, ok(0, "p1", 12, 5), Poll(1, {"p0": [(0, 10)]}), Poll(2, {"p1": [(5, 12)]})]
    assert check(history) == []  # 11's offset is not known: whether it was lost cannot be judged


def test_unknown_writes_may_appear_or_not() -> None:
    unknown = [Send(0, (Write("p0", v),), "info") for v in (10, 11)]
    assert check(writes_0_to_3() + unknown + [Poll(1, {"p0": [(0, 0), (1, 1), (2, 2), (3, 3), (4, 11)]})]) == []


def test_duplicate() -> None:
    history = writes_0_to_3() + [Poll(1, {"p0": [(0, 0), (1, 1), (2, 2), (3, 3), (4, 1)]})]
    assert kinds(history) == ["duplicate"]
    # the same value in two partitions
    assert kinds([ok(0, "p0", 1, 0), Poll(1, {"p0": [(0, 1)], "p1": [(0, 1)]})]) == ["duplicate"]


def test_inconsistent_offsets() -> None:
    history = writes_0_to_3() + [Send(0, (Write("p0", 9),), "info"), Poll(1, {"p0": [(0, 0), (1, 9)]})]
    assert "inconsistent-offsets" in kinds(history)
    violation = next(v for v in check(history) if v.kind == "inconsistent-offsets")
    assert violation.values == (1, 9)
    # two readers disagreeing, no acknowledgement involved
    reads = [Send(0, (Write("p0", v),), "info") for v in (7, 8)]
    assert kinds(reads + [Poll(1, {"p0": [(0, 7)]}), Poll(2, {"p0": [(0, 8)]})]) == ["inconsistent-offsets"]


def test_aborted_read() -> None:
    aborted = Send(0, (Write("p0", 10), Write("p1", 11)), "fail")
    assert kinds([aborted, Poll(1, {"p1": [(0, 11)]})]) == ["aborted-read"]
    assert check([aborted, Poll(1, {"p1": []})]) == []


def test_phantom_read() -> None:
    assert kinds([Poll(1, {"p0": [(0, 42)]})]) == ["phantom-read"]


def test_nonmonotonic_poll_and_assign() -> None:
    history = writes_0_to_3() + [Poll(1, {"p0": [(0, 0), (1, 1), (2, 2)]}), Poll(1, {"p0": [(1, 1), (2, 2)]})]
    assert kinds(history) == ["nonmonotonic-poll"]
    # a seek back (an Assign) in between: reading again is what the consumer asked for
    history.insert(-1, Assign(1))
    assert check(history) == []
    # another consumer's reads do not count
    assert check(writes_0_to_3() + [Poll(1, {"p0": [(0, 0), (1, 1), (2, 2), (3, 3)]}), Poll(2, {"p0": [(1, 1)]})]
                 ) == []


def test_poll_skip() -> None:
    history = writes_0_to_3() + [Poll(1, {"p0": [(0, 0), (1, 1)]}), Poll(1, {"p0": [(3, 3)]}),
                                 Poll(2, {"p0": [(0, 0), (1, 1), (2, 2), (3, 3)]})]
    assert kinds(history) == ["poll-skip"]
    # a gap of offsets nobody saw a value at (a transaction marker, a compacted record) is no skip
    gaps = [ok(0, "p0", 0, 0), ok(0, "p0", 5, 5), Poll(1, {"p0": [(0, 0)]}), Poll(1, {"p0": [(5, 5)]})]
    assert check(gaps) == []


def test_a_value_written_twice_is_a_bad_history() -> None:
    with pytest.raises(ValueError, match="written twice"):
        check([ok(0, "p0", 1, 0), ok(0, "p0", 1, 1)])


def test_lost_write_missing_from_a_final_read() -> None:
    sql = [ok(0, "p0", v, None) for v in (10, 11, 12)]  # acknowledged without an offset (SQL INSERTs)
    full = [(0, 10), (1, 11), (2, 12)]
    assert check(sql + [FinalRead(5, "p0", full), FinalRead(6, "p0", full)]) == []
    # node 6 serves a log without 11: lost there, whatever node 5 serves (and its read skipped offset 1)
    found = check(sql + [FinalRead(5, "p0", full), FinalRead(6, "p0", [(0, 10), (2, 12)])])
    assert [v.kind for v in found] == ["lost-write", "poll-skip"]
    assert found[0].values == (11,) and "by 6" in found[0].detail
    # no other read: the final read alone judges it
    [lost] = check(sql + [FinalRead(6, "p0", [(0, 10), (2, 12)])])
    assert (lost.kind, lost.values) == ("lost-write", (11,))
    # a final read of another partition judges nothing here; unknown and failed writes need not be there
    assert check(sql + [Send(0, (Write("p0", 13),), "info"), Send(0, (Write("p0", 14),), "fail"),
                        FinalRead(5, "p0", full), FinalRead(5, "p1", [])]) == []


def test_a_final_read_is_a_poll_from_the_start() -> None:
    sql = [ok(0, "p0", v, None) for v in (10, 11)]
    # the same process read the partition before: the final read starting over is no non-monotonic poll ...
    assert check(sql + [Poll(5, {"p0": [(0, 10), (1, 11)]}), FinalRead(5, "p0", [(0, 10), (1, 11)])]) == []
    # ... but one going back inside itself is, and it feeds the offsets' values like any read
    assert [v.kind for v in check(sql + [FinalRead(5, "p0", [(0, 10), (1, 11), (0, 10)])])] == ["nonmonotonic-poll"]
    assert "inconsistent-offsets" in kinds(sql + [FinalRead(5, "p0", [(0, 10), (1, 11)]),
                                                  FinalRead(6, "p0", [(0, 11), (1, 10)])])


def test_replica_divergence() -> None:
    same = {0: b"a", 1: b"b", 3: b"c"}
    assert check([Replica(1, "p0", 4, same), Replica(2, "p0", 4, dict(same)), Replica(3, "p0", 4, dict(same))]) == []
    # above the lower high watermark replicas may differ (an uncommitted tail, a follower behind)
    assert check([Replica(1, "p0", 5, {**same, 4: b"x"}), Replica(2, "p0", 3, {0: b"a", 1: b"b", 3: b"y"})]) == []
    [violation] = check([Replica(1, "p0", 4, same), Replica(2, "p0", 4, {**same, 1: b"z"})])
    assert (violation.kind, violation.key) == ("replica-divergence", "p0") and "[1]" in violation.detail
    [missing] = check([Replica(1, "p0", 4, same), Replica(3, "p0", 4, {0: b"a", 1: b"b"})])
    assert "nodes 1 and 3" in missing.detail and "[3]" in missing.detail
    # another partition's replicas are not compared with these
    assert check([Replica(1, "p0", 4, same), Replica(2, "p1", 4, {0: b"q"})]) == []
    # the offset indexes too, record by record below the lower high watermark
    index = {("t", 0): b"r0", ("t", 3): b"r3", ("u", 1): b"s1"}
    assert check([Replica(1, "p0", 4, same, index), Replica(2, "p0", 4, same, dict(index))]) == []
    assert check([Replica(1, "p0", 4, same, {**index, ("t", 4): b"r4"}), Replica(2, "p0", 4, same, index)]) == []
    [unlike] = check([Replica(1, "p0", 4, same, index), Replica(2, "p0", 4, same, {**index, ("u", 1): b"other"})])
    assert unlike.kind == "replica-divergence" and "offset indexes" in unlike.detail and "('u', 1)" in unlike.detail
    [lacking] = check([Replica(1, "p0", 4, same, index), Replica(3, "p0", 4, same, {("t", 0): b"r0"})])
    assert "nodes 1 and 3's offset indexes" in lacking.detail and "(2 in all)" in lacking.detail


@st.composite
def clean_histories(draw: st.DrawFn) -> list[Op]:
    """A history of a correct system: per partition a log of unique values at rising offsets with gaps (markers),
    acknowledged ones with or without their offset, unknown ones in it or not, failed ones never; consumers polling
    increasing runs of it (going back only after an Assign); full final reads; replicas equal below their high
    watermarks."""
    history: list[Op] = []
    value = 0
    for p in range(draw(st.integers(1, 3))):
        key = f"p{p}"
        pairs: list[tuple[int, int]] = []
        offset = 0
        for _ in range(draw(st.integers(0, 12))):
            outcome = draw(st.sampled_from(["ok", "ok", "info", "fail"]))
            if outcome == "fail" or (outcome == "info" and draw(st.booleans())):
                history.append(Send(0, (Write(key, value),), outcome))
            else:
                offset += draw(st.integers(0, 3))
                known = outcome == "ok" and draw(st.booleans())
                history.append(Send(0, (Write(key, value, offset if known else None),), outcome))
                pairs.append((offset, value))
                offset += 1
            value += 1
        for consumer in range(draw(st.integers(0, 2))):
            start = draw(st.integers(0, len(pairs)))
            while start < len(pairs):
                stop = draw(st.integers(start + 1, len(pairs)))
                history.append(Poll(10 + consumer, {key: pairs[start:stop]}))
                if draw(st.booleans()):
                    history.append(Assign(10 + consumer))
                    stop = draw(st.integers(0, stop))
                start = stop
        history += [FinalRead(20 + n, key, pairs) for n in range(draw(st.integers(1, 2)))]
        committed = {v: str(v).encode() for v in range(len(pairs))}
        for node in (1, 2, 3):
            tail = {len(pairs) + t: bytes([node]) for t in range(draw(st.integers(0, 2)))}  # above the HW
            history.append(Replica(node, key, draw(st.integers(0, len(pairs))), {**committed, **tail}))
    return history


@given(clean_histories())
def test_a_generated_clean_history_has_no_violation(history: list[Op]) -> None:
    assert check(history) == []


def test_write_cycles() -> None:
    """G0 within a process: two of its transactions, each writing partitions a and b, ordered t1 < t2 in a and t2 <
    t1 in b, are a cycle; in the same order in both, or one-write sends interleaved, they are not; two processes'
    transactions ordered both ways are no violation (Kafka's transactions are not serializable)."""
    t1 = Send(1, (Write("a", 1, 0), Write("b", 2, 1)), "ok")
    t2 = Send(1, (Write("a", 3, 1), Write("b", 4, 0)), "ok")
    assert check([t1, Send(2, t2.writes, "ok")]) == []
    [cycle] = check([t1, t2])
    assert cycle.kind == "write-cycle" and "2 sends" in cycle.detail and set(cycle.values) == {1, 3}
    assert check([t1, Send(2, (Write("a", 3, 1), Write("b", 4, 2)), "ok")]) == []
    singles = [Send(1, (Write("a", 5, 2),), "ok"), Send(1, (Write("b", 6, 2),), "ok")]
    assert check([t1, Send(1, (Write("a", 3, 1), Write("b", 4, 3)), "ok"), *singles]) == []
    # three of one process: t1 < s in a, t3 < t1 in b and s < t3 in c, another process's send between: a cycle
    t3 = Send(1, (Write("b", 7, 0), Write("c", 8, 2)), "ok")
    s = Send(1, (Write("a", 9, 1), Write("c", 10, 0)), "ok")
    other = Send(2, (Write("c", 11, 1),), "ok")
    [three] = check([Send(1, (Write("a", 1, 0), Write("b", 2, 1)), "ok"), t3, s, other])
    assert "3 sends" in three.detail
