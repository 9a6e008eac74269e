"""A new leader writes the ALTER/DROP STABLE meta entries its WAL lacks (issue 25, docs/cluster.md "Replicas"):
three in-process nodes of a replicated database (:func:`tests.gateway.test_replicas.trio`, ``replicated=True``),
the cluster's catalog records staged on node 1 and applied on every node as the shared stream applies them.

An ALTER STABLE ADD COLUMN and a DROP STABLE applied while vgroup 0 has no leader write no meta entry anywhere (no
node leads it); once node 2 is elected, its WAL holds both entries (in the records' order), its followers copy them
byte for byte, the dropped supertable's subtable is dropped in every replica, and a SELECT of the new column
answers. A leader deposed before its DROP STABLE entry committed cuts it as it follows the new leader, and gets it
back from that leader's WAL: the subtables of the dropped supertable are dropped there again, not alive and
unreadable ("STable not exist"). A takeover whose entries the disk refused steps down and is retried.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.etcd_cluster import EtcdCluster
from tests.gateway.test_replicas import DB, DB_ID, Trio, etcd, trio, until  # noqa: F401 (etcd: the fixture)
from walgate.cluster.partition_codec import PartitionId
from walgate.replication.partition import NO_LEADER
from walgate.storage.entry_check import decode_whole
from walgate.storage.errors import StorageUnavailable
from walgate.storage.wal import KIND_META

WITH_META = "all_of_rep"
GONE = f"CREATE STABLE {DB}.gone (ts TIMESTAMP, v INT) TAGS (k INT)"


async def shared(t: Trio, statement: str) -> None:
    """``statement`` staged on node 1 and its records applied on every node, in the stream's order."""
    first = t.nodes[1].side
    _, records = await first.call(first.engine.staged, first.engine.execute, statement)
    assert records, statement
    for record in records:
        seq = first.engine.catalog.shared_seq + 1
        for node in t.nodes.values():
            await node.side.call(node.side.engine.apply_shared, seq, record)


async def stable_metas(t: Trio, node_id: int) -> list[tuple[str, str]]:
    """The (op, supertable) of the ALTER/DROP STABLE meta entries in node ``node_id``'s WAL of vnode 0, in order."""
    wal = await t.nodes[node_id].wal()

    def read() -> list[tuple[str, str]]:
        metas = [decode_whole(e).meta for e in wal.read_from(0) if e.kind == KIND_META]
        return [(m["op"], m["stable"]) for m in metas if m is not None and m["op"] in ("alter_stable", "drop_stable")]
    return list(await t.nodes[node_id].side.call(read))


async def topic_metas(t: Trio, node_id: int) -> list[tuple[str, str]]:
    """The (op, supertable) of the ALTER/DROP STABLE meta entries topic :data:`WITH_META` serves on node
    ``node_id`` (its index's entries, below the visible version), in order."""
    side = t.nodes[node_id].side
    wal = await t.nodes[node_id].wal()

    def read() -> list[tuple[str, str]]:
        served = {v for _, v, _ in side.engine.index_entries(WITH_META, 0, 0)}
        metas = [decode_whole(e).meta for e in wal.read_from(0) if e.kind == KIND_META and e.version in served]
        return [(m["op"], m["stable"]) for m in metas if m is not None and m["op"] in ("alter_stable", "drop_stable")]
    return list(await side.call(read))


async def tables(t: Trio, node_id: int) -> list[tuple[str, str | None, bool]]:
    vnode = await t.nodes[node_id].side.vnode(DB, 0)
    return list(await t.nodes[node_id].side.call(lambda: sorted((v.name, v.stable, v.dropped) for v in vnode.tables())))


async def _with_gone(t: Trio) -> None:
    """Supertable ``gone`` with subtable ``g0`` beside ``meters``' ``d0``, all copied to nodes 2 and 3."""
    await shared(t, GONE)
    await t.nodes[1].side.sql(f"INSERT INTO {DB}.g0 USING {DB}.gone TAGS (1) VALUES (1700000000000, 1)")


