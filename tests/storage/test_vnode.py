"""A vnode's tables live in its meta store (``meta.db``, derived from the WAL; issue 23): memory holds a bounded
number of table definitions, a damaged, missing or refused store loses no table, a data dir of walgate before the
store (``tables.ckpt``) opens, and retention never deletes meta entries the store does not cover."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from walgate.storage import lines
from walgate.storage import vnode as vnode_module
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable
from walgate.storage.meta_store import META_STORE
from walgate.storage.vnode import CHECKPOINT


def make(tmp_path: Path, *, small_segments: bool = False, tables: int = 6) -> Engine:
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1 WAL_RETENTION_PERIOD 0")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    e.execute("CREATE TABLE db.plain (ts TIMESTAMP, v INT)")
    vnode = e.vnodes["db"][0]
    if small_segments:  # every append rolls a segment, so retention has sealed segments to delete
        vnode.wal.options = dataclasses.replace(vnode.wal.options, segment_bytes=64)
    for i in range(tables):
        e.execute(f"INSERT INTO db.t{i} USING db.st TAGS ({i}) VALUES ({1000 + i}, {i})")
    return e


def tables(e: Engine) -> list[list[object]]:
    return [r[:1] + r[3:] for r in e.execute("SHOW TABLES", "db").rows]


def rows(e: Engine) -> list[list[object]]:
    return sorted(e.execute("SELECT tbname, site, v FROM db.st").rows)


def store_path(tmp_path: Path) -> Path:
    [path] = tmp_path.glob(f"db/*/vnode0/{META_STORE}")
    return path


def test_memory_holds_a_bounded_number_of_tables_and_every_statement_still_sees_them_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(vnode_module, "CACHE_TABLES", 5)
    monkeypatch.setattr(vnode_module, "FLUSH_TABLES", 7)
    e = make(tmp_path, tables=40)
    vnode = e.vnodes["db"][0]
    assert len(vnode._cache) <= 5 and len(vnode._dirty) < 7
    expected = sorted([f"t{i}", i, i] for i in range(40))
    assert rows(e) == expected and len(tables(e)) == 41 and vnode.live_count == 41
    assert e.execute("SELECT v FROM db.t17").rows == [[17]]
    assert [r[0] for r in e.execute("DESCRIBE db.t3").rows] == ["ts", "v", "site"]
    e.execute("DROP TABLE db.t5")
    e.execute("ALTER STABLE db.st ADD TAG zone INT")
    e.execute("INSERT INTO db.t41 USING db.st TAGS (41, 7) VALUES (2000, 41)")
    assert sorted(e.execute("SELECT tbname, zone FROM db.st WHERE zone = 7").rows) == [["t41", 7]]
    assert vnode.live_count == 41 and len(vnode._cache) <= 5 and len(vnode._dirty) < 7
    e.close()
    e = Engine.open(tmp_path)
    vnode = e.vnodes["db"][0]
    got = rows(e)
    assert got == sorted(expected + [["t41", 41, 41]]) and vnode.live_count == 41  # a dropped table's rows stay
    assert "t5" not in [r[0] for r in e.execute("SHOW TABLES", "db").rows]
    e.execute("DROP STABLE db.st")
    assert [r[0] for r in e.execute("SHOW TABLES", "db").rows] == ["plain"] and vnode.live_count == 1
    assert e.damage() == []
    e.close()


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x10
    path.write_bytes(bytes(data))


def damaged_copy(template: Path, root: Path, op: str, at: int) -> None:
    """``template`` copied to ``root``, its meta store damaged: ``flip`` a byte at ``at``, ``truncate`` there, or
    ``zeros`` (all of it)."""
    shutil.copytree(template, root)
    path = store_path(root)
    if op == "flip":
        flip(path, at)
    elif op == "truncate":
        os.truncate(path, at)
    else:
        path.write_bytes(bytes(path.stat().st_size))


@pytest.mark.parametrize("seed", range(3))
def test_a_damaged_meta_store_loses_no_table(tmp_path: Path, seed: int):
    """Flipped bytes (the header, the rows, anywhere), a truncation, zeros: the store is rebuilt from the WAL
    (reported) where the damage matters, and every table and row is served as before."""
    template = tmp_path / "template"
    e = make(template)
    before, before_rows = tables(e), rows(e)
    e.close()
    size = store_path(template).stat().st_size
    rng = random.Random(seed)
    cases = [("flip", at) for at in sorted(rng.sample(range(size), 12))] + [("flip", rng.randrange(100))]
    cases += [("truncate", rng.randrange(size)), ("truncate", 0), ("zeros", 0)]
    reported = 0
    for n, (op, at) in enumerate(cases):
        root = tmp_path / f"case{n}"
        damaged_copy(template, root, op, at)
        e = Engine.open(root)
        assert tables(e) == before and rows(e) == before_rows, (op, at)
        for d in e.damage():
            assert d.file.endswith(META_STORE) and d.action == "rebuilt" and "missing" not in d.reason
        reported += bool(e.damage())
        if op != "flip":
            assert e.damage(), (op, at)
        e.close()
        e = Engine.open(root)  # written again on close
        assert tables(e) == before and e.damage() == []
        e.close()
    assert reported >= 3


def test_a_store_found_damaged_while_serving_is_rebuilt_and_the_read_answers(tmp_path: Path):
    e = make(tmp_path)
    before = rows(e)
    vnode = e.vnodes["db"][0]
    vnode.checkpoint()
    vnode._cache.clear()
    vnode._store._conn.execute("UPDATE tables SET def = CAST('00000000 {}' AS BLOB) WHERE name = 't3'")
    assert rows(e) == before
    [d] = e.damage()
    assert d.file.endswith(META_STORE) and d.action == "rebuilt"
    e.close()


def test_the_report_says_when_retention_took_meta_entries_the_rebuild_needed(tmp_path: Path):
    e = make(tmp_path, small_segments=True)
    vnode = e.vnodes["db"][0]
    assert vnode.apply_retention(time.time() + 10) and vnode.wal.first_version > 0
    e.close()
    store_path(tmp_path).write_bytes(b"not a database, not at all" * 200)
    e = Engine.open(tmp_path)
    [damage] = e.damage()
    assert f"retention deleted versions below {e.vnodes['db'][0].wal.first_version}" in damage.reason
    e.close()


def full_disk(e: Engine, pages: int | None = None) -> None:
    """SQLite's own full-disk path (SQLITE_FULL, as ENOSPC gives): the store may not grow past ``pages`` pages
    (default: its size now; large: no limit)."""
    conn = e.vnodes["db"][0]._store._conn
    conn.execute(f"PRAGMA max_page_count = {pages or conn.execute('PRAGMA page_count').fetchone()[0]}")


def test_a_store_that_refuses_writes_keeps_the_tables_in_memory_and_retention_waits(tmp_path: Path):
    e = make(tmp_path, small_segments=True)
    vnode = e.vnodes["db"][0]
    segments = len(vnode.wal.segments)
    full_disk(e)  # (before the writes: each write's end tries the store, the first ones may fit its free pages)
    for i in range(6, 60):
        e.execute(f"INSERT INTO db.t{i} USING db.st TAGS ({i}) VALUES ({1000 + i}, {i})")
    before = tables(e)
    with pytest.raises(StorageUnavailable, match=META_STORE):
        vnode.checkpoint()
    assert not vnode.apply_retention(time.time() + 10)
    assert len(vnode.wal.segments) == segments + 54 and vnode.wal.first_version == 0
    assert len(before) == 61 and e.damage() == []
    full_disk(e, 1 << 30)
    assert vnode.apply_retention(time.time() + 10)  # the disk takes writes again
    assert tables(e) == before
    e.close()
    e = Engine.open(tmp_path)
    assert tables(e) == before and e.damage() == []
    e.close()


def test_a_store_that_cannot_be_written_at_close_loses_nothing(tmp_path: Path):
    e = make(tmp_path)
    e.vnodes["db"][0].checkpoint()
    full_disk(e)
    for i in range(6, 60):
        e.execute(f"INSERT INTO db.t{i} USING db.st TAGS ({i}) VALUES ({1000 + i}, {i})")
    before = tables(e)
    with pytest.raises(StorageUnavailable, match="full"):
        e.vnodes["db"][0].checkpoint()
    e.close()  # logs the refusal; the WAL holds every meta entry after what the store covers
    e = Engine.open(tmp_path)
    assert tables(e) == before and e.damage() == []
    e.close()


def test_a_store_ahead_of_the_wal_is_rebuilt(tmp_path: Path):
    """As after a power loss at WAL_LEVEL 1: the store covers versions the WAL lost."""
    e = make(tmp_path)
    before = tables(e)
    vnode = e.vnodes["db"][0]
    vnode._flush(vnode.wal.next_version + 5)  # the store says it covers entries past the WAL's end
    e.close()
    e = Engine.open(tmp_path)
    assert tables(e) == before and e.vnodes["db"][0]._store.covered == e.vnodes["db"][0].wal.next_version
    e.close()


def test_a_data_dir_with_a_table_checkpoint_opens_and_the_store_takes_it_over(tmp_path: Path):
    """walgate before the meta store kept the table map in ``tables.ckpt``; with retention past the create
    entries, only the checkpoint has the tables."""
    e = make(tmp_path, small_segments=True)
    vnode = e.vnodes["db"][0]
    before = tables(e)
    snap = {"version": vnode.wal.next_version, "tables": [
        {"name": t.name, "stable": t.stable, "tags": t.tags, "version": t.version, "created_ts": t.created_ts,
         "dropped": t.dropped, "columns": [[c.name, c.type.name, c.type.length] for c in t.columns] if t.columns
         else None} for t in vnode.tables()]}
    assert vnode.apply_retention(time.time() + 10) and vnode.wal.first_version > 0
    before_rows = rows(e)  # of the last subtable, whose rows retention kept
    assert before_rows == [["t5", 5, 5]]
    e.close()
    path = store_path(tmp_path)
    path.unlink()
    (path.parent / CHECKPOINT).write_bytes(lines.encode(snap))
    e = Engine.open(tmp_path)
    assert tables(e) == before and rows(e) == before_rows and e.damage() == []
    assert not (path.parent / CHECKPOINT).exists() and path.exists()
    e.close()
    e = Engine.open(tmp_path)
    assert tables(e) == before and e.damage() == []
    e.close()


def test_a_damaged_table_checkpoint_of_an_older_data_dir_is_reported_and_the_wal_rebuilds_the_tables(tmp_path: Path):
    e = make(tmp_path)
    before = tables(e)
    e.close()
    path = store_path(tmp_path)
    path.unlink()
    (path.parent / CHECKPOINT).write_bytes(lines.encode({"version": 3, "tables": [{"name": "t0"}]}))
    e = Engine.open(tmp_path)
    assert tables(e) == before
    [damage] = e.damage()
    assert damage.file.endswith(CHECKPOINT) and damage.action == "rebuilt" and "missing" not in damage.reason
    assert not (path.parent / CHECKPOINT).exists()
    e.close()


KILLED_AFTER_UNSYNCED_FLUSHES = """
import json, os, signal, sys
from pathlib import Path
sys.path[:0] = [{tests!r}]
from walgate.storage import vnode as vnode_module
from test_vnode import make, tables
vnode_module.FLUSH_TABLES = 7
e = make(Path({root!r}), tables=40)
print(json.dumps(tables(e), default=str), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_flushes_lost_with_the_machine_are_replayed_from_the_wal(tmp_path: Path):
    """Flushes are not fsynced: a process killed after several of them, and then its store's SQLite WAL lost (all
    that a power loss may take of writes never fsynced), leaves a store covering an earlier version; the next open
    replays the WAL's meta entries from there and loses no table, with no damage to report."""
    code = KILLED_AFTER_UNSYNCED_FLUSHES.format(tests=str(Path(__file__).parent), root=str(tmp_path))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    before = json.loads(child.stdout)
    assert len(before) == 41
    wal = store_path(tmp_path).with_name(META_STORE + "-wal")
    assert wal.stat().st_size > 0  # the flushes were committed there, never checkpointed into meta.db
    wal.unlink()
    store_path(tmp_path).with_name(META_STORE + "-shm").unlink()
    e = Engine.open(tmp_path)
    assert json.loads(json.dumps(tables(e), default=str)) == before and e.damage() == []
    e.close()


def test_a_killed_process_leaves_the_count_of_live_tables_right(tmp_path: Path):
    """The store of a killed process covers its last flush; the open replays the meta entries after it on top of
    the store's count of live tables (the count the table limit checks), and writes that count back."""
    code = KILLED_AFTER_UNSYNCED_FLUSHES.format(tests=str(Path(__file__).parent), root=str(tmp_path))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    for _ in range(2):  # the open after the kill, and the one after it (the count written back)
        e = Engine.open(tmp_path)
        assert e.vnodes["db"][0].live_count == len(tables(e)) == 41 and e.damage() == []
        e.close()


def test_retention_deletes_segments_only_after_a_durable_store_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Before retention deletes WAL segments, the store is written durably (fsynced with every unsynced flush
    before it), even when no table changed since the last (unsynced) flush."""
    e = make(tmp_path, small_segments=True)
    vnode = e.vnodes["db"][0]
    vnode._flush(vnode.wal.next_version)  # every table in the store, not fsynced
    calls: list[object] = []
    store_write, delete_oldest = vnode._store.write, vnode.wal.delete_oldest
    monkeypatch.setattr(vnode._store, "write", lambda *a, **k: calls.append(("write", *a[2:])) or store_write(*a))
    monkeypatch.setattr(vnode.wal, "delete_oldest", lambda n: calls.append(("delete",)) or delete_oldest(n))
    assert vnode.apply_retention(time.time() + 10)
    assert calls == [("write", vnode.wal.next_version, 7, True), ("delete",)]
    e.close()
