"""The consumer group checker (group_history.py): each violation found in a small history, none in a correct one."""

from __future__ import annotations

from group_history import Assigned, Commit, Fetched, GroupOp, Produced, Read, Revoked, check, owners, rereads

A, B = "a", "b"
P0 = frozenset({0})


def _handover() -> list[GroupOp]:
    """Records 0-3 of partition 0; a reads 0-2, commits 2 (acknowledged) and 3 (unknown), loses the partition; b
    starts from 2 (after the acknowledged commit) and reads 2 again, then 3, and commits 4."""
    return [Produced(0, o, 10 + o) for o in range(4)] + [
        Assigned(A, P0), Read(A, 0, 0, 10), Read(A, 0, 1, 11), Commit(A, 0, 2, "ok"), Read(A, 0, 2, 12),
        Commit(A, 0, 3, "info"), Revoked(A, P0), Assigned(B, P0), Read(B, 0, 2, 12), Read(B, 0, 3, 13),
        Commit(B, 0, 4, "ok"), Fetched({0: 4})]


def test_a_handover_that_rereads_only_after_the_acknowledged_commit_is_correct() -> None:
    assert check(_handover(), final={0: 4}) == []
    assert rereads(_handover()) == 1


def test_an_acknowledged_record_never_read() -> None:
    history = _handover() + [Produced(0, 4, 14)]
    assert [(v.kind, v.partition) for v in check(history)] == [("unconsumed", 0)]


def test_a_reread_below_the_acknowledged_commit() -> None:
    history = _handover()
    history[history.index(Read(B, 0, 2, 12))] = Read(B, 0, 1, 11)
    history.insert(history.index(Read(B, 0, 3, 13)), Read(B, 0, 2, 12))
    assert [v.kind for v in check(history)] == ["reread-below-commit"]


def test_gaps_rewinds_and_unowned_reads_within_an_assignment() -> None:
    base = [Produced(0, o, o) for o in range(4)] + [Assigned(A, P0), Read(A, 0, 0, 0)]
    assert [v.kind for v in check(base + [Read(A, 0, 2, 2), Read(A, 0, 1, 1), Read(A, 0, 3, 3)])] == [
        "session-gap", "session-rewind", "session-gap"]
    assert [v.kind for v in check(base + [Read(A, 0, 1, 1), Read(A, 0, 2, 2), Revoked(A, P0), Read(A, 0, 3, 3)])
            ] == ["read-unowned"]


def test_commits_that_go_backwards() -> None:
    acked = [Commit(A, 0, 5, "ok"), Commit(B, 0, 4, "ok")]
    assert [v.kind for v in check(acked)] == ["commit-backwards"]
    assert check([Commit(A, 0, 5, "ok"), Commit(B, 0, 4, "info")]) == []  # (not acknowledged: may be refused)
    assert [v.kind for v in check([Fetched({0: 5}), Fetched({0: 4})])] == ["commit-backwards"]
    assert [v.kind for v in check([Commit(A, 0, 5, "ok"), Fetched({0: 3})])] == ["commit-backwards"]


def test_an_acknowledged_commit_above_the_final_offset_is_lost() -> None:
    history: list[GroupOp] = [Commit(A, 0, 5, "ok"), Commit(A, 1, 7, "ok"), Commit(A, 0, 9, "info")]
    assert check(history, final={0: 5, 1: 7}) == []
    assert [(v.kind, v.partition) for v in check(history, final={0: 4, 1: 7})] == [("commit-lost", 0)]
    assert [(v.kind, v.partition) for v in check(history, final={})] == [("commit-lost", 0), ("commit-lost", 1)]


def test_owners_of_a_settled_group() -> None:
    assert owners({A: frozenset({0, 2}), B: frozenset({1}), "c": frozenset()}, 3) == []
    assert owners({A: frozenset({0, 1}), B: frozenset({1})}, 3) == ["partition 1 held by ['a', 'b']",
                                                                    "partition 2 held by no member"]
