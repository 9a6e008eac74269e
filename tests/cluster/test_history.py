"""The history checker (history.py) on hand-made histories: each violation is found in a history that has it, and
nothing is reported for the same history without it."""

from __future__ import annotations

import pytest
from history import Assign, Op, Poll, Send, Write, check


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
