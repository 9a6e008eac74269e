"""The catalog record stream against a real etcd: order, resume from the last applied revision, compaction and
trimming (the snapshot), etcd restarts; a DDL's append never refused by the controller's own placement writes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aetcd
from aetcd import transactions as tx
from cluster_support import Node, eventually, try_append, within
from etcd_cluster import EtcdCluster

from walgate.cluster.model import MAX_RECORDS_PER_TXN, RecordCursor


async def _controller(etcd: EtcdCluster, tmp_path: Path) -> Node:
    node = Node(etcd.endpoints, 1, tmp_path / "controller", ttl=5)
    node.start("registration", "election")
    await within(node.election.wait_elected())
    return node


def _payloads(node: Node) -> list[bytes]:
    return [node.applied[s][1] for s in sorted(node.applied)]


async def test_every_node_applies_every_record_once_in_order(etcd1: EtcdCluster, tmp_path: Path) -> None:
    ctl = await _controller(etcd1, tmp_path)
    follower = Node(etcd1.endpoints, 2, tmp_path / "n2")
    try:
        ctl.start("follower")
        follower.start("follower")
        sent = [b"r%d" % i for i in range(2 * MAX_RECORDS_PER_TXN + 5)]  # three transactions
        assert await ctl.log.append(sent[:3]) == 3
        assert await ctl.log.append(sent[3:]) == len(sent)
        for n in (ctl, follower):
            await within(n.follower.wait_applied(len(sent)))
            assert _payloads(n) == sent and sorted(n.applied) == list(range(1, len(sent) + 1))
            assert {e for e, _ in n.applied.values()} == {ctl.election.epoch}
            assert n.restored == []
    finally:
        await ctl.close()
        await follower.close()


async def test_a_follower_resumes_from_its_last_applied_revision(etcd1: EtcdCluster, tmp_path: Path) -> None:
    ctl = await _controller(etcd1, tmp_path)
    node = Node(etcd1.endpoints, 2, tmp_path / "n2")
    try:
        node.start("follower")
        await ctl.log.append([b"a", b"b"])
        await within(node.follower.wait_applied(2))
        await node.stop()  # the node goes away, keeping what it applied and its cursor
        cursor = RecordCursor(node.follower.cursor.seq, node.follower.cursor.revision)
        await ctl.log.append([b"c"])
        await ctl.log.append([b"d"])
        calls: list[int] = []
        node.follower.apply = lambda seq, epoch, payload: (calls.append(seq), node._apply(seq, epoch, payload))
        node.start("follower")
        await within(node.follower.wait_applied(4))
        assert calls == [3, 4]  # only what it missed, from the watch: no snapshot read
        assert node.restored == [] and _payloads(node) == [b"a", b"b", b"c", b"d"]
        assert node.follower.cursor.seq == 4 and node.follower.cursor.revision > cursor.revision
    finally:
        await ctl.close()
        await node.close()


async def test_compacted_and_trimmed_history_is_read_from_the_snapshot(etcd1: EtcdCluster, tmp_path: Path) -> None:
    ctl = await _controller(etcd1, tmp_path)
    node = Node(etcd1.endpoints, 2, tmp_path / "n2")
    try:
        ctl.start("follower")
        node.start("follower")
        await ctl.log.append([b"a", b"b"])
        await within(node.follower.wait_applied(2))
        await node.stop()
        await ctl.log.append([b"c", b"d", b"e"])
        await within(ctl.follower.wait_applied(5))
        await ctl.log.trim(4, ctl.state().replace(b"\n5=e", b""))  # records 1..4 become the snapshot
        await ctl.log.append([b"f"])
        revision, kvs = await ctl.session.get_prefix(b"/walgate/test/catalog/records/")
        assert [kv.value.split(b"\n")[1] for kv in kvs] == [b"e", b"f"]
        async with aetcd.Client(*etcd1.endpoints[0]) as raw:
            await raw.compact(revision, physical=True)  # the node's resume revision is gone from etcd
        node.start("follower")
        await within(node.follower.wait_applied(6))
        assert node.restored == [4]
        assert _payloads(node) == [b"a", b"b", b"c", b"d", b"e", b"f"]
    finally:
        await ctl.close()
        await node.close()


async def test_the_watch_resumes_across_etcd_restarts(etcd1: EtcdCluster, tmp_path: Path) -> None:
    ctl = await _controller(etcd1, tmp_path)
    node = Node(etcd1.endpoints, 2, tmp_path / "n2")
    try:
        node.start("follower")
        await ctl.log.append([b"a"])
        await within(node.follower.wait_applied(1))
        member = etcd1.members[0]
        for round_ in range(2):
            member.kill()  # kill -9, then a restart on the same data dir
            member.start()
            etcd1.wait_healthy([member])
            await eventually("the controller writes again", lambda: try_append(ctl, b"x%d" % round_))
            await within(node.follower.wait_applied(2 + round_))
        assert _payloads(node) == [b"a", b"x0", b"x1"]
    finally:
        await ctl.close()
        await node.close()


async def test_the_controllers_own_placement_writes_never_refuse_an_append(etcd1: EtcdCluster, tmp_path: Path) -> None:
    """The controller's ``place_vgroup`` writes move ``catalog/seq`` too (walgate.cluster.partition_states): one made
    after every read of the sequence number by an append (here: as soon as the append read it) waits for the append's
    transaction (``ControllerElection.catalog_appends``), so the append is never refused; without the lock both of its
    attempts were (ControlPlaneError: checked)."""
    ctl = await _controller(etcd1, tmp_path)
    try:
        read = asyncio.Event()
        session_get = ctl.session.get

        async def get(key: bytes) -> object:
            kv = await session_get(key)
            if key == ctl.log.keys.seq:
                read.set()
                await asyncio.sleep(0.05)  # the placement write's chance to run between the read and the compare
            return kv

        async def placement_writes() -> None:
            for _ in range(2):
                await read.wait()
                read.clear()
                async with ctl.election.catalog_appends:  # as Reconciler's transaction with placement records
                    kv = await session_get(ctl.log.keys.seq)
                    seq = int(kv.value) if kv is not None else 0
                    ok, _ = await ctl.election.fenced_txn([], [tx.Put(ctl.log.keys.seq, str(seq + 1).encode()),
                                                              tx.Put(ctl.log.keys.record(seq + 1), b"placed")])
                    assert ok

        ctl.session.get = get  # type: ignore[method-assign]
        writer = asyncio.create_task(placement_writes())
        assert await within(ctl.log.append([b"ddl"])) == 1
        assert await within(ctl.log.append([b"ddl2"])) == 3
        await within(writer)
    finally:
        await ctl.close()
