"""A write planned as a worker plans it looks its tables up in the vnodes' ``meta.db`` through read-only readers
(walgate.storage.stored_tables, issue 23 plan step 3), and the storage thread checks again only what may have
changed since: nothing for a vnode whose meta version is the one the plan read at, that vnode's names in bulk for
one that changed, and, for a vnode whose store a reader could not read, its names through the vnode's own store
(damage reported once, by the vnode). Whichever way, the WAL gets the bytes the same write planned inline writes.
Ordering, not timing: each test plans, then changes what it changes, then applies."""

from __future__ import annotations

import pickle
from pathlib import Path

from tests.storage.test_vnode_meta_version import full_disk
from tests.storage.write_requests import NOW, REQUESTS, marks, planned, seeded_engine, since
from walgate.storage.engine import Engine
from walgate.storage.entry import decode_entry
from walgate.storage.lineproto import child_table_name
from walgate.storage.meta_store import META_STORE
from walgate.storage.stored_tables import StoredTables
from walgate.storage.vnode import vnode_of
from walgate.storage.write_plan import InsertRequest, LinesRequest, plan

SERIES = 40


def lines_engine(path: Path) -> Engine:
    """A database of 2 vnodes holding a supertable with SERIES // 2 subtables (every other series)."""
    engine = seeded_engine(path)
    engine.execute("CREATE DATABASE lp VGROUPS 2")
    engine.execute("CREATE STABLE lp.m (ts TIMESTAMP, v DOUBLE) TAGS (host NCHAR(8))")
    engine.write_lines("lp", b"".join(b"m,host=h%d v=0 1700000000000000000\n" % i for i in range(0, SERIES, 2)))
    return engine


BODY = LinesRequest("lp", b"".join(b"m,host=h%d v=%d %d\n" % (i, i, 1_700_000_001_000_000_000 + i) for i in range(SERIES)), "ns",
                    NOW)


def test_lookups_through_the_stores_equal_the_vnodes_own_and_need_no_check_at_apply(tmp_path: Path) -> None:
    here, elsewhere = seeded_engine(tmp_path / "here"), seeded_engine(tmp_path / "elsewhere")
    start = marks(here)
    for request in REQUESTS:
        inline = plan(here.ingest.snapshot(), request)
        prepared = planned(elsewhere, request)
        assert prepared.assumed == inline.assumed  # every table it read, found or absent, as the vnode answers
        assert prepared.covered and all(
            at == elsewhere.vnodes[db][i].meta_version for (db, i), at in prepared.covered.items())
        assert here.ingest.write(request) == elsewhere.apply_write(prepared, request)
        assert since(here, start) == since(elsewhere, start)
    assert elsewhere.ingest.replans == elsewhere.ingest.rechecked == 0
    elsewhere.execute("CREATE TABLE x.gone USING x.m TAGS (1, 'g')")
    elsewhere.execute("DROP TABLE x.gone")
    snapshot = elsewhere.ingest.worker_snapshot([])
    tables = pickle.loads(pickle.dumps(snapshot.tables))
    assert isinstance(tables, StoredTables)
    x = elsewhere.catalog.database("x")
    names = [t.name for v in elsewhere.vnodes["x"] for t in v.tables()] + ["never", "fresh", "new1"]
    try:
        for name in names:
            i = vnode_of("x", name, x.vgroups)
            assert tables.find("x", i, name) == elsewhere.vnodes["x"][i].live(name), name
    finally:
        tables.close()
    gone = elsewhere.store.vnode("x", "gone").get("gone")
    assert "gone" in names and gone is not None and gone.dropped  # a dropped table is absent, as for the vnode
    for vnode in elsewhere.vnodes["x"]:  # the lane's bulk lookup answers as its lookup of each name
        assert vnode.get_many(names) == {n: t for n in names if (t := vnode.get(n)) is not None}


