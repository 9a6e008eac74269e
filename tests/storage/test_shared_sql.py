"""SQL databases, supertables and TDengine topics as the cluster's (cluster mode): the node asked stages their DDL
(nothing of it on disk), and every node applies the stream's records through one path (:meth:`Engine.apply_shared`),
which opens the vnodes placed on it, compiles the topics, deletes a dropped database's vnodes and writes an
ALTER/DROP STABLE's meta entry into its own vnodes, once, also across refused writes, a crash before the entries
and a snapshot. Two engines with their own data dirs stand for two nodes applying the same stream."""

from __future__ import annotations

import pickle
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from faults import WRITE_FAULTS, Faults, flipped_in_line, torn_last_line
from test_shared_topics import LIVE, apply, cluster_node

from walgate.storage.engine import Engine
from walgate.storage.entry import decode_entry
from walgate.storage.errors import InvalidValue, NotHere, StorageUnavailable
from walgate.storage.lineproto import child_table_name
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse
from walgate.storage.vnode import vnode_of
from walgate.storage.wal import KIND_META
from walgate.storage.write_plan import SchemaChangeNeeded

STABLE = "CREATE STABLE d.st (ts TIMESTAMP, v INT) TAGS (site INT)"


def staged(e: Engine, sql: str) -> list[dict[str, Any]]:
    """The records ``sql`` run on ``e`` stages (what the node asked hands to the controller)."""
    _, records = e.staged(Engine.execute, e, sql)
    return records


def run(nodes: list[Engine], asked: Engine, sql: str) -> None:
    """``sql`` through node ``asked``, its records applied by ``nodes``."""
    records = staged(asked, sql)
    assert records, f"{sql}: staged, for the stream"
    apply(nodes, records)


def rows(e: Engine, sql: str) -> list[list[Any]]:
    return [list(r) for r in e.execute(sql).rows]


def vnode_dirs(data_dir: Path) -> list[str]:
    return sorted(p.name for p in (data_dir / "db").glob("*/vnode*"))


def metas(e: Engine, db: str) -> dict[int, list[str]]:
    """Vnode index -> the stable meta entries (``op stable``) of its WAL, for ``db``'s vnodes on ``e``."""
    out = {}
    for vnode in e.vnodes[db]:
        decoded = [decode_entry(x).meta for x in vnode.wal.read_from(vnode.wal.first_version) if x.kind == KIND_META]
        out[vnode.index] = [f"{m['op']} {m['stable']}" for m in decoded if m is not None and "stable" in m
                            and m["op"] != "create_table"]
    return out


def table_in(vgroup: int) -> str:
    return next(f"t{i}" for i in range(1000) if vnode_of("d", f"t{i}", 2) == vgroup)


