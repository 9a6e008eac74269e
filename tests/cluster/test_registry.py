"""Node registration on a lease, against a real etcd: broker epochs, expiry, the data dir's incarnation."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from cluster_support import KEYS, Node, eventually, joined_member, within
from etcd_cluster import EtcdCluster

from walgate.cluster.model import ControlPlaneError, NodeInfo, RegistrationRefused
from walgate.cluster.registry import broker_epoch, registration_value


async def test_epoch_is_the_first_registration_s_revision_and_survives_a_lost_lease(etcd1: EtcdCluster,
                                                                                     tmp_path: Path) -> None:
    """KIP-903's broker epoch names a process start: a registration the same process makes again after its lease
    expired (no keep-alive for a TTL) is a new lease under the same epoch, carried in its value."""
    node = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=2)
    try:
        epoch = await node.registration.register()
        first_lease = node.registration.lease_id
        kv = await node.session.get(KEYS.node(1))
        assert kv is not None and kv.create_revision == epoch == broker_epoch(kv.value, kv.create_revision)
        assert NodeInfo.decode(kv.value) == node.info
        # nobody keeps the lease alive: etcd lets it go and deletes the registration
        await eventually("the registration expires", lambda: _absent(node, KEYS.node(1)))
        node.start("registration")
        # the keep-alive loop finds the lease gone and registers again: a new lease, the same epoch
        await eventually("registered again", lambda: _registered_on_another_lease(node, first_lease))
        kv = await node.session.get(KEYS.node(1))
        assert kv is not None and kv.create_revision > epoch and kv.lease == node.registration.lease_id
        assert node.registration.epoch == epoch == broker_epoch(kv.value, kv.create_revision)
        assert NodeInfo.decode(kv.value) == node.info
    finally:
        await node.close()


def test_a_registration_s_broker_epoch_is_checked() -> None:
    info = NodeInfo(1, "inc", ("PLAINTEXT://127.0.0.1:9092",))
    assert broker_epoch(registration_value(info, None), 40) == 40
    assert broker_epoch(registration_value(info, 17), 40) == 17
    for damaged in (b"[1]", b"{", registration_value(info, 41), registration_value(info, 0),
                    registration_value(info, 17).replace(b"17", b"\"17\"")):
        with pytest.raises(ControlPlaneError, match="not walgate's"):
            broker_epoch(damaged, 40)


async def test_keepalive_keeps_the_epoch(etcd1: EtcdCluster, tmp_path: Path) -> None:
    node = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=3)
    try:
        node.start("registration")
        epoch = await within(node.registration.wait_registered())
        await asyncio.sleep(3 * node.registration.ttl)  # three TTLs: without keep-alives the lease would be gone
        assert node.registration.epoch == epoch
        kv = await node.session.get(KEYS.node(1))
        assert kv is not None and kv.create_revision == epoch
    finally:
        await node.close()


async def test_an_emptied_data_dir_does_not_register_as_the_old_node(etcd1: EtcdCluster, tmp_path: Path) -> None:
    old = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=2)
    await old.registration.register()
    await old.registration.close()
    await old.close()
    shutil.rmtree(tmp_path / "n1")  # the disk was replaced: a new, empty data dir
    new = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=2)
    try:
        assert new.info.incarnation != old.info.incarnation
        with pytest.raises(RegistrationRefused, match="must not serve as its old self"):
            await new.registration.register()
        assert await new.session.get(KEYS.node(1)) is None
        # as a new node id it registers
        other = Node(etcd1.endpoints, 7, tmp_path / "n1", ttl=2)
        try:
            assert await other.registration.register() > 0
        finally:
            await other.close()
    finally:
        await new.close()


async def test_a_live_node_id_is_not_taken_by_another_data_dir(etcd1: EtcdCluster, tmp_path: Path) -> None:
    a = Node(etcd1.endpoints, 1, tmp_path / "a", ttl=5)
    b = Node(etcd1.endpoints, 1, tmp_path / "b", ttl=5)
    try:
        a.start("registration")
        epoch = await within(a.registration.wait_registered())
        with pytest.raises(RegistrationRefused):
            await b.registration.register()
        kv = await a.session.get(KEYS.node(1))
        assert kv is not None and kv.create_revision == epoch and NodeInfo.decode(kv.value) == a.info
    finally:
        await a.close()
        await b.close()


async def test_a_restart_before_the_lease_expired_replaces_the_old_registration(etcd1: EtcdCluster,
                                                                               tmp_path: Path) -> None:
    first = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=30)
    epoch = await first.registration.register()
    await first.close()  # the process is gone; its 30 s lease is not
    again = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=30)
    try:
        new_epoch = await again.registration.register()
        assert new_epoch > epoch
        kv = await again.session.get(KEYS.node(1))
        assert kv is not None and kv.create_revision == new_epoch and kv.lease == again.registration.lease_id
    finally:
        await again.registration.close()
        await again.close()


async def test_a_controlled_shutdown_marks_the_registration_it_keeps(etcd1: EtcdCluster, tmp_path: Path) -> None:
    """KIP-631: the mark is written on the same key, lease and broker epoch (the node stays registered); a
    registration made again after a lost lease keeps it; a registration replaced meanwhile (a new process of the
    data dir) is not marked by the old one."""
    node = Node(etcd1.endpoints, 1, tmp_path / "n1", ttl=2)
    try:
        epoch = await node.registration.register()
        lease = node.registration.lease_id
        assert await node.registration.shut_down()
        kv = await node.session.get(KEYS.node(1))
        assert kv is not None and kv.lease == lease and kv.create_revision == epoch
        assert broker_epoch(kv.value, kv.create_revision) == epoch and NodeInfo.decode(kv.value).shutting_down
        await eventually("the registration expires", lambda: _absent(node, KEYS.node(1)))
        node.start("registration")
        await eventually("registered again", lambda: _registered_on_another_lease(node, lease))
        kv = await node.session.get(KEYS.node(1))
        assert kv is not None and NodeInfo.decode(kv.value).shutting_down
        assert broker_epoch(kv.value, kv.create_revision) == node.registration.epoch == epoch
    finally:
        await node.close()
    old = Node(etcd1.endpoints, 2, tmp_path / "n2", ttl=30)
    again = Node(etcd1.endpoints, 2, tmp_path / "n2", ttl=30)
    try:
        await old.registration.register()
        await again.registration.register()  # revokes the old process's lease: the key is the new one's
        assert not await old.registration.shut_down()
        kv = await again.session.get(KEYS.node(2))
        assert kv is not None and not NodeInfo.decode(kv.value).shutting_down
    finally:
        await again.registration.close()
        await again.close()
        await old.close()


async def test_a_controlled_shutdown_etcd_does_not_answer_is_not_begun(etcd1: EtcdCluster, tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """The mark is the controlled shutdown's one write: etcd not answering, it is not begun (logged; the node then
    deregisters at once, as a node stopping without it, and its lease expires by itself)."""
    member = await joined_member(etcd1.spec, tmp_path / "n1", 1)
    try:
        etcd1.stop()
        assert not await member.shut_down()
        assert "controlled shutdown not begun (etcd did not answer)" in caplog.text
        assert not await member.deregister()
    finally:
        await member.leave()


async def _absent(node: Node, key: bytes) -> bool:
    return await node.session.get(key) is None


async def _registered_on_another_lease(node: Node, lease_id: int | None) -> bool:
    return node.registration.epoch is not None and node.registration.lease_id != lease_id