def test_a_table_created_between_plan_and_apply_is_checked_again_on_its_vnode_only(tmp_path: Path) -> None:
    here, elsewhere = lines_engine(tmp_path / "here"), lines_engine(tmp_path / "elsewhere")
    dropped = child_table_name("m", (("host", "h0"),))  # dropped, then created again by BODY
    for engine in (here, elsewhere):
        engine.execute(f"DROP TABLE lp.{dropped}")
    start = marks(here)
    prepared = planned(elsewhere, BODY)
    assert prepared.maybe_stored == {("lp", dropped)}  # its row is in the store: looked up when it is created
    changed = vnode_of("lp", child_table_name("m", (("host", "h1"),)), 2)  # series h1 is new in BODY
    for engine in (here, elsewhere):
        engine.write_lines("lp", b"m,host=h1 v=-1 1700000000000000001\n")  # creates it first
    assert here.ingest.write(BODY) == elsewhere.apply_write(prepared, BODY) == SERIES
    assert since(here, start) == since(elsewhere, start)  # the late table written into, not created again
    on_changed = sum(1 for db, name in prepared.assumed if db == "lp" and vnode_of(db, name, 2) == changed)
    assert elsewhere.ingest.rechecked == on_changed < len(prepared.assumed)
    assert elsewhere.ingest.replans == 0
    created = [m["name"] for v in elsewhere.vnodes["lp"] for raw in v.wal.read_from(0)
               if (m := decode_entry(raw).meta) and m["op"] == "create_table"]
    assert len(created) == SERIES + 1 and len(set(created)) == SERIES  # h0 twice: before its drop and now
    assert [v.live_count for v in elsewhere.vnodes["lp"]] == [v.live_count for v in here.vnodes["lp"]]
    assert sum(v.live_count for v in elsewhere.vnodes["lp"]) == SERIES
    assert elsewhere.store.vnode("lp", dropped).live(dropped) is not None


def flip_row(engine: Engine, db: str, name: str) -> None:
    """Flip one byte of table ``name``'s stored row in its vnode's ``meta.db`` (committed, so a reader sees it)."""
    vnode = engine.store.vnode(db, name)
    conn = vnode.store._conn
    assert conn is not None
    [(raw,)] = conn.execute("SELECT def FROM tables WHERE name = ?", (name,)).fetchall()
    flipped = bytearray(raw)
    flipped[len(flipped) // 2] ^= 0x04
    conn.execute("UPDATE tables SET def = ? WHERE name = ?", (bytes(flipped), name))
    conn.execute("COMMIT")
    conn.execute("BEGIN")


def test_a_vnode_whose_store_a_reader_cannot_read_writes_as_inline_and_reports_the_damage_once(tmp_path: Path
                                                                                               ) -> None:
    here, elsewhere = seeded_engine(tmp_path / "here"), seeded_engine(tmp_path / "elsewhere")
    start = marks(here)
    flip_row(elsewhere, "x", "a")  # an existing subtable both the INSERT and the CSV write into
    damaged = ("x", vnode_of("x", "a", elsewhere.catalog.database("x").vgroups))
    for n, request in enumerate((REQUESTS[0], REQUESTS[2])):
        prepared = planned(elsewhere, request)
        assert (prepared.covered[damaged] is None) == (n == 0)  # then the vnode rebuilt its store, readable again
        assert here.ingest.write(request) == elsewhere.apply_write(prepared, request)
        assert since(here, start) == since(elsewhere, start)
    [damage] = elsewhere.damage()
    assert damage.file.endswith(META_STORE) and damage.action == "rebuilt"
    assert elsewhere.ingest.replans == 0


def test_a_store_behind_its_vnode_asks_the_node_for_the_tables_a_write_needs_and_the_lane_checks_them(
        tmp_path: Path) -> None:
    """A store that refused the end of a write (a full disk: SQLite's own SQLITE_FULL) lacks the tables created
    since; a table an INSERT needs is asked of the node, and the lane checks that vnode's tables again."""
    here, elsewhere = seeded_engine(tmp_path / "here"), seeded_engine(tmp_path / "elsewhere")
    vnode = elsewhere.vnodes["x"][0]
    full_disk(vnode)
    names = [n for i in range(400) if vnode_of("x", n := f"late{i:03d}_{'x' * 150}", 2) == 0]
    for name in names:
        for engine in (here, elsewhere):
            engine.execute(f"CREATE TABLE x.{name} USING x.m TAGS (1, 'l')")
        if vnode.store.covered < vnode.meta_version:
            break
    assert vnode.store.covered < vnode.meta_version and vnode.store.get(name) is None  # in memory only
    start = marks(here)
    request = InsertRequest(f"INSERT INTO x.{name} (ts, v) VALUES (1700000000700, 1) "
                            f"x.late_new USING x.m TAGS (2, 'n') (ts, v) VALUES (1700000000701, 2)", None, NOW)
    prepared = planned(elsewhere, request)
    assert prepared.assumed[("x", name)] is not None  # looked up by the node: the store does not hold it
    assert here.ingest.write(request) == elsewhere.apply_write(prepared, request) == 2
    assert since(here, start) == since(elsewhere, start)
    assert elsewhere.ingest.replans == 0 and elsewhere.ingest.rechecked >= 1
