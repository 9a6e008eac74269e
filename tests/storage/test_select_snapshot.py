"""A SELECT prepared on the engine's thread runs anywhere and answers what was visible when it was prepared (issue 23).

- :class:`WalSnapshot`: entries appended after it are not read, entries not yet durable under group commit are not
  read, a segment deleted since is skipped, and damage found is listed (not reported) until :meth:`Wal.recheck`
  reports it where the WAL lives; it pickles.
- :class:`PreparedSelect`: the same answer after more writes and new subtables, and after a pickle round trip
  (a query worker process); cancelled between entries or inside DuckDB with :class:`QueryCancelled`; a scan past its
  byte budget refused with :class:`LimitExceeded`.
- :class:`Cancel`: an interrupt hook runs at once when already cancelled and never after its block ended.
- Timestamps of a result formatted by Arrow's kernel equal :func:`format_timestamp` (and years outside 0001-9999
  still take the row-by-row path).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.storage.cancel import Cancel
from walgate.storage.damage import DamageLog
from walgate.storage.durability import Unsynced
from walgate.storage.engine import Engine
from walgate.storage.errors import LimitExceeded, QueryCancelled
from walgate.storage.query import Query
from walgate.storage.select import _timestamps
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse
from walgate.storage.values import TIMESTAMP_RANGE, format_timestamp
from walgate.storage.wal import HEADER_SIZE, KIND_DATA, Wal, WalOptions

SEGMENT = WalOptions(segment_bytes=250)  # 3 entries of 76 bytes per segment


def _wal(directory: Path, n: int, options: WalOptions = SEGMENT, **kwargs: object) -> Wal:
    wal = Wal.open(directory, options, **kwargs)  # type: ignore[arg-type]
    for i in range(n):
        wal.append([(KIND_DATA, 2, i, bytes([i + 1]) * 40)])
    return wal


def _versions(wal_snapshot_entries: object) -> list[int]:
    return [e.version for e in wal_snapshot_entries]  # type: ignore[attr-defined]


def test_a_snapshot_reads_what_was_visible_then_while_appends_go_on(tmp_path: Path) -> None:
    wal = _wal(tmp_path / "wal", 5)  # versions 0, 2, ..., 8 over two segments
    snap = wal.snapshot()
    wal.append([(KIND_DATA, 1, 0, b"later")])
    for i in range(6):
        wal.append([(KIND_DATA, 2, i, b"y" * 40)])  # rolls more segments
    damaged: list[int] = []
    assert _versions(snap.entries(damaged)) == [0, 2, 4, 6, 8] and damaged == []
    copy = pickle.loads(pickle.dumps(snap))
    assert [e.body for e in copy.entries([])] == [bytes([i + 1]) * 40 for i in range(5)]
    assert _versions(wal.snapshot().entries([])) == [e.version for e in wal.read_from(0)]
    wal.close()


def test_a_snapshot_under_group_commit_reads_only_durable_entries(tmp_path: Path) -> None:
    options = WalOptions(level=2, fsync_period_ms=0)
    wal = Wal.open(tmp_path / "wal", options, unsynced=Unsynced(lambda owner: None))
    wal.append([(KIND_DATA, 1, 0, b"a")])
    assert _versions(wal.snapshot().entries([])) == []  # appended, not yet durable: not visible
    sync = wal.take_sync()
    assert sync is not None
    sync.run()
    sync.done()
    wal.append([(KIND_DATA, 1, 0, b"b")])
    assert _versions(wal.snapshot().entries([])) == [0]
    wal.close()


def test_a_snapshot_skips_segments_deleted_since(tmp_path: Path) -> None:
    wal = _wal(tmp_path / "wal", 9)  # three sealed-or-active segments of three entries
    snap = wal.snapshot()
    wal.delete_oldest(1)  # retention
    assert _versions(snap.entries([])) == [6, 8, 10, 12, 14, 16]
    wal.close()


def test_damage_a_snapshot_finds_is_listed_then_reported_by_recheck(tmp_path: Path) -> None:
    _wal(tmp_path / "wal", 6).close()
    sealed = sorted((tmp_path / "wal").glob("*.log"))[0]  # versions 0..4, trusted by its seal at open
    data = bytearray(sealed.read_bytes())
    data[(HEADER_SIZE + 40) + HEADER_SIZE + 3] ^= 0x10  # a body byte of version 2
    sealed.write_bytes(bytes(data))
    damage = DamageLog(tmp_path)
    wal = Wal.open(tmp_path / "wal", SEGMENT, damage=damage)
    damaged: list[int] = []
    assert _versions(wal.snapshot().entries(damaged)) == [0, 4, 6, 8, 10]
    assert damaged == [2] and not damage.records  # found on another thread: not reported there
    wal.recheck(damaged)
    [record] = damage.records
    assert (record.first_version, record.end_version) == (2, 4)
    wal.recheck(damaged)
    assert len(damage.records) == 1  # once
    assert _versions(wal.snapshot().entries(damaged := [])) == [0, 4, 6, 8, 10] and damaged == []  # known: skipped
    wal.close()


def _engine(tmp_path: Path) -> Engine:
    engine = Engine.open(tmp_path / "data")
    engine.execute("CREATE DATABASE s VGROUPS 2")
    engine.execute("CREATE STABLE s.m (ts TIMESTAMP, v DOUBLE) TAGS (t INT)")
    for i in range(4):
        engine.execute(f"INSERT INTO s.d{i} USING s.m TAGS ({i}) VALUES (1700000000000, {i}) (1700000001000, {i})")
    return engine


def _select(sql: str) -> ast.Select:
    stmt = parse(sql)
    assert isinstance(stmt, ast.Select)
    return stmt


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT COUNT(*), SUM(v) FROM s.m", [[8, 12.0]]),
    ("SELECT tbname, v, t FROM s.m WHERE t >= 2", [["d2", 2.0, 2]] * 2 + [["d3", 3.0, 3]] * 2),
    ("SELECT * FROM s.d1", [["2023-11-14T22:13:20.000Z", 1.0, 1], ["2023-11-14T22:13:21.000Z", 1.0, 1]]),
    ("SELECT _wstart, COUNT(*) FROM s.m INTERVAL(1s)", [["2023-11-14T22:13:20.000Z", 4],
                                                        ["2023-11-14T22:13:21.000Z", 4]]),
])
def test_a_prepared_select_answers_what_was_visible_when_prepared(tmp_path: Path, sql: str,
                                                                  expected: list[list[object]]) -> None:
    engine = _engine(tmp_path)
    before = engine.execute(sql)
    assert sorted(before.rows) == expected  # computed from the rows _engine wrote
    prepared = engine.prepare_select(_select(sql))
    for i in range(8):  # more rows, new subtables, in both vnodes
        engine.execute(f"INSERT INTO s.e{i} USING s.m TAGS ({i}) VALUES (1700000000500, 100)")
        engine.execute(f"INSERT INTO s.d{i % 4} VALUES (1700000002000, 100)")
    assert engine.execute(sql).rows != before.rows
    for copy in (prepared, pickle.loads(pickle.dumps(prepared))):  # as a query worker process gets it
        result = copy.run()
        assert (result.columns, result.rows) == (before.columns, before.rows)
    engine.close()


def test_a_cancelled_select_stops_with_query_killed(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    cancel = Cancel()
    cancel.cancel("the client went away")
    with pytest.raises(QueryCancelled, match="the client went away") as info:
        engine.prepare_select(_select("SELECT * FROM s.m")).run(cancel)
    assert info.value.code == 0x022D
    schema = pa.schema([pa.field("ts", pa.timestamp("ms")), pa.field("v", pa.float64())])
    rows = pa.table({"ts": pa.array([0, 1], pa.timestamp("ms")), "v": [1.0, 2.0], "tbname": ["a", "b"]})
    query = Query(_select("SELECT COUNT(*) FROM s.m"), "ms", 0)
    with pytest.raises(QueryCancelled):  # before DuckDB runs
        query.run({}, [], schema, [rows], cancel)
    engine.close()


def test_a_select_scanning_more_than_its_budget_is_refused(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    prepared = engine.prepare_select(_select("SELECT COUNT(*) FROM s.m"))
    assert prepared.run(max_bytes=1 << 20).rows == [[8]]
    with pytest.raises(LimitExceeded, match="more than 100 bytes"):
        prepared.run(max_bytes=100)
    engine.close()


def test_an_interrupt_hook_runs_at_once_when_cancelled_again_when_cancelled_again_and_never_after_its_block() -> None:
    calls: list[str] = []
    cancel = Cancel()
    with cancel.interrupting(lambda: calls.append("first")):
        pass
    cancel.cancel("stop")
    cancel.cancel("again")
    assert calls == [] and cancel.reason == "stop"
    with cancel.interrupting(lambda: calls.append("second")):
        assert calls == ["second"]
        cancel.cancel("and again")
        assert calls == ["second", "second"] and cancel.reason == "stop"
    cancel.cancel("after")
    assert calls == ["second", "second"]
    with pytest.raises(QueryCancelled, match="stop"):
        cancel.check()


@pytest.mark.parametrize("unit", ["ms", "us", "ns"])
@settings(deadline=None)
@given(data=st.data())
def test_timestamps_by_the_kernel_equal_format_timestamp(unit: str, data: st.DataObject) -> None:
    low, high = TIMESTAMP_RANGE[unit]
    inside = st.integers(low, high)
    anywhere = st.integers(-(1 << 63), (1 << 63) - 1)
    ticks = data.draw(st.lists(st.one_of(inside, st.none()) | st.one_of(anywhere, st.none()), max_size=8))
    col = pa.chunked_array([pa.array(ticks, pa.int64()).cast(pa.timestamp(unit))])
    assert _timestamps(col, unit) == [None if t is None else format_timestamp(t, unit) for t in ticks]


def test_damage_a_select_passes_before_its_limit_is_reported(tmp_path: Path) -> None:
    engine = Engine.open(tmp_path / "data")
    engine.execute("CREATE DATABASE d VGROUPS 1 WAL_SEGMENT_SIZE 1")
    engine.execute("CREATE TABLE d.t (ts TIMESTAMP, v VARCHAR(200))")
    pad = "x" * 200
    for i in range(60):  # 60 entries of 100 rows, about 1.3 MB: the first segment is sealed
        rows = " ".join(f"({1_700_000_000_000 + i * 100 + j}, '{pad}')" for j in range(100))
        engine.execute(f"INSERT INTO d.t VALUES {rows}")
    wal = engine.vnodes["d"][0].wal
    assert len(wal.segments) > 1
    sealed, first = wal.segments[0], wal.segments[0].positions[2]  # the second INSERT (entry 0: CREATE TABLE)
    engine.close()
    data = bytearray(sealed.path.read_bytes())
    data[first + HEADER_SIZE + 100] ^= 0x10
    sealed.path.write_bytes(bytes(data))
    engine = Engine.open(tmp_path / "data")
    assert engine.damage() == []  # trusted by its seal at open: found when read
    rows = engine.execute("SELECT ts FROM d.t LIMIT 150").rows  # ends inside the third entry, past the damage
    assert len(rows) == 150 and rows[99][0].endswith("20.099Z") and rows[100][0].endswith("20.200Z")
    [damage] = engine.damage()
    assert (damage.first_version, damage.end_version) == (101, 201)
    engine.close()
