"""A vnode's record of the ALTER/DROP STABLE meta entries that name their cluster catalog record (``of``; issue 25:
a new leader writes those its WAL lacks, :meth:`SqlObjects.take_over <walgate.storage.sql_objects.SqlObjects.take_over>`):
:attr:`Vnode.stable_ofs` and :attr:`Vnode.latest_of` are kept through a reopen (``meta.db``'s covered line), a
store that refuses its writes, a damaged covered line (the store rebuilt from the WAL gives the same pairs) and a
cut (the pairs at or after it go, on disk too); a store written before them (no ``ofs``) opens as holding none and
a vnode without such entries writes its covered line as before; a meta entry whose ``of`` is not a non-negative
integer does not decode."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from walgate.storage import lines
from walgate.storage.engine import Engine
from walgate.storage.entry import encode_meta
from walgate.storage.entry_check import Undecodable, decode_whole
from walgate.storage.errors import MetaDamaged, StorageUnavailable
from walgate.storage.meta_store import META_STORE, read_covered
from walgate.storage.vnode import Vnode
from walgate.storage.wal import KIND_META, WalEntry

ALTER = {"op": "alter_stable", "stable": "st", "action": "add_column", "column": "w"}


def make(path: Path) -> Engine:
    e = Engine.open(path)
    if "db" not in e.catalog.databases:
        e.execute("CREATE DATABASE db VGROUPS 1 WAL_RETENTION_PERIOD 0")
        e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)")
        e.execute("INSERT INTO db.t0 USING db.st TAGS (0) VALUES (1000, 0)")
    return e


def write(e: Engine, *metas: dict[str, Any]) -> list[int]:
    """Each of ``metas`` committed to vnode 0 of ``db`` (as SqlObjects writes them); the WAL version of each."""
    db, vnode = e.catalog.database("db"), e.vnodes["db"][0]
    versions = []
    for meta in metas:
        versions.append(vnode.wal.next_version)
        e.commits.commit(db, {0: e.commits.with_meta(db, meta)})
        vnode.end_write()
    return versions


def vnode0(e: Engine) -> Vnode:
    return e.vnodes["db"][0]


def covered_line(path: Path) -> dict[str, Any]:
    [store] = path.glob(f"db/*/vnode0/{META_STORE}")
    conn = sqlite3.connect(store)
    try:
        state = lines.decode(conn.execute("SELECT line FROM covered").fetchone()[0])
        assert isinstance(state, dict)
        return state
    finally:
        conn.close()


def set_line(path: Path, line: bytes) -> None:
    [store] = path.glob(f"db/*/vnode0/{META_STORE}")
    conn = sqlite3.connect(store)
    conn.execute("UPDATE covered SET line = ?", (line,))
    conn.commit()
    conn.close()


def test_the_pairs_are_kept_through_a_reopen_and_a_store_without_them_writes_its_line_as_before(tmp_path: Path):
    e = make(tmp_path)
    assert vnode0(e).latest_of is None
    e.close()
    assert set(covered_line(tmp_path)) == {"version", "live"}  # no such entry: the line of every earlier release
    e = make(tmp_path)
    v1, v2, _ = write(e, {**ALTER, "of": 3}, {"op": "drop_stable", "stable": "gone", "of": 5},
                      {"op": "alter_stable", "stable": "st", "action": "x", "column": "y"})  # (an entry of old: no of)
    assert vnode0(e).stable_ofs == [(v1, 3), (v2, 5)] and vnode0(e).latest_of == 5
    assert vnode0(e).store.ofs == ((v1, 3), (v2, 5))  # written with the covered version at the write's end
    e.close()
    assert covered_line(tmp_path)["ofs"] == [[v1, 3], [v2, 5]]
    e = make(tmp_path)
    assert vnode0(e).stable_ofs == [(v1, 3), (v2, 5)] and e.damage() == []
    e.close()


@pytest.mark.parametrize("line", [
    b"truncated", b"", b'{"version": 1, "live": 1, "ofs": [[0, 1]]}',  # (not a checksummed line)
])
def test_a_damaged_covered_line_is_rebuilt_from_the_wal_with_the_same_pairs(tmp_path: Path, line: bytes):
    e = make(tmp_path)
    v1, v2 = write(e, {**ALTER, "of": 3}, {"op": "drop_stable", "stable": "gone", "of": 5})
    e.close()
    good = lines.encode(covered_line(tmp_path))[:-1]
    for n, bad in enumerate([line, good[:len(good) // 2], bytes([good[0] ^ 1]) + good[1:],
                             good[:-3] + bytes([good[-3] ^ 4]) + good[-2:]]):
        set_line(tmp_path, bad)
        e = make(tmp_path)
        assert vnode0(e).stable_ofs == [(v1, 3), (v2, 5)], n
        [damage] = e.damage()
        assert damage.file.endswith(META_STORE) and damage.action == "rebuilt"
        e.close()
        e = make(tmp_path)
        assert vnode0(e).stable_ofs == [(v1, 3), (v2, 5)] and e.damage() == []
        e.close()


@pytest.mark.parametrize("ofs", [
    "no list", [[1]], [[1, -2]], [[1, True]], [[7, 1], [3, 2]], [[3, 1], [3, 2]], [[10**6, 1]],
])
def test_read_covered_refuses_pairs_that_are_not_ordered_integers_below_the_covered_version(tmp_path: Path,
                                                                                           ofs: Any):
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE covered (id INTEGER PRIMARY KEY, line BLOB)")
    conn.execute("INSERT INTO covered VALUES (0, ?)", (lines.encode({"version": 9, "live": 0, "ofs": ofs})[:-1],))
    with pytest.raises(MetaDamaged, match="stable entries"):
        read_covered(conn)
    conn.execute("UPDATE covered SET line = ?", (lines.encode({"version": 9, "live": 0})[:-1],))
    assert read_covered(conn) == (9, 0, ())  # a store written before the pairs
    conn.close()


def test_a_store_that_refuses_its_writes_keeps_the_pairs_and_a_reopen_replays_them(tmp_path: Path):
    e = make(tmp_path)
    vnode = vnode0(e)
    conn = vnode.store._conn
    assert conn is not None
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")  # SQLITE_FULL
    filler = [{"op": "create_table", "name": f"f{i}_{'x' * 400}", "stable": "st", "tags": {"site": i}, "ts": 1}
              for i in range(60)]
    versions = write(e, *filler, {**ALTER, "of": 4})
    with pytest.raises(StorageUnavailable):
        vnode.checkpoint()
    assert vnode.stable_ofs == [(versions[-1], 4)] and vnode.store.ofs == ()
    e.close()  # (its store write refused again: logged)
    e = make(tmp_path)
    assert vnode0(e).stable_ofs == [(versions[-1], 4)]
    e.close()


def test_a_cut_drops_the_pairs_at_or_after_it_on_disk_too(tmp_path: Path):
    e = make(tmp_path)
    v1, v2, v3 = write(e, {**ALTER, "of": 3}, {**ALTER, "column": "z", "of": 4},
                       {"op": "drop_stable", "stable": "gone", "of": 6})
    vnode = vnode0(e)
    vnode.truncate_to(v3)  # a drop cut: the store rebuilt from the WAL
    assert vnode.stable_ofs == [(v1, 3), (v2, 4)] and vnode.latest_of == 4
    vnode.truncate_to(v2)  # an alter alone: the store covers the cut
    assert vnode.stable_ofs == [(v1, 3)] and vnode.store.ofs == ((v1, 3),)
    e.close()
    e = make(tmp_path)
    assert vnode0(e).stable_ofs == [(v1, 3)] and vnode0(e).latest_of == 3
    [v4] = write(e, {"op": "drop_stable", "stable": "gone", "of": 6})
    assert vnode0(e).stable_ofs == [(v1, 3), (v4, 6)]
    e.close()


@pytest.mark.parametrize("of", [-1, "3", 1.5, True, None])
def test_a_stable_entry_whose_record_is_not_a_non_negative_integer_does_not_decode(of: Any):
    for op in ("alter_stable", "drop_stable"):
        entry = WalEntry(0, 1, KIND_META, 0, encode_meta({**ALTER, "op": op, "of": of}))
        with pytest.raises(Undecodable, match="'of'"):
            decode_whole(entry)
