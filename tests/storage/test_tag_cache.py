"""Supertables' whole tag tables kept between SELECTs (:mod:`walgate.storage.tag_cache`, ``Store.tag_tables``): a
table kept is the one the vnode would build now, through every kind of table change (created, dropped, its tags
widened, its supertable dropped) and through cuts of the vnode's WAL that take tables back (a follower's truncation),
also when a new meta entry is then appended at a version the cut one had; the cache stays within its bytes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from tests.storage.test_vnode_meta_version import STATEMENTS
from walgate.storage.catalog import StableDef
from walgate.storage.engine import Engine
from walgate.storage.tag_cache import TagTableCache
from walgate.storage.vnode import Vnode
from walgate.storage.wal import KIND_META


def kept_and_built(e: Engine, vnode: Vnode, stable: str) -> tuple[pa.Table, pa.Table]:
    """(the tag table of ``stable`` as a SELECT's preparation gets it, through the cache; as the vnode builds it)."""
    st = e.catalog.stables.get((vnode.db.name, stable)) or StableDef(vnode.db.name, stable, (), (), 0)
    return e.store.tag_tables(vnode)(stable, None), vnode.tag_table(st)


def test_a_kept_tag_table_is_the_one_the_vnode_builds_after_every_table_change(tmp_path: Path) -> None:
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1")
    vnode = e.vnodes["db"][0]
    for stmt in STATEMENTS:
        e.execute(stmt)
        for stable in ("st", "st2"):
            kept, built = kept_and_built(e, vnode, stable)
            assert kept.equals(built), (stmt, stable, kept.to_pylist(), built.to_pylist())
    hits = e.store.tag_cache.hits
    kept_and_built(e, vnode, "st2")
    assert e.store.tag_cache.hits == hits + 1  # nothing changed: kept, not built again
    e.execute("INSERT INTO db.u1 VALUES (2000, 2)")  # rows only
    kept_and_built(e, vnode, "st2")
    assert e.store.tag_cache.hits == hits + 2
    e.close()


def one_table(tmp_path: Path) -> tuple[Engine, Vnode]:
    """An engine with subtable ``db.t1`` of supertable ``db.st`` in a database of one vnode, and that vnode."""
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    e.execute("CREATE TABLE db.t1 USING db.st TAGS (1)")
    return e, e.vnodes["db"][0]


def test_a_cut_that_takes_tables_back_is_never_answered_from_before_it(tmp_path: Path) -> None:
    e, vnode = one_table(tmp_path)
    cut = vnode.wal.next_version
    e.execute("CREATE TABLE db.t2 USING db.st TAGS (2)")
    kept, _ = kept_and_built(e, vnode, "st")
    assert kept.column("tbname").to_pylist() == ["t1", "t2"]
    vnode.truncate_to(cut)  # (a follower cut back to its leader's log: t2's creation gone)
    kept, built = kept_and_built(e, vnode, "st")
    assert kept.equals(built) and kept.column("tbname").to_pylist() == ["t1"]
    e.execute("CREATE TABLE db.t3 USING db.st TAGS (3)")  # at the version t2's creation had
    assert [x.version for x in vnode.wal.read_from(cut) if x.kind == KIND_META] == [cut]
    kept, built = kept_and_built(e, vnode, "st")
    assert kept.equals(built) and kept.column("tbname").to_pylist() == ["t1", "t3"]
    e.close()


def test_a_cut_of_rows_alone_then_a_table_at_the_cut_version_is_not_answered_from_before(tmp_path: Path) -> None:
    """A checkpoint raises the meta version to the WAL's end; a cut of rows alone lowers it again, taking no table
    back; a creation at the cut version then raises it to the value it had: another table set, another key."""
    e, vnode = one_table(tmp_path)
    cut = vnode.wal.next_version
    e.execute("INSERT INTO db.t1 VALUES (1000, 1)")  # one data entry, at ``cut``
    vnode.checkpoint()
    assert vnode.meta_version == cut + 1
    kept_and_built(e, vnode, "st")
    vnode.truncate_to(cut)
    e.execute("CREATE TABLE db.t2 USING db.st TAGS (2)")
    assert vnode.meta_version == cut + 1
    kept, built = kept_and_built(e, vnode, "st")
    assert kept.equals(built) and kept.column("tbname").to_pylist() == ["t1", "t2"]
    e.close()


def test_the_cache_keeps_at_most_its_bytes_least_recently_used_first() -> None:
    def table(n: int) -> pa.Table:
        return pa.table({"tbname": pa.array([f"t{i:05d}" for i in range(n)])})

    one = table(1000).nbytes
    cache = TagTableCache(3 * one)
    built: list[str] = []

    def get(key: str, n: int = 1000) -> pa.Table:
        return cache.get(key, lambda: built.append(key) or table(n))

    for key in ("a", "b", "c", "a", "d"):  # d evicts b, the least recently used
        get(key)
    assert built == ["a", "b", "c", "d"] and cache.size <= 3 * one
    get("b")
    assert built[-1] == "b"
    get("big", 10_000)  # larger than the whole cache: answered, not kept
    get("big", 10_000)
    assert built[-2:] == ["big", "big"] and cache.size <= 3 * one
    assert (cache.hits, cache.misses) == (1, 7)