def test_ddl_through_either_node_is_applied_by_both_each_opening_and_writing_its_own_vnodes(tmp_path: Path) -> None:
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    records = staged(n2, "CREATE DATABASE d VGROUPS 2")
    assert [r["op"] for r in records] == ["create_db"] and records[0]["nodes"] == [1, 2], "over the live nodes"
    assert "d" not in n2.catalog.databases and vnode_dirs(tmp_path / "n2") == [], "staged: nothing kept or made"
    apply([n1, n2], records)
    assert [v.index for v in n1.vnodes["d"]] == [0] and [v.index for v in n2.vnodes["d"]] == [1]
    run([n1, n2], n2, STABLE)
    run([n1, n2], n1, "CREATE TOPIC tq WITH META AS STABLE d.st")
    for e in (n1, n2):
        assert rows(e, "SHOW DATABASES")[-1][0] == "d" and [r[0] for r in rows(e, "SHOW d.STABLES")] == ["st"]
        assert [r[0] for r in rows(e, "SHOW TOPICS")] == ["tq"] and e.topic_id("tq") is not None
    here, there = table_in(0), table_in(1)
    assert n1.execute(f"INSERT INTO d.{here} USING d.st TAGS (1) VALUES (1700000000000, 1)").affected_rows == 1
    assert n2.execute(f"INSERT INTO d.{there} USING d.st TAGS (2) VALUES (1700000000000, 2)").affected_rows == 1
    with pytest.raises(NotHere, match="is on node 2"):  # a write for another node's vgroup: today's refusal
        n1.execute(f"INSERT INTO d.{there} VALUES (1700000000001, 3)")
    assert n1.watermarks("tq", 0)[1] > 0 and n2.watermarks("tq", 1)[1] > 0, "each node indexes its partition"

    run([n1, n2], n2, "ALTER STABLE d.st ADD COLUMN w INT")
    for e in (n1, n2):
        assert [c.name for c in e.catalog.stables[("d", "st")].columns] == ["ts", "v", "w"]
    assert metas(n1, "d") == {0: ["alter_stable st"]} and metas(n2, "d") == {1: ["alter_stable st"]}
    assert n2.execute(f"INSERT INTO d.{there} (ts, v, w) VALUES (1700000000002, 4, 5)").affected_rows == 1

    run([n1, n2], n1, "DROP TOPIC tq")
    run([n1, n2], n1, "DROP STABLE d.st")
    assert metas(n1, "d") == {0: ["alter_stable st", "drop_stable st"]}
    assert metas(n2, "d") == {1: ["alter_stable st", "drop_stable st"]}
    assert n2.vnodes["d"][0].live(there) is None, "a dropped supertable's subtables go on every node"
    n2.close()
    n2 = cluster_node(tmp_path / "n2", 2)  # restarted: the same, from its catalog.log and WALs
    assert [v.index for v in n2.vnodes["d"]] == [1] and metas(n2, "d") == {1: ["alter_stable st", "drop_stable st"]}
    run([n1, n2], n2, "DROP DATABASE d")
    for e, d in ((n1, tmp_path / "n1"), (n2, tmp_path / "n2")):
        assert "d" not in e.catalog.databases and "d" not in e.vnodes and vnode_dirs(d) == []
    for e in (n1, n2):
        e.close()


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_the_apply_path_under_write_faults_is_taken_again_and_writes_each_meta_entry_once(
        tmp_path: Path, op: str, kind: str) -> None:
    asked = cluster_node(tmp_path / "asked", 1)
    asked.set_dnodes(LIVE[:1], {1: None})
    stream = []
    for sql in ("CREATE DATABASE d VGROUPS 2", STABLE, "ALTER STABLE d.st ADD COLUMN w INT"):
        stream += staged(asked, sql)
        apply([asked], stream[-1:])
    asked.close()
    assert [r["op"] for r in stream] == ["create_db", "create_stable", "alter_stable"], "through the stream"
    clean = cluster_node(tmp_path / "clean", 1)
    faults = Faults()
    with faults.active():
        apply([clean], stream)
        calls = faults.calls[op]
    clean.close()
    assert calls > 0
    for at in range(1, calls + 1):  # the at-th write (or fsync) of the whole apply refused
        d = tmp_path / f"n{at}"
        e = cluster_node(d, 1)
        with faults.active():
            faults.fail_kind(op, kind, at=at)
            for seq, record in enumerate(stream, 1):
                try:
                    e.apply_shared(seq, record)
                except StorageUnavailable:
                    faults.clear()
                    e.apply_shared(seq, record)  # the stream's retry: the record once, what follows it done
            faults.clear()
        assert e.catalog.shared_seq == 3 and [c.name for c in e.catalog.stables[("d", "st")].columns][-1] == "w"
        assert metas(e, "d") == {0: ["alter_stable st"], 1: ["alter_stable st"]}, f"fault at {at}"
        e.close()
        again = cluster_node(d, 1)
        assert metas(again, "d") == {0: ["alter_stable st"], 1: ["alter_stable st"]}
        again.close()


def test_a_restart_writes_the_meta_entries_a_crash_left_out(tmp_path: Path) -> None:
    n1 = cluster_node(tmp_path / "n1", 1)
    n1.set_dnodes(LIVE[:1], {1: None})
    run([n1], n1, "CREATE DATABASE d VGROUPS 2")
    run([n1], n1, STABLE)
    [alter] = staged(n1, "ALTER STABLE d.st ADD COLUMN w INT")
    # the crash: the record applied (and where its entries go recorded), the entry written into vnode 0 alone
    n1.sql_objects.before(3, alter)
    n1.catalog.apply_shared(3, alter)
    [(_, meta, _)] = n1.sql_objects.pending
    db = n1.catalog.database("d")
    n1.commits.commit(db, {0: n1.commits.with_meta(db, meta)})
    n1.close()
    n1 = cluster_node(tmp_path / "n1", 1)
    assert metas(n1, "d") == {0: ["alter_stable st"], 1: ["alter_stable st"]}, "vnode 1's written at the start"
    n1.close()
    n1 = cluster_node(tmp_path / "n1", 1)
    assert metas(n1, "d") == {0: ["alter_stable st"], 1: ["alter_stable st"]}, "and only once"
    n1.close()


