"""A vnode's ``meta.db`` is current at the end of every write (issue 23, for planning before the lane): after
``Vnode.end_write`` the store's covered version equals ``Vnode.meta_version``, a store that refuses leaves it behind
and loses nothing, and ``Vnode.apply_creates`` of many creations is ``apply_meta`` of each in turn."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from walgate.storage import meta_store
from walgate.storage import vnode as vnode_module
from walgate.storage.engine import Engine
from walgate.storage.entry import encode_meta
from walgate.storage.meta_reader import MetaReader
from walgate.storage.meta_store import create_body
from walgate.storage.vnode import Vnode
from walgate.storage.wal import KIND_META

STATEMENTS = [
    "CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)",
    "CREATE TABLE db.plain (ts TIMESTAMP, v INT)",
    "INSERT INTO db.t1 USING db.st TAGS (1) VALUES (1000, 1)",
    "INSERT INTO db.t1 VALUES (1001, 2)",  # rows only: no table changed
    "CREATE TABLE db.t2 USING db.st TAGS (2)",
    "INSERT INTO db.t3 USING db.st TAGS (3) VALUES (1000, 3) db.t4 USING db.st TAGS (4) VALUES (1000, 4)",
    "DROP TABLE db.t2",
    "ALTER STABLE db.st ADD TAG zone INT",
    "CREATE TABLE db.t2 USING db.st TAGS (22, 1)",
    "DROP STABLE db.st",
    "CREATE STABLE db.st2 (ts TIMESTAMP, v INT) TAGS (site INT)",
    "INSERT INTO db.u1 USING db.st2 TAGS (1) VALUES (1000, 1)",
]
NAMES = ["plain", "t1", "t2", "t3", "t4", "u1", "never"]


def store_state(vnode: Vnode) -> tuple[int, list[tuple[Any, ...]]]:
    """What the vnode's ``meta.db`` holds, as a separate reader sees it: covered version, rows in write order."""
    with MetaReader.open(vnode.dir / "meta.db", vnode.meta_version) as reader:
        rows = sorted(reader.lookup(NAMES).values(), key=lambda t: t.name)
        return reader.covered, [(t.name, t.stable, t.tags, t.version, t.dropped) for t in rows]


def vnode_state(vnode: Vnode) -> list[tuple[Any, ...]]:
    found = (vnode.get(n) for n in NAMES)
    return [(t.name, t.stable, t.tags, t.version, t.dropped) for t in found if t is not None]


