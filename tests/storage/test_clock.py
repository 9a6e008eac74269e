"""The engine's clock (walgate/storage/clock.py) is its only time: storage reads no other clock, and with a clock
the test moves by hand, ``now`` in SQL and line protocol, creation times, transaction markers, segment.ms rolls,
retention by time and the periodic fsync all follow it, exactly and without waiting."""

from __future__ import annotations

import ast
from pathlib import Path

from clocks import ManualClock

import walgate.storage
from walgate.storage.damage import DamageLog
from walgate.storage.engine import Engine
from walgate.storage.producers import ProducerIds
from walgate.storage.wal import Wal, WalOptions
from walgate.wire import batch_header, encode_batch

STORAGE = Path(walgate.storage.__file__).parent


def _clock_reads(path: Path) -> list[str]:
    """Where a module imports ``time`` or calls a ``now`` / ``utcnow`` / ``today`` method (datetime's)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            hit = any(a.name.split(".")[0] == "time" for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            hit = node.level == 0 and (node.module or "").split(".")[0] == "time"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            hit = node.func.attr in ("now", "utcnow", "today")
        else:
            continue
        if hit:
            found.append(f"{path.relative_to(STORAGE)}:{node.lineno}")
    return found


def test_storage_reads_the_clock_only_in_its_clock_module():
    """docs/architecture.md: the core never reads the clock but through the one it is given; the one real clock is
    storage/clock.py's."""
    assert _clock_reads(STORAGE / "clock.py") != []  # (the check sees a clock read)
    assert [hit for path in sorted(STORAGE.rglob("*.py")) if path.name != "clock.py" for hit in _clock_reads(path)] == []


def test_now_in_sql_and_line_protocol_is_the_engines_clock(tmp_path: Path):
    clock = ManualClock()  # 2023-11-14T22:13:20Z
    e = Engine.open(tmp_path, clock=clock)
    try:
        e.execute("CREATE DATABASE n VGROUPS 2 PRECISION 'us'")
        e.execute("CREATE STABLE n.st (ts TIMESTAMP, v INT) TAGS (since TIMESTAMP)")
        e.execute("INSERT INTO n.a USING n.st TAGS (now) VALUES (now - 2h, 1) (now - 30m, 2) (now, 3)")
        assert e.execute("SELECT ts, v, since FROM n.st ORDER BY ts").rows == [
            ["2023-11-14T20:13:20.000000Z", 1, "2023-11-14T22:13:20.000000Z"],
            ["2023-11-14T21:43:20.000000Z", 2, "2023-11-14T22:13:20.000000Z"],
            ["2023-11-14T22:13:20.000000Z", 3, "2023-11-14T22:13:20.000000Z"]]
        assert e.execute("SELECT count(*), sum(v) FROM n.st WHERE ts > now - 1h").rows == [[2, 5]]
        assert e.execute("SELECT count(*) FROM n.st WHERE ts >= now").rows == [[1]]
        clock.advance(45 * 60)  # 22:58:20: the row at 22:13:20 is the only one of the last hour
        assert e.execute("SELECT v FROM n.st WHERE ts > now - 1h").rows == [[3]]
        assert e.execute("SELECT count(*) FROM n.st WHERE ts >= today()").rows == [[3]]
        clock.advance(3600)  # 23:58:20
        assert e.execute("SELECT count(*) FROM n.st WHERE ts > now - 1h").rows == [[0]]
        clock.advance(2 * 3600)  # 01:58:20 the next day
        assert e.execute("SELECT count(*) FROM n.st WHERE ts >= today()").rows == [[0]]
        assert e.write_lines("n", b"lp,host=h v=7i", "us") == 1  # no timestamp: now
        assert e.execute("SELECT _ts, v FROM n.lp").rows == [["2023-11-15T01:58:20.000000Z", 7]]
    finally:
        e.close()