def test_a_snapshot_brings_the_sql_objects_in_and_drops_those_it_no_longer_has(tmp_path: Path) -> None:
    single = Engine.open(tmp_path / "n2", node_id=2)  # n2's data dir was a single node's: its database stays its own
    single.execute("CREATE DATABASE legacy VGROUPS 1")
    single.close()
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    run([n1, n2], n1, "CREATE DATABASE gone VGROUPS 2")
    run([n1, n2], n1, "CREATE DATABASE d VGROUPS 2")
    run([n1, n2], n1, "CREATE STABLE d.old (ts TIMESTAMP, v INT) TAGS (site INT)")
    there = table_in(1)
    n2.execute(f"INSERT INTO d.{there} USING d.old TAGS (1) VALUES (1700000000000, 1)")
    assert len(vnode_dirs(tmp_path / "n2")) == 3
    run([n1], n1, "DROP DATABASE gone")  # n2 was away meanwhile
    run([n1], n1, "DROP STABLE d.old")
    run([n1], n1, STABLE)
    run([n1], n1, "CREATE TOPIC tq AS STABLE d.st")
    n2.restore_shared(n1.catalog.shared_seq, n1.catalog.shared_records())
    assert n2.vnodes["d"][0].live(there) is None, "the subtables of a supertable dropped meanwhile went"
    for e in (n2, cluster_node(tmp_path / "n2", 2)):  # and after a restart, from the rewritten catalog.log
        assert sorted(e.catalog.databases) == ["d", "legacy"] and sorted(e.catalog.stables) == [("d", "st")]
        assert [v.index for v in e.vnodes["d"]] == [1] and e.topic_id("tq") is not None
        assert metas(e, "d") == {1: ["drop_stable old"]}
        assert len(vnode_dirs(tmp_path / "n2")) == 2, "legacy's and d's: gone's were deleted"
        e.close()
    n1.close()


def test_a_nodes_own_database_of_the_name_passes_the_clusters_over_and_a_schemaless_change_is_not_made_here(
        tmp_path: Path) -> None:
    single = Engine.open(tmp_path / "n2", node_id=2)
    single.execute("CREATE DATABASE d VGROUPS 1")
    single.close()
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    run([n1, n2], n1, "CREATE DATABASE d VGROUPS 2")  # n2 has its own d: the record is passed over there
    run([n1, n2], n1, STABLE)
    assert n1.catalog.database("d").nodes == (1, 2) and ("d", "st") in n1.catalog.stables
    assert n2.catalog.database("d").nodes is None and ("d", "st") not in n2.catalog.stables
    n2.execute("CREATE STABLE d.mine (ts TIMESTAMP, v INT) TAGS (k INT)")  # its own database's DDL stays its own
    assert ("d", "mine") in n2.catalog.stables and ("d", "mine") not in n1.catalog.stables
    end = n1.vnodes["d"][0].wal.next_version
    line = next(f"lp,site={s} v=5i 1700000000000000000" for s in range(1000)
                if vnode_of("d", child_table_name("lp", (("site", str(s)),)), 2) == 0)
    with pytest.raises(SchemaChangeNeeded, match="does not create a supertable of a cluster database") as needed:
        n1.write_lines("d", line.encode())
    assert [(old, new.name) for old, new in needed.value.changes] == [(None, "lp")], "for the stream"
    carried = pickle.loads(pickle.dumps(needed.value))  # as from an ingest worker planning a large body
    assert (carried.changes, carried.message) == (needed.value.changes, needed.value.message)
    assert ("d", "lp") not in n1.catalog.stables and n1.vnodes["d"][0].wal.next_version == end, "nothing written"
    for e in (n1, n2):
        e.close()


