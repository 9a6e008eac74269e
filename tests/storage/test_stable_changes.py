"""The catalog's ALTER/DROP STABLE changes of a replicated database (``stable_changes``) and a new leader's writing of
those its vnode's WAL lacks (:meth:`SqlObjects.take_over <walgate.storage.sql_objects.SqlObjects.take_over>`,
issue 25). Two engines with their own data dirs stand for two nodes of a ``REPLICA 2`` database, each leading one
vgroup (as tests/storage/test_shared_sql.py's replicated test).

The list holds each change's meta entry (naming its record, ``of``) in the stream's order, on every node alike; it
survives a restart, a rewrite and a snapshot, and DROP DATABASE clears it; a damaged one is skipped (reported). A
vnode the node did not lead as the records applied gets them at its takeover, in order, once (a second takeover
writes nothing), as does one whose leader crashed between the record and its entry; one whose WAL already holds a change its node's catalog has not applied yet is not written it
again by that record; a takeover the disk refuses at any write is taken again and writes each entry once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from faults import FAULT_KINDS, Faults, flipped_in_line
from test_shared_sql import STABLE, metas, run, staged
from test_shared_topics import LIVE, apply

from walgate.storage.catalog import Catalog
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable
from walgate.storage.vnode import Vnode


def pair(tmp_path: Path) -> list[Engine]:
    """Two cluster nodes holding ``d`` (REPLICA 2, 2 vgroups: node 1 leads vgroup 0, node 2 vgroup 1) with
    supertables ``st`` and ``gone``, then ``ALTER STABLE d.st ADD COLUMN w INT`` and ``DROP STABLE d.gone``."""
    nodes = [Engine.open(tmp_path / f"n{i}", node_id=i) for i in (1, 2)]
    for e in nodes:
        e.cluster_mode(replication=True)
        e.set_dnodes(LIVE, {1: None, 2: None})
    records = staged(nodes[0], "CREATE DATABASE d VGROUPS 2 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0")
    records[0]["replicas"] = [[1, 2], [2, 1]]
    apply(nodes, records)
    for e, led in zip(nodes, (0, 1)):
        e.vnodes["d"][led].wal.leading = True
    run(nodes, nodes[1], STABLE)
    run(nodes, nodes[1], "CREATE STABLE d.gone (ts TIMESTAMP, v INT) TAGS (site INT)")
    run(nodes, nodes[0], "ALTER STABLE d.st ADD COLUMN w INT")
    run(nodes, nodes[1], "DROP STABLE d.gone")
    return nodes


CHANGES = ((4, {"op": "alter_stable", "stable": "st", "action": "ADD COLUMN", "column": "w", "of": 4}),
           (5, {"op": "drop_stable", "stable": "gone", "of": 5}))


def close(*nodes: Engine) -> None:
    for e in nodes:
        e.close()


def led(e: Engine, index: int) -> Vnode:
    vnode = e.vnodes["d"][index]
    vnode.wal.leading = True
    return vnode


def test_the_changes_are_listed_alike_on_every_node_and_survive_a_restart_a_rewrite_and_a_snapshot(
        tmp_path: Path) -> None:
    nodes = pair(tmp_path)
    assert [e.catalog.stable_changes for e in nodes] == [{"d": CHANGES}] * 2
    run(nodes, nodes[0], "CREATE DATABASE o VGROUPS 1")  # a database of one copy: none listed
    run(nodes, nodes[0], "CREATE STABLE o.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    run(nodes, nodes[0], "DROP STABLE o.st")
    assert nodes[0].catalog.stable_changes == {"d": CHANGES}
    snapshot = nodes[0].catalog.shared_records()
    seq = nodes[0].catalog.shared_seq
    close(*nodes)
    again = Catalog.open(tmp_path / "n1" / "catalog.log", cluster=True)
    assert again.stable_changes == {"d": CHANGES}
    again.rewrite()
    assert Catalog.open(tmp_path / "n1" / "catalog.log", cluster=True).stable_changes == {"d": CHANGES}
    fresh = Catalog.open(tmp_path / "fresh.log", cluster=True)
    fresh.restore_shared(seq, snapshot)
    assert fresh.stable_changes == {"d": CHANGES}
    assert Catalog.open(tmp_path / "fresh.log", cluster=True).stable_changes == {"d": CHANGES}
    e = Engine.open(tmp_path / "n1", node_id=1)
    e.cluster_mode(replication=True)
    e.set_dnodes(LIVE, {1: None, 2: None})
    apply([e], staged(e, "DROP DATABASE d"))
    assert e.catalog.stable_changes == {}
    e.close()


def test_a_damaged_list_record_is_reported_and_skipped(tmp_path: Path) -> None:
    close(*pair(tmp_path))
    path = tmp_path / "n1" / "catalog.log"
    Catalog.open(path, cluster=True).rewrite()
    line = next(n for n, x in enumerate(path.read_bytes().splitlines()) if b'"op":"stable_changes"' in x)
    for _ in flipped_in_line(path, line):
        cat = Catalog.open(path, cluster=True)
        assert cat.stable_changes == {} and "d" in cat.databases


def test_a_vnode_not_led_as_the_records_applied_gets_them_at_its_takeover_in_order_once(tmp_path: Path) -> None:
    nodes = pair(tmp_path)
    assert metas(nodes[0], "d") == {0: ["alter_stable st", "drop_stable gone"], 1: []}
    vnode = led(nodes[0], 1)  # node 1 takes vgroup 1 over (its copy never got node 2's entries here)
    assert nodes[0].sql_objects.take_over(vnode) == 2
    assert metas(nodes[0], "d") == {0: ["alter_stable st", "drop_stable gone"],
                                    1: ["alter_stable st", "drop_stable gone"]}
    assert vnode.latest_of == 5 and nodes[0].sql_objects.take_over(vnode) == 0  # taken over again: nothing twice
    run(nodes, nodes[0], "ALTER STABLE d.st ADD COLUMN x INT")  # a later change: written by the record, once
    assert metas(nodes[0], "d")[1] == ["alter_stable st", "drop_stable gone", "alter_stable st"]
    close(*nodes)


def test_a_change_already_in_the_wal_is_not_written_again_when_the_lagging_catalog_applies_it(tmp_path: Path) -> None:
    nodes = pair(tmp_path)
    [alter] = staged(nodes[0], "ALTER STABLE d.st ADD COLUMN x INT")
    seq = nodes[0].catalog.shared_seq + 1
    vnode = led(nodes[0], 1)
    assert nodes[0].sql_objects.take_over(vnode) == 2
    db = nodes[0].catalog.database("d")  # the entry its previous leader wrote, copied before this catalog has it:
    nodes[0].commits.commit(db, {1: nodes[0].commits.with_meta(db, {
        "op": "alter_stable", "stable": "st", "action": "add_column", "column": "x", "of": seq})})
    assert nodes[0].sql_objects.take_over(vnode) == 0
    assert nodes[0].apply_shared(seq, alter)
    assert metas(nodes[0], "d")[1] == ["alter_stable st", "drop_stable gone", "alter_stable st"]
    assert metas(nodes[0], "d")[0] == ["alter_stable st", "drop_stable gone", "alter_stable st"]  # (led: written)
    close(*nodes)


def test_a_leaders_crash_between_the_record_and_its_entry_is_mended_at_its_next_takeover(tmp_path: Path) -> None:
    nodes = pair(tmp_path)
    [alter] = staged(nodes[0], "ALTER STABLE d.st ADD COLUMN x INT")
    seq = nodes[0].catalog.shared_seq + 1
    nodes[0].sql_objects.before(seq, alter)  # the crash: applied, its entry (vnode 0's) not written
    nodes[0].catalog.apply_shared(seq, alter)
    nodes[0].close()
    again = Engine.open(tmp_path / "n1", node_id=1)  # a start leads nothing: nothing written
    assert metas(again, "d")[0] == ["alter_stable st", "drop_stable gone"]
    assert again.sql_objects.take_over(led(again, 0)) == 1  # led again (or by the node its followers elect)
    assert metas(again, "d")[0] == ["alter_stable st", "drop_stable gone", "alter_stable st"]
    close(again, nodes[1])


def test_a_drop_a_snapshot_brings_names_the_snapshot_and_a_takeover_then_writes_only_what_the_wal_lacks(
        tmp_path: Path) -> None:
    nodes = pair(tmp_path)
    apply([nodes[1]], staged(nodes[1], "DROP STABLE d.st"))  # record 6, while node 1 is away
    seq = nodes[1].catalog.shared_seq
    nodes[0].restore_shared(seq, nodes[1].catalog.shared_records())
    assert nodes[0].catalog.stable_changes == nodes[1].catalog.stable_changes
    assert metas(nodes[0], "d")[0] == ["alter_stable st", "drop_stable gone", "drop_stable st"]
    assert nodes[0].vnodes["d"][0].latest_of == seq and nodes[0].sql_objects.take_over(led(nodes[0], 0)) == 0
    assert nodes[0].sql_objects.take_over(led(nodes[0], 1)) == 3  # (vgroup 1's copy here: none of them)
    assert metas(nodes[0], "d")[1] == ["alter_stable st", "drop_stable gone", "drop_stable st"]
    close(*nodes)


@pytest.mark.parametrize(("op", "kind"), [("write", k) for k in FAULT_KINDS] + [("fdatasync", "enospc"),
                                                                              ("fdatasync", "eio")])
def test_a_takeover_the_disk_refuses_is_taken_again_and_writes_each_entry_once(
        tmp_path: Path, op: str, kind: str) -> None:
    nodes = pair(tmp_path)
    close(nodes[1])
    e = nodes[0]
    faults = Faults()
    refusals = 0
    for at in range(1, 4):  # the first writes (fsyncs) of the takeover's two appends refused in turn
        with faults.active():
            faults.fail_kind(op, kind, at=at)
            vnode = led(e, 1)
            written: Any = None
            while written is None:
                try:
                    written = e.sql_objects.take_over(vnode)
                except StorageUnavailable:
                    refusals += 1
                    faults.clear()
            faults.clear()
        assert metas(e, "d")[1] == ["alter_stable st", "drop_stable gone"], (at, written)
        close(e)
        e = Engine.open(tmp_path / "n1", node_id=1)
        e.cluster_mode(replication=True)
        e.set_dnodes(LIVE, {1: None, 2: None})
        assert metas(e, "d")[1] == ["alter_stable st", "drop_stable gone"], at
        assert e.sql_objects.take_over(led(e, 1)) == 0
        e.vnodes["d"][1].truncate_to(e.vnodes["d"][1].wal.next_version - 2)  # (both entries cut: again)
        assert e.vnodes["d"][1].latest_of is None
    assert refusals >= 1
    close(e)