def test_creation_times_and_transaction_markers_are_stamped_by_the_engines_clock(tmp_path: Path):
    clock = ManualClock()
    e = Engine.open(tmp_path, clock=clock)
    try:
        e.execute("CREATE DATABASE d VGROUPS 1")
        clock.advance(1)
        e.execute("CREATE STABLE d.st (ts TIMESTAMP, v INT) TAGS (since TIMESTAMP)")
        clock.advance(1)
        e.execute("CREATE TABLE d.c USING d.st TAGS (now)")
        clock.advance(1)
        e.execute("CREATE TOPIC tp AS STABLE d.st")
        clock.advance(1)
        e.execute("CREATE USER u PASS 'secret-1'")
        created = {sql: [row[:3] for row in e.execute(sql).rows] for sql in (
            "SHOW DATABASES", "SHOW d.STABLES", "SHOW d.TABLES", "SHOW TOPICS")}
        assert created == {
            "SHOW DATABASES": [["d", "2023-11-14T22:13:20.000Z", 1]],
            "SHOW d.STABLES": [["st", "d", "2023-11-14T22:13:21.000Z"]],
            "SHOW d.TABLES": [["c", "d", "2023-11-14T22:13:22.000Z"]],
            "SHOW TOPICS": [["tp", "d", "2023-11-14T22:13:23.000Z"]]}
        e.execute("INSERT INTO d.c VALUES (0, 1)")
        assert e.execute("SELECT since FROM d.st").rows == [["2023-11-14T22:13:22.000Z"]]  # the tag's now
        users = e.execute("SHOW USERS")
        at = [c[0] for c in users.columns].index("create_time")
        assert [r[at] for r in users.rows if r[0] == "u"] == ["2023-11-14T22:13:24.000Z"]
        clock.advance(1)
        e.create_kafka_topic("k", 1, {})
        assert [r[2] for r in e.execute("SHOW TOPICS").rows if r[0] == "k"] == ["2023-11-14T22:13:25.000Z"]
        clock.advance(1)
        assert e.write_txn_markers(7, 0, 0, True, [("k", 0)]) == [None]
        [(_, version, _)] = list(e.index_entries("k", 0, 0))
        marker = batch_header(e.kafka_batch("k", 0, version))
        assert marker.base_timestamp == marker.max_timestamp == 1_700_000_006_000
    finally:
        e.close()


def test_segment_ms_rolls_and_retention_by_time_follow_the_engines_clock(tmp_path: Path):
    """One minute segments kept one hour, run through in no time: an append rolls the active segment once the
    clock is segment.ms past its first append (the batches' timestamps never move), and retention deletes a
    sealed segment once the clock is retention.ms past its last write (its file's time, which the machine's clock
    gives: so every segment sealed during the test counts as written when it started)."""
    clock = ManualClock.from_now()  # segment files get the machine's time: the clock starts there
    e = Engine.open(tmp_path, clock=clock)
    try:
        e.create_kafka_topic("t", 1, {"segment.ms": "60000", "retention.ms": "3600000"})
        wal = e.vnodes[e.catalog.topics["t"].db][0].wal

        def append(value: bytes) -> int:
            return e.append_batches("t", 0, [encode_batch(0, [1_000], [None], [value])])

        append(b"0")
        clock.advance(59)
        append(b"1")
        assert len(wal.segments) == 1  # 59 s old
        clock.advance(2)
        append(b"2")  # 61 s after the first: rolls first
        assert [s.first for s in wal.segments] == [0, 2]
        clock.advance(30)
        append(b"3")
        assert len(wal.segments) == 2  # the new segment's age counts from its own first append
        e.sync_due(clock.monotonic())
        assert e.watermarks("t", 0) == (0, 4)  # sealed seconds ago: kept
        clock.advance(3600 + 600)  # (600 s: more than the test ran, so past the sealed files' times too)
        append(b"4")  # rolls: this segment is more than a minute old
        assert [s.first for s in wal.segments] == [0, 2, 4]
        e.sync_due(clock.monotonic())  # retention is due: the clock's wall time, not the machine's
        assert e.watermarks("t", 0) == (4, 5) and wal.first_version == 4  # the sealed segments went
    finally:
        e.close()


def test_the_wal_fsync_period_is_timed_by_its_clock(tmp_path: Path):
    clock = ManualClock()
    wal = Wal.open(tmp_path, WalOptions(level=1, fsync_period_ms=1000), clock=clock)
    try:
        assert wal.sync_due(clock.monotonic()) == (1.0, None)  # a period from the open
        wal.append([(1, 1, 0, b"x")])
        clock.advance(0.75)
        assert wal.sync_due(clock.monotonic()) == (0.25, None)
        clock.advance(0.25)
        wait, pending = wal.sync_due(clock.monotonic())
        assert wait == 1.0 and pending is not None and pending.version == 1
        pending.run()
        pending.done()
        assert wal.durable_version == 1
    finally:
        wal.close()


def test_quarantine_names_and_lost_producer_ids_go_by_the_clock(tmp_path: Path):
    clock = ManualClock()
    damage = DamageLog(tmp_path, clock)
    kept = damage.report(tmp_path / "f.log", 3, 9, "test", "quarantined", b"damaged").kept
    assert kept == "quarantine/f.log.3-9.1700000000"
    (tmp_path / "producer_ids.log").write_bytes(b"garbage")
    ids = ProducerIds(tmp_path / "producer_ids.log", damage, clock)
    assert ids.allocate() == 1_700_000_000_000_000 + ProducerIds.BLOCK  # µs since the epoch, plus a block