def test_a_cluster_database_passed_over_for_a_nodes_own_one_is_kept_shadowed_for_the_controller(tmp_path: Path) -> None:
    """The cluster's database ``d``, passed over on node 2 whose own ``d`` holds the name, is named in
    ``Catalog.shadowed`` (the controller there leaves its partition states alone: ``controller_vnodes``'s
    ``unjudged``) across a restart, a rewrite and a snapshot of the stream (which applied nothing before: its
    ``create_db`` clashed), the own ``d`` and its supertable untouched and the cluster's supertable not made in it;
    the cluster's DROP DATABASE ends it."""
    single = Engine.open(tmp_path / "n2", node_id=2)
    single.execute("CREATE DATABASE d VGROUPS 1")
    single.execute("CREATE STABLE d.mine (ts TIMESTAMP, v INT) TAGS (k INT)")
    single.close()
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    run([n1, n2], n1, "CREATE DATABASE d VGROUPS 2")
    run([n1, n2], n1, STABLE)
    cluster_id = n1.catalog.database("d").id
    assert n2.catalog.shadowed == {"d": cluster_id} and n1.catalog.shadowed == {}
    assert n2.catalog.controller_vnodes().unjudged == {cluster_id}
    n2.close()
    n2 = cluster_node(tmp_path / "n2", 2)  # replayed from catalog.log
    assert n2.catalog.shadowed == {"d": cluster_id}
    n2.catalog.rewrite()
    n2.close()
    n2 = cluster_node(tmp_path / "n2", 2)
    assert n2.catalog.shadowed == {"d": cluster_id}
    fresh = cluster_node(tmp_path / "n3", 3)  # a snapshot's reader holding nothing: d is the cluster's there
    fresh.restore_shared(n1.catalog.shared_seq, n1.catalog.shared_records())
    assert fresh.catalog.database("d").id == cluster_id and fresh.catalog.shadowed == {}
    n2.restore_shared(n1.catalog.shared_seq, n1.catalog.shared_records())
    assert n2.catalog.shadowed == {"d": cluster_id} and n2.catalog.database("d").nodes is None
    assert sorted(n2.catalog.stables) == [("d", "mine")], "the cluster's supertable is not made in the own d"
    run([n1, n2], n1, "DROP DATABASE d")
    assert n2.catalog.shadowed == {} and n2.catalog.database("d").nodes is None and n1.catalog.databases == {}
    n2.close()
    n2 = cluster_node(tmp_path / "n2", 2)
    assert n2.catalog.shadowed == {}
    for e in (n1, n2, fresh):
        e.close()


def line_in(vgroup: int, fields: str, ts: int) -> bytes:
    """A line of measurement ``lp`` whose subtable is in ``vgroup`` of database ``d`` (2 vgroups)."""
    site = next(s for s in range(1000) if vnode_of("d", child_table_name("lp", (("site", str(s)),)), 2) == vgroup)
    return f"lp,site={site} {fields} {ts}".encode()


def rows_here(e: Engine, sql: str) -> list[list[Any]]:
    """The rows of ``sql`` (a SELECT) over the vgroups of node ``e`` (its part of a merged SELECT)."""
    stmt = parse(sql)
    assert isinstance(stmt, ast.Select)
    return [list(r) for r in e.prepare_select(stmt, None, here_only=True).run().rows]


def made_through_the_stream(asked: Engine, line: bytes) -> list[dict[str, Any]]:
    """The records of the supertable changes ``line`` needs, staged on ``asked`` (as the gateway does)."""
    with pytest.raises(SchemaChangeNeeded) as needed:
        asked.write_lines("d", line)
    _, records = asked.staged(asked.make_schemas, needed.value.changes)
    return records


