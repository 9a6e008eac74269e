"""The engine's write paths behind the Kafka handlers (issue 13, items 4, 5 and 7): ``Engine._commit`` in two phases,
a request one vnode refuses taken back from the vnodes that took it (``Wal.undo_append``; fenced when even that
fails, and never visible, not even after a restart), ``_index`` never failing an appended write, committed offsets
answered per group (one write to its coordinator partition)."""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.storage.faults import Faults
from walgate.storage.commit import Pending
from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue, StorageUnavailable
from walgate.storage.vnode import vnode_of

DB = "w"
TS = 1_700_000_000_000


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    e = Engine.open(tmp_path / "data")
    e.execute(f"CREATE DATABASE {DB} VGROUPS 4")
    e.execute(f"CREATE STABLE {DB}.m (ts TIMESTAMP, v DOUBLE) TAGS (loc VARCHAR(16))")
    e.execute(f"CREATE TOPIC wt AS STABLE {DB}.m")
    yield e
    e.close()


def rows(engine: Engine) -> int:
    return len(engine.execute(f"SELECT * FROM {DB}.m").rows)


def tables(engine: Engine) -> list[str]:
    return [r[0] for r in engine.execute(f"SHOW {DB}.TABLES").rows]


def watermarks(engine: Engine, topic: str = "wt") -> list[tuple[int, int]]:
    return [engine.watermarks(topic, p) for p in range(engine.partition_count(topic))]


def spread() -> list[str]:
    """One subtable name per vnode, in vnode order."""
    names: dict[int, str] = {}
    for i in range(100):
        names.setdefault(vnode_of(DB, f"t{i}", 4), f"t{i}")
    return [names[k] for k in range(4)]


def test_a_request_that_fails_while_being_built_writes_nothing_in_any_vnode(engine: Engine) -> None:
    # The case: rows for other vnodes were committed before the last one's block raised ArrowTypeError
    # (a tbname that was a number). Validation now refuses such names earlier, so the plan is handed to Commits.commit.
    db = engine.catalog.database(DB)
    st = engine.catalog.stable(DB, "m")
    plan = {k: Pending() for k in range(4)}
    for k, name in enumerate(spread()):
        plan[k].metas.append({"op": "create_table", "name": name, "stable": "m", "tags": {"loc": "x"}, "ts": TS})
        plan[k].add_rows("m", True, st.columns, name, [{"ts": TS, "v": 1.0}])
    plan[3].add_rows("m", True, st.columns, 5, [{"ts": TS, "v": 2.0}])  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="do not fit"):
        engine.commits.commit(db, plan)
    assert rows(engine) == 0 and tables(engine) == []
    assert watermarks(engine) == [(0, 0)] * 4
    assert engine.write_json_rows(DB, "m", [(name, {"v": 1.0}, TS) for name in spread()]) == 4
    assert rows(engine) == 4 and len(tables(engine)) == 4


def test_an_append_the_disk_refuses_applies_and_indexes_nothing(engine: Engine) -> None:
    first = spread()[0]
    faults = Faults()
    with faults.active():
        engine.write_json_rows(DB, "m", [(first, {"v": 0.0}, TS)])
        before = faults.calls["write"]
        assert before, "the WAL must write through walgate.storage.fileio"
        engine.write_json_rows(DB, "m", [(first, {"v": 0.5}, TS + 1)])
        per_append = faults.calls["write"] - before
        marks, known = watermarks(engine), tables(engine)
        faults.fail("write", at=per_append + 1)  # the second vnode's append of the request
        with pytest.raises(StorageUnavailable):
            engine.write_json_rows(DB, "m", [(name, {"v": 1.0}, TS) for name in spread()])
    assert tables(engine) == known  # no meta of the request was applied
    assert watermarks(engine) == marks  # no consumer was offered any of it


