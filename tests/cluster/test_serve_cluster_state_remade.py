"""A partition state deleted by an operator is made again above every epoch it reached (issue 25): three real
``walgate serve --cluster`` nodes with ``replication.enable=true`` over a real etcd (stopped by PID).

A ``REPLICA 3`` vgroup's leader is killed with kill -9 and a survivor leads it in a later epoch, so every replica's
leader epoch cache holds that epoch. Its state's key is then deleted in etcd (``etcdctl del`` by an operator): the
controller makes the state again from the catalog, at the etcd revision it read the absence at, above every epoch
the deleted state reached (KIP-101: a replica never leads in an epoch older than one it holds; KIP-497: a leader's
view takes a lower partition epoch for an older state). A survivor leads it in that epoch and takes writes. Before:
the state made again began at epoch 0, its first replica's takeover was refused ("its epoch cache holds epoch N,
newer than 0") and the vgroup stayed without a leader.
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from pathlib import Path

from etcd_cluster import EtcdCluster
from serve_support import eventually, leader_of, no_traceback, sql
from test_serve_cluster_replicas import LAG, one_vgroup_on_three
from test_serve_cluster_sql import db_id

from walgate.cluster.etcd import EtcdSession, tx
from walgate.cluster.model import Keys
from walgate.cluster.partition_codec import PartitionId, partition_key

ROWS = 6


def delete_key(etcd: EtcdCluster, key: bytes) -> None:
    """Delete ``key`` in ``etcd``, as an operator's ``etcdctl del`` does; it was present."""
    async def delete() -> bool:
        session = EtcdSession(etcd.endpoints)
        try:
            ok, _ = await session.txn([tx.Version(key) > 0], [tx.Delete(key)])
            return bool(ok)
        finally:
            await session.close()

    assert asyncio.run(delete())


def test_a_deleted_state_is_made_again_above_its_epochs_and_led_again(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes, leader = one_vgroup_on_three(stack, etcd1, tmp_path, "e", ROWS, *LAG)
        first = leader_of(nodes, "e", 0)
        assert first is not None
        leader.proc.kill()
        leader.proc.wait(timeout=30)
        survivors = [s for s in nodes if s is not leader]
        eventually("a survivor leads", lambda: leader_of(survivors, "e", 0, first[0]) is not None)
        second = leader_of(survivors, "e", 0, first[0])
        assert second is not None
        sql(survivors[0], f"INSERT INTO e.t0 USING e.st TAGS (0) VALUES ({1_700_000_001_000}, 1)")

        delete_key(etcd1, partition_key(Keys("walgate"), PartitionId(db_id(survivors[0], "e"), 0)))
        eventually("a survivor leads the state made again",
                   lambda: leader_of(survivors, "e", 0, second[0]) is not None)
        third = leader_of(survivors, "e", 0, second[0])
        assert third is not None and third[0] > second[0] > first[0]
        for k, server in enumerate(survivors):  # written in the new epoch, through either survivor
            sql(server, f"INSERT INTO e.t{k} USING e.st TAGS ({k}) VALUES ({1_700_000_002_000 + k}, {k})")
        for server in survivors:
            assert sql(server, "SELECT COUNT(*) FROM e.st") == [[ROWS + 3]]
        for server in nodes:
            no_traceback(server)