def test_a_schemaless_write_s_supertable_changes_go_through_the_stream_and_a_stale_one_does_not_apply(
        tmp_path: Path) -> None:
    """The node asked stages the changes the single node would make (CREATE, then ALTER of the columns a line adds);
    every node applies them (an ALTER's meta entry in each vnode), then the rows are written. Of two ALTERs made from
    the same definition (two nodes adding columns at once) only the first applies: the other node's write is planned
    again against it, never dropping the first one's column; a field of another type is the single node's error."""
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    run([n1, n2], n2, "CREATE DATABASE d VGROUPS 2")
    create = made_through_the_stream(n2, line_in(1, "v=1i", 1700000000000000000))
    assert [r["op"] for r in create] == ["create_stable"] and ("d", "lp") not in n2.catalog.stables, "staged"
    apply([n1, n2], create)
    assert n2.write_lines("d", line_in(1, "v=1i", 1700000000000000000)) == 1
    assert n1.write_lines("d", line_in(0, "v=2i", 1700000000000000001)) == 1, "node 1 has it too"

    first = made_through_the_stream(n1, line_in(0, "v=3i,w=1.5", 1700000000000000002))
    second = made_through_the_stream(n2, line_in(1, "v=4i,x=\"s\"", 1700000000000000003))
    assert [r["op"] for r in first + second] == ["alter_stable", "alter_stable"]
    apply([n1, n2], first)
    with pytest.raises(InvalidValue, match="changed since the ALTER was made"):
        n1.catalog.validate_shared(second)  # the controller's check: node 2's ALTER would drop column w
    assert n1.write_lines("d", line_in(0, "v=3i,w=1.5", 1700000000000000002)) == 1
    apply([n1, n2], made_through_the_stream(n2, line_in(1, "v=4i,x=\"s\"", 1700000000000000003)))
    assert n2.write_lines("d", line_in(1, "v=4i,x=\"s\"", 1700000000000000003)) == 1
    for e in (n1, n2):
        assert [c.name for c in e.catalog.stables[("d", "lp")].columns] == ["_ts", "v", "w", "x"]
    assert metas(n1, "d") == {0: ["alter_stable lp"] * 2} and metas(n2, "d") == {1: ["alter_stable lp"] * 2}
    with pytest.raises(InvalidValue, match="field w is"):  # another type: refused as on a single node
        n2.write_lines("d", line_in(1, "w=\"text\"", 1700000000000000004))
    n1.close()
    n1 = cluster_node(tmp_path / "n1", 1)  # restarted: its records (with their ``was``) replayed alike
    assert [c.name for c in n1.catalog.stables[("d", "lp")].columns] == ["_ts", "v", "w", "x"] and not n1.damage()
    assert sorted(rows_here(n1, "SELECT v, w FROM d.lp"), key=str) == [[2, None], [3, 1.5]]
    assert sorted(rows_here(n2, "SELECT v, x FROM d.lp"), key=str) == [[1, None], [4, "s"]]
    for e in (n1, n2):
        e.close()



def test_an_alter_made_before_a_drop_and_create_of_its_supertable_does_not_apply(tmp_path: Path) -> None:
    """The same columns, but another supertable (its created_ms): the stale ALTER is refused by the controller's check
    and by every node applying it, and the new one's created_ms stays (what dropped_meanwhile compares)."""
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    run([n1, n2], n1, "CREATE DATABASE d VGROUPS 2")
    run([n1, n2], n1, STABLE)
    old = n1.catalog.stables[("d", "st")]
    stale = staged(n1, "ALTER STABLE d.st ADD COLUMN w INT")
    run([n1, n2], n2, "DROP STABLE d.st")
    for _ in range(1000):  # bounded: the clock moves on within a few ms
        if n2.clock.time_ms() != old.created_ms:
            break
        time.sleep(0.001)
    run([n1, n2], n2, STABLE)
    new = n1.catalog.stables[("d", "st")]
    assert new.created_ms != old.created_ms and (new.columns, new.tags) == (old.columns, old.tags)
    with pytest.raises(InvalidValue, match="changed since the ALTER was made"):
        n1.catalog.validate_shared(stale)
    seq = n1.catalog.shared_seq + 1
    for e in (n1, n2):  # appended anyway (a controller on an older catalog): applied as refused, nothing changed
        e.apply_shared(seq, stale[0])
        assert e.catalog.stables[("d", "st")] == new
    for e in (n1, n2):
        e.close()