def test_after_each_write_ended_the_store_covers_the_vnodes_meta_version_and_holds_its_tables(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1")
    vnode = e.vnodes["db"][0]
    assert vnode.meta_version == vnode.wal.next_version  # a new vnode: every (no) meta entry applied
    for stmt in STATEMENTS:
        e.execute(stmt)
        vnode.end_write()  # what Commits.commit does after applying a vnode's metas
        metas = [x.version for x in vnode.wal.read_from(0) if x.kind == KIND_META]
        assert vnode.meta_version == max([*metas, -1]) + 1, stmt
        assert store_state(vnode) == (vnode.meta_version, vnode_state(vnode)), stmt
    e.close()
    e = Engine.open(tmp_path)
    vnode = e.vnodes["db"][0]
    assert vnode.meta_version == vnode.wal.next_version == store_state(vnode)[0]  # open: the WAL replayed, flushed
    assert e.damage() == []
    e.close()


def test_every_committing_write_leaves_the_store_current_without_a_call_of_its_own(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1")
    vnode = e.vnodes["db"][0]
    for stmt in STATEMENTS:
        e.execute(stmt)
        assert store_state(vnode) == (vnode.meta_version, vnode_state(vnode)), stmt
    e.close()


def full_disk(vnode: Vnode, pages: int | None = None) -> None:
    """SQLite's own full-disk path (SQLITE_FULL, as ENOSPC gives): the store may not grow past ``pages`` pages
    (default: its size now; large: no limit)."""
    conn = vnode._store._conn
    assert conn is not None
    conn.execute(f"PRAGMA max_page_count = {pages or conn.execute('PRAGMA page_count').fetchone()[0]}")


def test_a_store_that_refuses_the_end_of_write_flush_stays_behind_and_loses_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    monkeypatch.setattr(vnode_module, "FLUSH_TABLES", 50)
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1")
    e.execute(STATEMENTS[0])
    vnode = e.vnodes["db"][0]
    full_disk(vnode)
    names = [f"big{i:04d}_{'x' * 150}" for i in range(300)]
    for i, name in enumerate(names[:200]):  # more rows than the store's free pages take
        e.execute(f"CREATE TABLE db.{name} USING db.st TAGS ({i})")
        vnode.end_write()  # refused once full: the tables stay in memory
    behind = store_state(vnode)[0]
    assert behind < vnode.meta_version  # what a planner read gets checked again on the lane
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1  # logged once, not per write
    assert "disk is full" in caplog.records[0].message
    assert vnode.live_count == 200 and len(e.execute("SHOW TABLES", "db").rows) == 200
    full_disk(vnode, 1 << 30)  # the disk takes writes again: tried at the next FLUSH_TABLES changed tables
    for i, name in enumerate(names[200:]):
        e.execute(f"CREATE TABLE db.{name} USING db.st TAGS ({i})")
        vnode.end_write()
    assert store_state(vnode)[0] == vnode.meta_version
    with MetaReader.open(vnode.dir / "meta.db", vnode.meta_version) as reader:
        assert len(reader.lookup(names)) == 300
    e.close()
    e = Engine.open(tmp_path)
    assert len(e.execute("SHOW TABLES", "db").rows) == e.vnodes["db"][0].live_count == 300 and e.damage() == []
    e.close()


def creates(start: int) -> tuple[list[str], list[dict[str, Any]]]:
    """Create metas: new subtables, one twice, a dropped table created again, a live one created again (tags
    replaced), a normal table."""
    names = [f"n{k:03d}" for k in range(start, start + 40)] + ["n005", "gone", "live", "plain2"]
    metas: list[dict[str, Any]] = [
        {"op": "create_table", "name": n, "stable": "st", "tags": {"site": k}, "ts": 5000 + k} for k, n in enumerate(names)]
    metas[-1] = {"op": "create_table", "name": "plain2", "columns": [["ts", "TIMESTAMP", 8], ["v", "INT", 4]], "ts": 1}
    return names, metas


@pytest.mark.parametrize("disk", ["takes writes", "full"])
def test_apply_creates_is_apply_meta_of_each_in_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk: str):
    monkeypatch.setattr(vnode_module, "FLUSH_TABLES", 7)  # flushes inside the run, at the same creations
    template = tmp_path / "template"
    e = Engine.open(template)
    e.execute("CREATE DATABASE db VGROUPS 1")
    e.execute(STATEMENTS[0])
    for name in ("gone", "live"):
        e.execute(f"CREATE TABLE db.{name} USING db.st TAGS (0)")
    e.execute("DROP TABLE db.gone")
    e.close()
    seen = []
    for way in ("each", "bulk"):
        shutil.copytree(template, tmp_path / way)
        e = Engine.open(tmp_path / way)
        vnode = e.vnodes["db"][0]
        if disk == "full":
            full_disk(vnode)
        for batch in (creates(0), creates(100)):
            names, metas = batch
            version = vnode.wal.append([(KIND_META, 1, m["ts"], encode_meta(m)) for m in metas])
            if way == "each":
                for i, m in enumerate(metas):
                    vnode.apply_meta(m, version + i)
            else:  # with the bodies a planner encodes (unused here: n005 is created twice)
                bodies = {m["name"]: body for m in metas if (body := create_body(m)) is not None}
                vnode.apply_creates(version, names, metas, bodies)
            vnode.end_write()
        conn = vnode._store._conn
        assert conn is not None
        rows = conn.execute("SELECT id, name, def, version FROM tables ORDER BY id").fetchall()
        seen.append((vnode.tables(), vnode.live_count, vnode.meta_version, vnode._store.covered, rows,
                     dict(vnode._dirty), vnode._flush_at))
        e.close()
        e = Engine.open(tmp_path / way)  # replayed from the WAL
        vnode = e.vnodes["db"][0]
        seen.append((vnode.tables(), vnode.live_count, e.damage()))
        e.close()
    each, each_reopened, bulk, bulk_reopened = seen
    assert bulk == each and bulk_reopened == each_reopened
    assert each[1] == 1 + 80 + 2 and each_reopened[1] == 83  # "live", the new ones, "gone" and "plain2" again
    if disk == "full":  # refused: kept in memory, covered behind
        assert each[5] and each[3] < each[2]
    else:
        assert each[5] == {} and each[3] == each[2] and len(each[4]) == 2 + 80 + 1


def test_apply_creates_refuses_names_that_do_not_match_the_metas(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1")
    vnode = e.vnodes["db"][0]
    names, metas = creates(0)
    with pytest.raises(ValueError, match="43 names for 44 metas"):
        vnode.apply_creates(vnode.wal.next_version, names[:-1], metas)
    assert vnode.live_count == 0
    e.close()


def test_apply_creates_writes_the_row_bodies_a_planner_encoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Creations applied with their bodies (``create_body``, as a planner encodes them in its worker) leave the
    same rows in ``meta.db`` as ``apply_meta`` of each, and the lane encodes only the rows that came without one (a
    normal table's)."""
    monkeypatch.setattr(vnode_module, "FLUSH_TABLES", 7)
    encoded: list[str] = []  # the tables whose row the store encoded itself
    def_body = meta_store.def_body
    monkeypatch.setattr(meta_store, "def_body", lambda t: encoded.append(t.name) or def_body(t))
    names, metas = creates(0)
    names, metas = names[:40] + names[-1:], metas[:40] + metas[-1:]  # no name twice
    seen = []
    for way in ("each", "bulk"):
        e = Engine.open(tmp_path / way)
        e.execute("CREATE DATABASE db VGROUPS 1")
        e.execute(STATEMENTS[0])
        vnode = e.vnodes["db"][0]
        version = vnode.wal.append([(KIND_META, 1, m["ts"], encode_meta(m)) for m in metas])
        encoded.clear()
        if way == "each":
            for i, m in enumerate(metas):
                vnode.apply_meta(m, version + i)
        else:
            vnode.apply_creates(version, names, metas, {m["name"]: b for m in metas if (b := create_body(m))})
        vnode.end_write()
        conn = vnode._store._conn
        assert conn is not None
        rows = conn.execute("SELECT id, name, def, version FROM tables ORDER BY id").fetchall()
        state = (rows, vnode.tables(), vnode.live_count, vnode._store.covered)
        e.close()
        e = Engine.open(tmp_path / way)  # the store as written, checked whole, and the WAL after it replayed
        vnode = e.vnodes["db"][0]
        seen.append((sorted(encoded), *state, vnode.tables(), vnode.live_count, e.damage()))
        e.close()
    (each_encoded, *each), (bulk_encoded, *bulk) = seen
    assert bulk == each and len(each[0]) == 41 and each[0][-1][3] == each[0][0][3] + 40
    assert each[4] == each[1] and each[5] == each[2] == 41 and each[6] == []  # reopened: the same tables
    assert len(each_encoded) == 41 and bulk_encoded == ["plain2"]


def test_a_flush_of_more_tables_than_the_cache_holds_leaves_the_cache_of_each_remembered_in_turn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The flush remembers only the last CACHE_TABLES changed tables: the cache remembering each in turn leaves
    (every other entry evicted), so no table is answered from a stale cached definition."""
    monkeypatch.setattr(vnode_module, "CACHE_TABLES", 4)
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1")
    e.execute(STATEMENTS[0])
    vnode = e.vnodes["db"][0]
    names, metas = creates(0)
    version = vnode.wal.append([(KIND_META, 1, m["ts"], encode_meta(m)) for m in metas[:10]])
    vnode.apply_creates(version, names[:10], metas[:10])
    vnode.end_write()
    assert list(vnode._cache) == names[6:10]
    assert vnode.get("n000") is not None and list(vnode._cache) == [*names[7:10], "n000"]  # read, cached
    again = [{**m, "tags": {"site": 100 + k}} for k, m in enumerate(metas[:10])]  # the same tables, new tags
    version = vnode.wal.append([(KIND_META, 1, m["ts"], encode_meta(m)) for m in again])
    vnode.apply_creates(version, names[:10], again)
    vnode.end_write()
    assert list(vnode._cache) == names[6:10]
    assert [vnode.get(n).tags for n in names[:10]] == [{"site": 100 + k} for k in range(10)]  # type: ignore[union-attr]
    e.close()