async def test_changes_applied_while_a_vgroup_has_no_leader_are_written_by_the_leader_then_elected(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t:
        await t.started()
        await t.insert(1, 0)
        await _with_gone(t)
        await shared(t, f"CREATE TOPIC {WITH_META} WITH META AS DATABASE {DB}")
        await t.caught_up(2, 3)
        state = await t.state()
        await t.write_state(replace(state, leader=NO_LEADER, leader_epoch=state.leader_epoch + 1))
        await until(lambda: _nobody_leads(t), "node 1 no longer leads")
        await shared(t, f"ALTER STABLE {DB}.meters ADD COLUMN w INT")
        await shared(t, f"DROP STABLE {DB}.gone")
        assert [await stable_metas(t, n) for n in (1, 2, 3)] == [[], [], []]  # no node led vnode 0
        state = await t.state()
        await t.write_state(replace(state, leader=2, leader_epoch=state.leader_epoch + 1))
        await t.leading(2)
        assert await stable_metas(t, 2) == [("alter_stable", "meters"), ("drop_stable", "gone")]
        await t.nodes[2].side.sql(f"INSERT INTO {DB}.d1 USING {DB}.meters TAGS ('l1', 1) "
                                  "VALUES (1700000000001, 1.0, 1, 7)")
        await t.caught_up(1, 3, leader=2)
        await t.same_wals(1, 2, 3)
        for n in (1, 2, 3):
            assert ("g0", "gone", True) in await tables(t, n), n
        await until(lambda: _equal(selected(t, 2), [("d0", None), ("d1", 7)]),
                    "the new column's rows read back through the new leader (its HW past them)")
        for n in (1, 2, 3):  # the topic with meta carries both entries on the leader and its followers (their HW)
            await until(lambda n=n: _equal(topic_metas(t, n), [("alter_stable", "meters"), ("drop_stable", "gone")]),
                        f"node {n}'s topic with meta serves both entries")
        # taken over again (node 3 elected next): nothing is written twice
        state = await t.state()
        await t.write_state(replace(state, leader=3, leader_epoch=state.leader_epoch + 1))
        await t.leading(3)
        assert await stable_metas(t, 3) == [("alter_stable", "meters"), ("drop_stable", "gone")]


async def test_a_deposed_leader_whose_drop_entry_was_cut_gets_it_back_from_the_new_leader(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t:
        await t.started()
        await _with_gone(t)
        await t.caught_up(2, 3)
        proposer = t.nodes[1].led()[PartitionId(DB_ID, 0)].proposer  # (as Trio.leader_alone: the ISR stays whole)
        assert proposer is not None
        proposer.cancel()
        for n in (2, 3):
            await t.stop(n)  # node 1's next entry is its own
        await shared(t, f"DROP STABLE {DB}.gone")  # its entry on node 1 only, never committed
        assert await stable_metas(t, 1) == [("drop_stable", "gone")]
        assert await stable_metas(t, 2) == []
        await t.node_2_elected_without_1()
        await t.insert(2, 1)
        await t.caught_up(1, 3, leader=2)
        await t.same_wals(1, 2, 3)
        for n in (1, 2, 3):
            assert await stable_metas(t, n) == [("drop_stable", "gone")], n
            assert ("g0", "gone", True) in await tables(t, n), n


async def selected(t: Trio, node_id: int) -> list[tuple[Any, ...]]:
    result: Any = await t.nodes[node_id].side.sql(f"SELECT tbname, w FROM {DB}.meters ORDER BY tbname")
    return [tuple(r) for r in result.rows]


async def _equal(value: Awaitable[Any], expected: Any) -> bool:
    return await value == expected


async def _nobody_leads(t: Trio) -> bool:
    return not any([(await node.wal()).leading for node in t.nodes.values()])


async def test_a_takeover_whose_meta_entries_the_disk_refused_steps_down_and_is_retried(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        caplog: pytest.LogCaptureFixture) -> None:
    """The entries' append refused (ENOSPC) at the takeover: the manager logs the state not applied (no traceback)
    and retries; the retry writes each entry once, and the followers copy it."""
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t:
        await shared(t, f"ALTER STABLE {DB}.meters ADD COLUMN w INT")  # no state yet: no node leads vnode 0
        sql_objects = t.nodes[1].side.engine.sql_objects
        take_over = sql_objects.take_over
        refused: list[bool] = []

        def refuse_once(vnode: Any) -> int:
            if not refused:
                refused.append(vnode.wal.leading)
                raise StorageUnavailable("No space left on device")
            return take_over(vnode)
        monkeypatch.setattr(sql_objects, "take_over", refuse_once)
        await t.started()
        assert refused == [True] and "partition state not applied, retried" in caplog.text
        assert "Traceback" not in caplog.text
        assert await stable_metas(t, 1) == [("alter_stable", "meters")]
        await t.caught_up(2, 3)
        await t.same_wals(1, 2, 3)
