"""The controller election and its fence, against a real etcd (in-process nodes; the process-level kill -9 and
SIGSTOP cases are in test_processes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_support import KEYS, Node, eventually, within
from etcd_cluster import EtcdCluster

from walgate.cluster.etcd import tx
from walgate.cluster.model import NotController


async def test_one_controller_then_the_next_with_a_larger_epoch(etcd1: EtcdCluster, tmp_path: Path) -> None:
    nodes = [Node(etcd1.endpoints, i, tmp_path / f"n{i}", ttl=2) for i in (1, 2, 3)]
    try:
        for n in nodes:
            n.start("registration", "election")
        await eventually("a controller", lambda: _any_elected(nodes))
        await eventually("three candidates", lambda: _candidates(nodes[0], 3))
        [leader] = [n for n in nodes if n.election.epoch is not None]
        first = leader.election.epoch
        assert first is not None
        kvs = (await leader.session.get_prefix(KEYS.candidates))[1]
        assert min(kv.create_revision for kv in kvs) == first  # the oldest candidate
        others = [n for n in nodes if n is not leader]
        await leader.close()  # its candidacy goes with its lease
        await eventually("another controller", lambda: _any_elected(others))
        elected = [n for n in others if n.election.epoch is not None]
        assert len(elected) == 1 and elected[0].election.epoch is not None and elected[0].election.epoch > first
    finally:
        for n in nodes:
            await n.close()


async def test_a_replaced_controller_s_writes_are_refused_by_etcd(etcd1: EtcdCluster, tmp_path: Path) -> None:
    """The etcd form of KAFKA-6082: the old controller still believes it leads (its own process noticed nothing),
    yet every write it makes is refused by the fence, and nothing of it lands."""
    old = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=2)
    new = Node(etcd1.endpoints, 2, tmp_path / "n2", ttl=2)
    try:
        await old.registration.register()
        old_epoch = await old.election.campaign()  # no keep-alive runs for it: as if its process were paused
        assert await old.log.append([b"before"]) == 1
        new.start("registration", "election")
        new_epoch = await within(new.election.wait_elected())  # after old's lease expired
        assert new_epoch > old_epoch
        assert old.election.epoch == old_epoch  # it did not notice
        with pytest.raises(NotController, match="no longer the elected one"):
            await old.log.append([b"zombie"])
        assert old.election.epoch is None  # and it steps down
        with pytest.raises(NotController):
            await old.election.fenced_txn([], [tx.Put(KEYS.root + b"x", b"zombie")])
        assert await new.log.append([b"after"]) == 2
        kvs = (await new.session.get_prefix(KEYS.records))[1]
        assert [kv.value for kv in kvs] == [b"%d\nbefore" % old_epoch, b"%d\nafter" % new_epoch]
        assert await new.session.get(KEYS.root + b"x") is None
    finally:
        await old.close()
        await new.close()


async def test_a_non_controller_cannot_write(etcd1: EtcdCluster, tmp_path: Path) -> None:
    a = Node(etcd1.endpoints, 1, tmp_path / "a", ttl=5)
    b = Node(etcd1.endpoints, 2, tmp_path / "b", ttl=5)
    try:
        a.start("registration", "election")
        await within(a.election.wait_elected())
        b.start("registration", "election")
        await within(b.registration.wait_registered())
        with pytest.raises(NotController, match="is not the controller"):
            await b.log.append([b"x"])
        assert (await a.session.get_prefix(KEYS.records))[1] == []
    finally:
        await a.close()
        await b.close()


async def _any_elected(nodes: list[Node]) -> bool:
    return any(n.election.epoch is not None for n in nodes)


async def _candidates(node: Node, n: int) -> bool:
    return len((await node.session.get_prefix(KEYS.candidates))[1]) == n