def test_an_alter_a_topic_of_a_subtable_on_another_node_depends_on_is_refused_by_every_node(tmp_path: Path) -> None:
    """The topic's supertable is in its catalog record (known where the subtable is, at CREATE TOPIC): a node that
    does not hold the subtable refuses the ALTER as the node that does. Applied anyway (an ALTER made before the topic
    was: the race), the topics that still compile follow it; the one that does not keeps its old form, logged."""
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    run([n1, n2], n1, "CREATE DATABASE d VGROUPS 2")
    run([n1, n2], n1, "CREATE STABLE d.st (ts TIMESTAMP, v INT, w INT) TAGS (site INT)")
    sub = table_in(0)  # on node 1
    n1.execute(f"INSERT INTO d.{sub} USING d.st TAGS (7) VALUES (1700000000000, 1, 2)")
    raced = staged(n2, "ALTER STABLE d.st DROP COLUMN w")  # made before the topic
    run([n1, n2], n1, f"CREATE TOPIC ts AS SELECT w FROM d.{sub}")
    run([n1, n2], n1, "CREATE TOPIC whole AS STABLE d.st")
    assert n2.catalog.topics["ts"].stable == "st" and n2.catalog.topics["whole"].stable == ""
    for e in (n1, n2):
        with pytest.raises(InvalidValue, match="topic ts depends on it"):
            staged(e, "ALTER STABLE d.st DROP COLUMN w")
    n2.close()
    n2 = cluster_node(tmp_path / "n2", 2)  # restarted: known from its catalog, as from a snapshot's records
    assert n2.catalog.topics["ts"].stable == "st" and {"name": "ts", "stable": "st"}.items() <= next(
        r for r in n2.catalog.shared_records() if r.get("name") == "ts").items()
    with pytest.raises(InvalidValue, match="topic ts depends on it"):
        staged(n2, "ALTER STABLE d.st DROP COLUMN w")
    staged(n2, "ALTER STABLE d.st ADD COLUMN x INT")  # what the topic does not use: staged on either node
    apply([n1, n2], raced)
    for e in (n1, n2):
        assert e.evaluators["whole"].stable == e.catalog.stables[("d", "st")], "the topics that compile follow it"
    assert n1.evaluators["ts"].stable is not None and "w" in [c.name for c in n1.evaluators["ts"].stable.columns]
    for e in (n1, n2):
        e.close()


def test_a_torn_or_flipped_stable_metas_record_leaves_a_node_that_starts_and_writes_each_entry_once(
        tmp_path: Path) -> None:
    crashed = tmp_path / "crashed"
    n1 = cluster_node(crashed, 1)
    n1.set_dnodes(LIVE[:1], {1: None})
    run([n1], n1, "CREATE DATABASE d VGROUPS 2")
    run([n1], n1, STABLE)
    [alter] = staged(n1, "ALTER STABLE d.st ADD COLUMN w INT")
    n1.sql_objects.before(3, alter)  # a crash while (or just after) its node-own record was appended
    n1.close()
    assert b'"op":"stable_metas"' in (crashed / "catalog.log").read_bytes().splitlines()[-1]
    both = {0: ["alter_stable st"], 1: ["alter_stable st"]}
    for i, _ in enumerate(torn_last_line(crashed / "catalog.log")):
        shutil.copytree(crashed, tmp_path / f"torn{i}")
        e = cluster_node(tmp_path / f"torn{i}", 1)
        assert e.catalog.stable_metas is None and e.catalog.shared_seq == 2, "the torn record cut off"
        assert e.apply_shared(3, alter) and metas(e, "d") == both, "the stream's record applied again"
        e.close()
        e = cluster_node(tmp_path / f"torn{i}", 1)
        assert metas(e, "d") == both, "once"
        e.close()
    catalog = tmp_path / "torn0" / "catalog.log"
    line = next(n for n, x in enumerate(catalog.read_bytes().splitlines()) if b'"op":"stable_metas"' in x)
    for _ in flipped_in_line(catalog, line):  # the record of entries written: reported and skipped
        e = cluster_node(tmp_path / "torn0", 1)
        assert e.catalog.stable_metas is None and e.catalog.shared_seq == 3 and e.damage()
        assert metas(e, "d") == both
        e.close()


