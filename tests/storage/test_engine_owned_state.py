"""Two engines in one process share nothing (issue 23, "hidden inputs"): each owns its cache of open segment files
(storage/filecache.py) and its fsync latency counters (storage/fileio.py SyncLatency), which every component of its
data dir was opened with, so one engine's writes, evictions and fsyncs are never counted or felt by the other (a
cluster test runs several nodes in one process)."""

from __future__ import annotations

from pathlib import Path

from walgate.storage.engine import Engine

_SCHEMA = ("CREATE DATABASE d VGROUPS 2 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0",
           "CREATE STABLE d.m (ts TIMESTAMP, v INT) TAGS (t INT)")


def _syncs(engine: Engine) -> int:
    return sum(sum(recorder.snapshot()[0]) for recorder in engine.syncs.calls.values())


def _cached_dirs(engine: Engine) -> set[Path]:
    return {path.parents[3] for path, _ in engine.files._files}  # <data dir>/db/<id>/vnode<i>/wal/<segment>


def test_two_engines_own_their_file_caches_and_fsync_counters(tmp_path: Path) -> None:
    a, b = Engine.open(tmp_path / "a"), Engine.open(tmp_path / "b")
    try:
        assert a.files is not b.files and a.syncs is not b.syncs
        synced_b = _syncs(b)
        for statement in _SCHEMA:
            a.execute(statement)
        a.execute("INSERT INTO d.t1 USING d.m TAGS (1) VALUES (1700000000000, 1) d.t2 USING d.m TAGS (2) "
                  "VALUES (1700000000000, 2)")
        assert _syncs(a) > 0 and _syncs(b) == synced_b  # the catalog's and the level-2 WAL's fsyncs are a's
        assert len(a.files) and not len(b.files)  # a's segments are in a's cache only
        assert _cached_dirs(a) == {tmp_path / "a" / "db"}

        for statement in _SCHEMA:
            b.execute(statement)
        b.execute("INSERT INTO d.t1 USING d.m TAGS (1) VALUES (1700000000000, 1)")
        cached_a = dict(a.files._files)
        b.files.resize(0)  # b's evictions close none of a's descriptors
        assert not len(b.files) and a.files._files == cached_a
        assert [sorted(r.rows) for r in (a.execute("SELECT v FROM d.m"), b.execute("SELECT v FROM d.m"))] == [
            [[1], [2]], [[1]]]
    finally:
        a.close()
        b.close()
