"""Replicated databases in ``walgate serve`` (issue 25, docs/plans/replication-wiring.md): three real ``walgate serve
--cluster`` nodes over a real etcd (stopped by PID), SQL through their HTTP APIs.

``CREATE DATABASE ... REPLICA 3`` places each vgroup on the three nodes; every node opens every vnode it holds a
replica of, the controller's Reconciler creates each vgroup's partition state, each node's replica manager leads or
follows it, and after SQL INSERTs (sent to any node, written on each vgroup's leader) the followers' WALs are byte
for byte the leader's, and the rows are read back whole through each node.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from etcd_cluster import EtcdCluster
from serve_support import eventually, no_traceback, node, sql, wait_log
from test_serve_cluster_sql import db_id

from livewalgate import WalgateServer

ROWS = 40
VGROUPS = 2


def wal_bytes(server: WalgateServer, database_id: str, vgroup: int) -> bytes:
    """Every WAL segment of the vnode on ``server``'s data dir, in order (the segment boundaries are each WAL's own)."""
    wal = server.data_dir / "db" / database_id / f"vnode{vgroup}" / "wal"
    return b"".join(p.read_bytes() for p in sorted(wal.glob("*.log")))


def test_replica_3_database_copied_to_every_node(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        n1 = stack.enter_context(node(etcd1, tmp_path, 1))
        wait_log(n1, "node 1: controller")
        nodes = [n1, *(stack.enter_context(node(etcd1, tmp_path, i)) for i in (2, 3))]
        eventually("three live nodes", lambda: len(sql(n1, "SHOW DNODES")) == 3)
        sql(n1, f"CREATE DATABASE r VGROUPS {VGROUPS} REPLICA 3 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0")
        sql(n1, "CREATE STABLE r.st (ts TIMESTAMP, v INT) TAGS (site INT)")
        rid = db_id(n1, "r")
        for server in nodes:  # every node opened every vnode: it holds a replica of each
            eventually(f"the vnodes of r on {server.http_url}", lambda s=server: all(
                (s.data_dir / "db" / rid / f"vnode{i}" / "wal").is_dir() for i in range(VGROUPS)))
        for k in range(ROWS):
            sql(nodes[k % 3], f"INSERT INTO r.t{k % 7} USING r.st TAGS ({k % 7}) VALUES ({1_700_000_000_000 + k}, {k})")

        def equal() -> bool:
            for i in range(VGROUPS):
                raws = [wal_bytes(s, rid, i) for s in nodes]
                if not raws[0] or any(r != raws[0] for r in raws):
                    return False
            return True

        eventually("every vnode's WAL byte-equal on the three nodes", equal)
        for server in nodes:
            assert sql(server, "SELECT COUNT(*) FROM r.st") == [[ROWS]]
            no_traceback(server)
        assert "leading epoch" in "".join(s.log() for s in nodes)
