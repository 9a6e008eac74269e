"""A read-only reader of a vnode's ``meta.db`` (issue 23: a write planned before it takes the vnode's lane) answers
as the vnode's own lookups do, from one snapshot, and gives up, writing and reporting nothing, on a store that is
missing, damaged or ahead of the vnode's ``meta_version``; the vnode's own lookup then reports the damage once and
rebuilds."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from walgate.storage import meta_reader
from walgate.storage.engine import Engine
from walgate.storage.meta_reader import MetaReader, ReaderGaveUp
from walgate.storage.meta_store import META_STORE, MetaStore, OpenStores
from walgate.storage.vnode import Vnode

NAMES = [*(f"t{i}" for i in range(12)), "plain", "gone", "s0", "s1", "never", "t3"]


def make(root: Path) -> Engine:
    """One vnode holding subtables, a normal table, a dropped table and the subtables of a dropped supertable,
    every write ended (as Commits.commit ends them)."""
    e = Engine.open(root)
    e.execute("CREATE DATABASE db VGROUPS 1")
    vnode = e.vnodes["db"][0]
    for stmt in ["CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)",
                 "CREATE STABLE db.old (ts TIMESTAMP, v INT) TAGS (site INT)",
                 "CREATE TABLE db.plain (ts TIMESTAMP, v INT)",
                 *(f"INSERT INTO db.t{i} USING db.st TAGS ({i}) VALUES (1000, {i})" for i in range(12)),
                 "CREATE TABLE db.gone USING db.st TAGS (99)", "DROP TABLE db.gone",
                 "CREATE TABLE db.s0 USING db.old TAGS (0)", "CREATE TABLE db.s1 USING db.old TAGS (1)",
                 "DROP STABLE db.old"]:
        e.execute(stmt)
        vnode.end_write()
    return e


def own(vnode: Vnode) -> dict[str, object]:
    found = {n: vnode.get(n) for n in NAMES}
    return {n: t for n, t in found.items() if t is not None}


def test_lookups_through_a_reader_equal_the_vnodes_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(meta_reader, "CHUNK", 5)  # several IN (...) chunks, the last one short
    e = make(tmp_path)
    vnode = e.vnodes["db"][0]
    with MetaReader.open(vnode.dir / META_STORE, vnode.meta_version) as reader:
        assert reader.covered == vnode.meta_version
        got = reader.lookup(NAMES)
    assert got == own(vnode) and "never" not in got and got["gone"].dropped and got["s0"].dropped
    assert got["plain"].columns is not None and got["t3"].tags == {"site": 3}
    assert e.damage() == []
    e.close()


def test_a_reader_answers_from_one_snapshot_while_the_vnode_writes(tmp_path: Path):
    e = make(tmp_path)
    vnode = e.vnodes["db"][0]
    reader = MetaReader.open(vnode.dir / META_STORE, vnode.meta_version)
    before = reader.lookup(NAMES)
    e.execute("CREATE TABLE db.later USING db.st TAGS (7)")
    e.execute("DROP TABLE db.t1")
    vnode.end_write()
    assert vnode.meta_version > reader.covered  # the lane sees the plan's version is old and checks it again
    assert reader.lookup([*NAMES, "later"]) == before  # the snapshot the reader began with
    reader.close()
    with MetaReader.open(vnode.dir / META_STORE, vnode.meta_version) as fresh:
        now = fresh.lookup([*NAMES, "later"])
    assert now["t1"].dropped and "later" in now and fresh.covered == vnode.meta_version
    e.close()


def test_a_reader_gives_up_on_a_store_ahead_of_the_vnode_or_missing_and_writes_nothing(tmp_path: Path):
    e = make(tmp_path)
    vnode = e.vnodes["db"][0]
    path = vnode.dir / META_STORE
    with pytest.raises(ReaderGaveUp, match=f"covers version {vnode.meta_version}, past the vnode's"):
        MetaReader.open(path, vnode.meta_version - 1)
    missing = tmp_path / "nowhere" / META_STORE
    with pytest.raises(ReaderGaveUp, match="unable to open"):
        MetaReader.open(missing, 10)
    assert not missing.parent.exists()
    e.close()
    before = path.read_bytes()
    with MetaReader.open(path, 1 << 40) as reader:  # the store of a closed vnode: one file, no SQLite side files
        assert len(reader.lookup(NAMES)) == 16
    assert path.read_bytes() == before and e.damage() == []


def test_a_reader_gives_up_on_damage_and_the_vnodes_own_lookup_reports_it_once_and_rebuilds(tmp_path: Path):
    e = make(tmp_path)
    vnode = e.vnodes["db"][0]
    want = own(vnode)
    conn = vnode._store._conn
    assert conn is not None
    conn.execute("UPDATE tables SET def = CAST('00000000 {}' AS BLOB) WHERE name = 't3'")  # committed: on disk
    conn.execute("COMMIT")
    conn.execute("BEGIN")
    path = vnode.dir / META_STORE
    for _ in range(2):  # a reader never reports: every planner that meets the damage gives up
        with MetaReader.open(path, vnode.meta_version) as reader:
            assert reader.lookup(["t1", "t2"]) == {n: want[n] for n in ("t1", "t2")}
            with pytest.raises(ReaderGaveUp, match="'t3'"):
                reader.lookup(["t2", "t3"])
    assert e.damage() == [] and own(vnode) == want  # t3 cached: the vnode's lookups do not read the store
    vnode.check_store(["t2", "t3"])  # the lane, told the reader gave up: reported, rebuilt from the WAL
    [damage] = e.damage()
    assert damage.file.endswith(META_STORE) and damage.action == "rebuilt" and "'t3'" in damage.reason
    vnode.check_store(NAMES)
    assert own(vnode) == want and len(e.damage()) == 1
    with MetaReader.open(path, vnode.meta_version) as reader:
        assert reader.lookup(NAMES) == want and reader.covered == vnode.meta_version
    conn = vnode._store._conn
    assert conn is not None
    conn.execute("UPDATE covered SET line = CAST('00000000 {}' AS BLOB)")
    conn.execute("COMMIT")
    conn.execute("BEGIN")
    with pytest.raises(ReaderGaveUp, match="covered version: checksum mismatch"):
        MetaReader.open(path, vnode.meta_version)
    assert len(e.damage()) == 1
    e.close()


@pytest.mark.parametrize("seed", range(2))
def test_flipped_and_truncated_stores_make_a_reader_give_up_or_answer_as_the_store_does(tmp_path: Path, seed: int):
    """Whatever a byte of ``meta.db`` becomes, or wherever it is cut: the reader gives up (ReaderGaveUp, nothing
    else raised) or answers what the store's own lookup of the same file answers."""
    template = tmp_path / "template"
    e = make(template)
    e.close()
    [path] = template.glob(f"db/*/vnode0/{META_STORE}")
    size = path.stat().st_size
    rng = random.Random(seed)
    cases = [("flip", at) for at in sorted(rng.sample(range(size), 40))] + [("truncate", rng.randrange(size))]
    answered = gave_up = 0
    for n, (op, at) in enumerate(cases):
        case = tmp_path / f"case{n}.db"
        shutil.copyfile(path, case)
        if op == "flip":
            data = bytearray(case.read_bytes())
            data[at] ^= 0x10
            case.write_bytes(bytes(data))
        else:
            os.truncate(case, at)
        try:
            with MetaReader.open(case, 1 << 40) as reader:
                got = reader.lookup(NAMES)
        except ReaderGaveUp:
            gave_up += 1
            continue
        answered += 1
        # the store's lookups of the same file, without the checks MetaStore.open makes
        store = MetaStore(case, sqlite3.connect(case, isolation_level=None), 0, 0, OpenStores())
        try:
            assert got == {name: t for name in NAMES if (t := store.get(name)) is not None}, (op, at)
        finally:
            store.close()
    assert answered and gave_up