def test_a_topic_of_one_table_is_compiled_where_its_vgroup_is_and_served_empty_by_the_other_nodes(tmp_path: Path) -> None:
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    run([n1, n2], n2, "CREATE DATABASE a VGROUPS 1")  # node 1
    run([n1, n2], n2, "CREATE DATABASE one VGROUPS 1")  # node 2
    assert n1.catalog.database("one").nodes == (2,)
    n2.execute("CREATE TABLE one.t (ts TIMESTAMP, v INT)")  # a table lives in its vnode, on node 2
    run([n1, n2], n2, "CREATE TOPIC tt AS SELECT * FROM one.t")
    n2.execute("INSERT INTO one.t VALUES (1700000000000, 1)")
    assert n2.watermarks("tt", 0) == (0, 1) and n1.topic_id("tt") == n2.topic_id("tt") is not None
    n1.close()
    n1 = cluster_node(tmp_path / "n1", 1)  # restarted: known, not compiled here, no damage
    assert "tt" in n1.catalog.topics and n1.topic_id("tt") is not None and n1.damage() == []
    run([n1, n2], n1, "CREATE DATABASE d VGROUPS 2")  # over both nodes
    run([n1, n2], n1, STABLE)
    here, sub = [f"t{i}" for i in range(1000) if vnode_of("d", f"t{i}", 2) == 0][:2]
    n1.execute(f"CREATE TABLE d.{here} (ts TIMESTAMP, v INT)")
    n1.execute(f"INSERT INTO d.{sub} USING d.st TAGS (7) VALUES (1700000000000, 1)")
    with pytest.raises(NotHere, match="is on node 1"):  # compiled (checked) only where the table is
        staged(n2, f"CREATE TOPIC tx AS SELECT * FROM d.{here}")
    run([n1, n2], n1, f"CREATE TOPIC tx AS SELECT * FROM d.{here}")  # of a database over both nodes
    run([n1, n2], n1, f"CREATE TOPIC ts AS SELECT v FROM d.{sub}")  # of a subtable
    n1.execute(f"INSERT INTO d.{here} VALUES (1700000000000, 1) (1700000000001, 2)")
    n1.execute(f"INSERT INTO d.{sub} VALUES (1700000000002, 3)")
    n2.execute(f"INSERT INTO d.{table_in(1)} USING d.st TAGS (8) VALUES (1700000000000, 9)")  # on node 2
    assert (n1.watermarks("tx", 0), n1.watermarks("ts", 0)) == ((0, 2), (0, 2)), "rows (and creation) on node 1"
    assert n2.watermarks("tx", 1) == n2.watermarks("ts", 1) == (0, 0), "node 2's partitions: empty, served"
    run([n1, n2], n2, "ALTER STABLE d.st ADD COLUMN w INT")  # node 2 recompiles what it serves of d's topics
    n2.close()
    n2 = cluster_node(tmp_path / "n2", 2)  # restarted: the same, no damage
    assert n2.watermarks("tx", 1) == (0, 0) and n2.topic_id("tx") == n1.topic_id("tx") and n2.damage() == []
    run([n1, n2], n1, "DROP TOPIC tt")
    assert "tt" not in n2.catalog.topics and n1.topic_id("tt") is None
    for e in (n1, n2):
        e.close()


def test_meta_entries_still_pending_are_written_before_the_next_record_s(tmp_path: Path) -> None:
    """Record N's entries the disk refused stay pending; record N+1 (another ALTER) writes them first, then its own,
    each once, and a restart finds nothing missing."""
    n1 = cluster_node(tmp_path / "n1", 1)
    n1.set_dnodes(LIVE[:1], {1: None})
    run([n1], n1, "CREATE DATABASE d VGROUPS 2")
    run([n1], n1, STABLE)
    [alter] = staged(n1, "ALTER STABLE d.st ADD COLUMN w INT")
    n1.sql_objects.before(3, alter)  # applied, its entries not written (the disk refused them): pending
    n1.catalog.apply_shared(3, alter)
    assert len(n1.sql_objects.pending) == 1
    [again] = staged(n1, "ALTER STABLE d.st ADD COLUMN x INT")
    n1.apply_shared(4, again)
    both = {0: ["alter_stable st", "alter_stable st"], 1: ["alter_stable st", "alter_stable st"]}
    assert metas(n1, "d") == both and n1.sql_objects.pending == []
    columns = [[m["column"] for m in (decode_entry(x).meta for x in v.wal.read_from(v.wal.first_version)
                                      if x.kind == KIND_META) if m is not None and m["op"] == "alter_stable"]
               for v in n1.vnodes["d"]]
    assert columns == [["w", "x"], ["w", "x"]], "in the records' order"
    n1.close()
    n1 = cluster_node(tmp_path / "n1", 1)
    assert metas(n1, "d") == both
    n1.close()


