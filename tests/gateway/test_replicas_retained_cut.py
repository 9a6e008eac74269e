"""A deposed leader whose divergent tail holds a DROP STABLE's and a CREATE TABLE's meta entries cuts them after
retention deleted its WAL's first segments (docs/cluster.md "Replicas"): three in-process nodes
(:func:`tests.gateway.test_replicas.trio`), node 1's WAL rolling a segment at each append and every sealed segment
expired. Its meta store is cut back by its undo journal (:mod:`walgate.storage.meta_store`), not rebuilt from the WAL
(which no longer starts at version 0): it catches up, its WAL's entries become the new leader's, its tables
equal the new leader's and it rejoins the ISR. Before the journal, the cut was refused at every fetch ("retention
deleted the versions ... a rebuild needs") and the replica stayed behind, out of the ISR.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.etcd_cluster import EtcdCluster
from tests.gateway.test_replicas import DB, Trio, etcd, trio, until  # noqa: F401 (etcd: the fixture)
from walgate.storage.wal import WalOptions


def _rolling(vnode: Any) -> None:
    """On the lane: ``vnode``'s WAL rolls a segment at each append, and retention expires every sealed one."""
    vnode.wal.options = WalOptions(**{**vnode.wal.options.__dict__, "segment_bytes": 64, "retention_period_s": 0})


async def _tables(t: Trio, node_id: int) -> list[tuple[Any, ...]]:
    side = t.nodes[node_id].side
    vnode = await side.vnode(DB, 0)
    return list(await side.call(lambda: sorted((v.name, v.stable, v.version, v.dropped) for v in vnode.tables())))


async def _entries(t: Trio, node_id: int, start: int) -> list[Any]:
    """Node ``node_id``'s WAL entries of vnode 0 from version ``start`` on."""
    wal = await t.nodes[node_id].wal()
    return list(await t.nodes[node_id].side.call(lambda: list(wal.read_from(start))))


async def test_a_deposed_leaders_drop_and_create_are_cut_after_retention_and_it_rejoins_the_isr(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        caplog: pytest.LogCaptureFixture) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        node = t.nodes[1]
        vnode = await node.side.vnode(DB, 0)
        await node.side.call(_rolling, vnode)
        await t.leader_alone(2)  # (rows 0 and 1 written and copied, node 1 alone from now on)
        assert await node.side.call(vnode.apply_retention, time.time() + 10)  # (row 0's segment)
        assert vnode.wal.first_version > 0
        await node.side.sql(f"CREATE TABLE {DB}.n0 (ts TIMESTAMP, v INT)")  # node 1's tail: never committed
        await node.side.sql(f"DROP STABLE {DB}.meters")
        assert [x[::3] for x in await _tables(t, 1)] == [("d0", True), ("d1", True), ("n0", False)]
        await t.node_2_elected_without_1()
        await t.insert(2, 2)
        start = vnode.wal.first_version

        async def same_entries() -> bool:  # (the WAL ends alone can be equal before node 1 cut its tail)
            return await _entries(t, 1, start) == await _entries(t, 2, start)

        await until(same_entries, "node 1's WAL cut and caught up with node 2's")
        await until(lambda: t.isr_is({1, 2, 3}), "node 1 back in the ISR")
        assert await _tables(t, 1) == await _tables(t, 2)
        assert [x[::3] for x in await _tables(t, 1)] == [("d0", False), ("d1", False), ("d2", False)]
        assert "Traceback" not in caplog.text and "retention deleted" not in caplog.text