def test_a_topic_that_cannot_evaluate_an_entry_never_fails_the_write(engine: Engine, monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    # Compile-time validation makes a failing evaluation impossible with real input, so the evaluator is told to fail.
    engine.execute(f"CREATE TOPIC wt2 AS STABLE {DB}.m")
    evaluator = engine.evaluators["wt2"]
    real = evaluator.evaluate

    def evaluate(entry, tag_tables):  # noqa: ANN001, ANN202
        if entry.blocks:
            raise ValueError("cannot evaluate")
        return real(entry, tag_tables)

    monkeypatch.setattr(evaluator, "evaluate", evaluate)
    caplog.set_level(logging.ERROR, logger="walgate.engine")
    assert engine.write_json_rows(DB, "m", [(name, {"v": 1.0}, TS) for name in spread()]) == 4  # the write stands
    assert rows(engine) == 4
    assert sum(end for _, end in watermarks(engine, "wt")) == 4  # other topics are indexed
    assert sum(end for _, end in watermarks(engine, "wt2")) == 0  # this one skips what it cannot read
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 4 and all("wt2" in m and "could not be evaluated" in m for m in messages), messages
    assert all(r.exc_info is None for r in caplog.records)


def test_a_groups_committed_offsets_are_one_write_refused_whole(engine: Engine) -> None:
    """A group's offsets are in its coordinator partition (issue 23): one commit is one write, refused whole when the
    disk refuses it; what was committed before stays."""
    entries = [("wt", p, 10 + p, -1, "") for p in range(4)]
    engine.commit_offsets("g1", [("wt", 1, 5, -1, "")], TS)
    faults = Faults()
    with faults.active():
        engine.commit_offsets("g0", entries, TS)
        assert faults.calls["write"] == 1, "a group's commit is one write, through walgate.storage.fileio"
        faults.fail("write")
        errors = engine.commit_offsets("g1", entries, TS)
    assert [type(e).__name__ if e else None for e in errors] == ["StorageUnavailable"] * 4
    assert [c.offset if (c := engine.committed("g1", "wt", p)) else None for p in range(4)] == [None, 5, None, None]
    assert [c.offset for p in range(4) if (c := engine.committed("g0", "wt", p))] == [10, 11, 12, 13]


def test_deleting_offsets_goes_on_past_a_coordinator_partition_the_disk_refuses(tmp_path: Path) -> None:
    e = Engine.open(tmp_path / "d", coordinator_partitions=4)
    try:
        e.create_kafka_topic("t", 2, {})
        groups = [f"g{i}" for i in range(8)]
        for g in groups:
            e.commit_offsets(g, [("t", 0, 1, -1, ""), ("t", 1, 2, -1, "")], TS)
        partitions = {e.store.coordinator.logs.index(e.store.coordinator.of(g)) for g in groups}
        assert len(partitions) > 1
        faults = Faults()
        with faults.active():
            faults.fail("write", at=1)  # the first partition's
            with pytest.raises(StorageUnavailable):
                e.delete_offsets(topic="t")
        kept = {g for g, _, _, _ in e.all_committed()}
        assert kept and kept != set(groups)  # the other partitions deleted theirs
        assert len({e.store.coordinator.logs.index(e.store.coordinator.of(g)) for g in kept}) == 1
        assert e.delete_offsets(topic="t") == 2 * len(kept) and list(e.all_committed()) == []
    finally:
        e.close()


# ------------------------------------------------------------------------------- a request over several vnodes


def two_vnode_db(engine: Engine, level: int, faults: Faults, op: str) -> tuple[str, str, int]:
    """Database ``u`` (2 vnodes, WAL level ``level``) with subtable ``a`` of vnode 0 holding one row, and a topic;
    (``a``, a subtable name of vnode 1, how many ``op`` calls one vnode's append makes)."""
    sync = " WAL_FSYNC_PERIOD 0" if level == 2 else ""
    engine.execute(f"CREATE DATABASE u VGROUPS 2 WAL_LEVEL {level}{sync}")
    engine.execute("CREATE STABLE u.m (ts TIMESTAMP, v DOUBLE) TAGS (loc VARCHAR(16))")
    names: dict[int, str] = {}
    for i in range(100):
        names.setdefault(vnode_of("u", f"t{i}", 2), f"t{i}")
    engine.execute(f"CREATE TABLE u.{names[0]} USING u.m TAGS ('a')")
    with faults.active():  # (before the topic exists: its offset index writes too)
        engine.execute(f"INSERT INTO u.{names[0]} VALUES ({TS}, 0.5)")
    per_append, faults.calls[op] = faults.calls[op], 0
    assert per_append, f"an append must {op} through walgate.storage.fileio"
    engine.execute("CREATE TOPIC ut AS STABLE u.m")
    return names[0], names[1], per_append


def insert(a: str, b: str, ts: int) -> str:
    """One request for both vnodes: a row into an existing table of vnode 0, one into a table of vnode 1 it
    creates (a meta entry and a data entry)."""
    return f"INSERT INTO u.{a} VALUES ({ts}, 1.0) u.{b} USING u.m TAGS ('b') VALUES ({ts}, 2.0)"


Visible = tuple[list[float], list[str], list[tuple[int, int]], list[tuple[int, int]]]


def visible(engine: Engine) -> Visible:
    """What anyone can see of database u: rows (their values), tables, the topic's offsets, each WAL's next version
    and size."""
    return (sorted(v for [v] in engine.execute("SELECT v FROM u.m").rows),
            sorted(r[0] for r in engine.execute("SHOW u.TABLES").rows),
            watermarks(engine, "ut"), [(v.wal.next_version, v.wal.size_bytes) for v in engine.vnodes["u"]])


FAULTS = [("write", "enospc", 1), ("write", "eio", 1), ("write", "short", 1), ("fdatasync", "eio", 2)]


@contextlib.contextmanager
def second_append_refused(engine: Engine, op: str, kind: str, level: int) -> Iterator[tuple[str, Visible]]:
    """Database ``u`` of two vnodes at WAL ``level`` (:func:`two_vnode_db`), then (an INSERT into both, what is
    visible before it): the block must run the INSERT and have it raise StorageUnavailable, the disk refusing vnode
    1's append (``op`` failing with ``kind``) after vnode 0's succeeded."""
    faults = Faults()
    a, b, per_append = two_vnode_db(engine, level, faults, op)
    before = visible(engine)
    with faults.active():
        faults.fail_kind(op, kind, at=per_append + 1)  # vnode 1's append, after vnode 0's succeeded
        with pytest.raises(StorageUnavailable):
            yield insert(a, b, TS + 1), before


@pytest.mark.parametrize(("op", "kind", "level"), FAULTS, ids=[f"{op}-{kind}" for op, kind, _ in FAULTS])
def test_a_request_a_later_vnode_refuses_is_written_nowhere(tmp_path: Path, op: str, kind: str, level: int) -> None:
    engine = Engine.open(tmp_path / "data")
    with second_append_refused(engine, op, kind, level) as (statement, before):
        engine.execute(statement)
    assert visible(engine) == before  # nothing of it: rows, tables, offsets, WAL versions and bytes
    engine.close()
    engine = Engine.open(tmp_path / "data")
    assert visible(engine) == before  # nor after a restart
    engine.execute(statement)  # the client's retry: written once
    rows_after = visible(engine)[0]
    assert rows_after == sorted(before[0] + [1.0, 2.0])
    engine.close()
    engine = Engine.open(tmp_path / "data")
    assert visible(engine)[0] == rows_after
    engine.close()


def test_a_vnode_that_cannot_take_its_append_back_is_fenced_and_never_serves_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine = Engine.open(tmp_path / "data")
    faults = Faults()
    a, b, writes = two_vnode_db(engine, 2, faults, "write")
    before = visible(engine)
    with faults.active():
        faults.fail("write", at=writes + 1)  # vnode 1's append
        faults.fail("ftruncate", error=errno.EIO, times=1000)  # vnode 0 cannot cut its append off
        with pytest.raises(StorageUnavailable):
            engine.execute(insert(a, b, TS + 1))
        assert "cannot undo an undone append" in caplog.text
        assert visible(engine) == before
        with pytest.raises(StorageUnavailable, match="read-only"):  # vnode 0 refuses writes until it can cut
            engine.execute(f"INSERT INTO u.{a} VALUES ({TS + 2}, 3.0)")
        crashed = shutil.copytree(tmp_path / "data", tmp_path / "crashed")  # a restart while fenced
        restarted = Engine.open(crashed)
        assert visible(restarted) == before
        restarted.close()
        faults.clear()  # the disk recovers: service resumes by itself
        engine.execute(f"INSERT INTO u.{a} VALUES ({TS + 2}, 3.0)")
    engine.execute(insert(a, b, TS + 1))
    expected = sorted(before[0] + [1.0, 2.0, 3.0])
    assert visible(engine)[0] == expected
    engine.close()
    engine = Engine.open(tmp_path / "data")
    assert visible(engine)[0] == expected
    engine.close()