def test_drop_table_is_checked_whole_on_the_node_asked_before_any_vnode_of_another_node_is_needed(
        tmp_path: Path) -> None:
    """A DROP TABLE naming a supertable, or a topic's source, is answered on the node asked from the cluster's
    catalog before any name is looked up in a vnode, so nothing is forwarded and nothing dropped: a supertable named
    alone is staged as DROP STABLE wherever its name's vgroup is (it used to raise NotHere and be forwarded, needing
    that node up); named with other tables, refused whole (it used to return before the tables after it); a table a
    topic reads, refused before the other names' parts are forwarded and dropped (reviewer findings 1, 7, 11)."""
    from walgate.storage.errors import BatchDropStable

    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    run([n1, n2], n1, "CREATE DATABASE d VGROUPS 2")
    st = next(f"s{i}" for i in range(1000) if vnode_of("d", f"s{i}", 2) == 1)  # its name's vgroup: on node 2
    run([n1, n2], n1, f"CREATE STABLE d.{st} (ts TIMESTAMP, v INT) TAGS (site INT)")
    here, there = table_in(0), table_in(1)
    n1.execute(f"CREATE TABLE d.{here} (ts TIMESTAMP, v INT)")
    n2.execute(f"CREATE TABLE d.{there} (ts TIMESTAMP, v INT)")
    for names in (f"d.{here}, d.{st}, d.{there}", f"d.{st}, d.{there}"):
        with pytest.raises(BatchDropStable, match=f"Cannot drop super table in batch: d.{st}"):
            staged(n1, f"DROP TABLE {names}")
    run([n1, n2], n2, f"CREATE TOPIC tt AS SELECT * FROM d.{there}")
    with pytest.raises(InvalidValue, match=f"d.{there} is used by topic tt"):  # not NotHere: nothing forwarded
        staged(n1, f"DROP TABLE d.{here}, d.{there}")
    assert n1.vnodes["d"][0].live(here) is not None and n2.vnodes["d"][0].live(there) is not None, "nothing dropped"
    records = staged(n1, f"DROP TABLE d.{st}")  # alone, through the node that does not hold its name's vgroup
    assert [r["op"] for r in records] == ["drop_stable"]
    apply([n1, n2], records)
    for e in (n1, n2):
        assert rows(e, "SHOW d.STABLES") == []


def test_a_replicated_database_s_meta_entries_go_only_into_the_vnodes_led_here(tmp_path: Path) -> None:
    """REPLICA 2 over two nodes, each leading one vgroup: an ALTER and a DROP STABLE apply on both without raising
    (before: NotHere from the follower's copy failed every apply, and the stream stopped there), each writing its
    entries into the vnode it leads only (a follower's copy gets them with its leader's WAL); a later record applies,
    and a restart with a record's entries left out of a vnode it no longer leads writes nothing there."""
    nodes = [Engine.open(tmp_path / f"n{i}", node_id=i) for i in (1, 2)]
    for e in nodes:
        e.cluster_mode(replication=True)
        e.set_dnodes(LIVE, {1: None, 2: None})
    records = staged(nodes[0], "CREATE DATABASE d VGROUPS 2")
    records[0]["replicas"] = [[1, 2], [2, 1]]  # (REPLICA 2 placement: the SQL takes 1 or 3, and there are 2 nodes)
    apply(nodes, records)
    for e, led in zip(nodes, (0, 1)):
        assert [v.index for v in e.vnodes["d"]] == [0, 1]
        e.vnodes["d"][led].wal.leading = True
    run(nodes, nodes[1], STABLE)
    run(nodes, nodes[1], "CREATE STABLE d.gone (ts TIMESTAMP, v INT) TAGS (site INT)")
    run(nodes, nodes[0], "ALTER STABLE d.st ADD COLUMN w INT")
    run(nodes, nodes[1], "DROP STABLE d.gone")
    run(nodes, nodes[0], "CREATE DATABASE o VGROUPS 1")
    assert metas(nodes[0], "d") == {0: ["alter_stable st", "drop_stable gone"], 1: []}
    assert metas(nodes[1], "d") == {0: [], 1: ["alter_stable st", "drop_stable gone"]}
    assert all("o" in e.catalog.databases and not e.sql_objects.pending for e in nodes)
    [alter] = staged(nodes[0], "ALTER STABLE d.st ADD COLUMN x INT")
    seq = nodes[0].catalog.shared_seq + 1
    nodes[0].sql_objects.before(seq, alter)  # the crash: applied, its entry (vnode 0's) not written
    nodes[0].catalog.apply_shared(seq, alter)
    nodes[0].close()
    again = Engine.open(tmp_path / "n1", node_id=1)  # at a start no vnode is led yet: nothing written, nothing raised
    assert metas(again, "d") == {0: ["alter_stable st", "drop_stable gone"], 1: []} and not again.sql_objects.pending
    for e in (again, nodes[1]):
        e.close()
