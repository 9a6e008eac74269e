"""The replica manager and a replica move's catalog record (issue 26; :mod:`walgate.gateway.replicas`), three
in-process nodes over a real etcd (test_replicas.py's trio): a node the ``place_vgroup`` record no longer places lets
go of its vnode and deletes its files, whether its manager runs when the record applies or starts after it (a move
completed while the node was down); the other replicas keep leading and following."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.cluster.etcd_cluster import EtcdCluster
from tests.gateway.test_replicas import DB, DB_ID, Trio, trio, until
from tests.gateway.test_replicas import etcd as etcd  # (the fixture)
from walgate.cluster.partition_codec import PartitionId
from walgate.cluster.placement import place_vgroup_record


async def _moved_off_3(t: Trio) -> None:
    """The move off node 3 completed: its state (1, 2) written, then its catalog record applied on every engine."""
    state = await t.state()
    await t.write_state(replace(state, replicas=(1, 2), partition_epoch=state.partition_epoch + 1,
                                isr=tuple(m for m in state.isr if m.replica != 3)))
    for node in t.nodes.values():
        engine = node.side.engine
        seq = await node.side.call(lambda e=engine: e.catalog.shared_seq + 1)
        await node.side.call(engine.apply_shared, seq, place_vgroup_record(DB_ID, 0, [1, 2]))
        if node.manager is not None and node.task is not None:
            node.manager.catalog_changed()  # (as the gateway does after each record)


async def _gone(t: Trio, node_id: int, vnode_dir: Path) -> bool:
    side = t.nodes[node_id].side
    return not vnode_dir.exists() and await side.call(lambda: [v.index for v in side.engine.vnodes[DB]] == [])


@pytest.mark.parametrize("manager_running", [True, False])
async def test_a_node_moved_off_lets_go_and_deletes_its_copy(etcd: EtcdCluster, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             manager_running: bool) -> None:
    async with trio(etcd, tmp_path, monkeypatch, replicated=True) as t:
        await t.started()
        await t.insert(1, 0)
        await t.caught_up(2, 3)
        vnode_dir = (await t.nodes[3].side.vnode(DB, 0)).dir
        if not manager_running:
            await t.stop(3)
        await _moved_off_3(t)
        if not manager_running:
            t.start(3)  # (a restart's manager, starting after the record applied)
        await until(lambda: _gone(t, 3, vnode_dir), "node 3's copy deleted")
        assert PartitionId(DB_ID, 0) not in t.nodes[3].manager.following  # type: ignore[union-attr]
        await t.insert(1, 1)
        await t.caught_up(2)
        assert await t.nodes[3].side.call(lambda: t.nodes[3].side.engine.moved_away()) == []
