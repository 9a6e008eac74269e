"""Replica moves asked of the controller through etcd (AlterPartitionReassignments' path:
walgate/cluster/reassignments.py), on real etcd with in-process nodes: the node asked is not the controller, the
controller writes the move (fenced), the leader's ISR change admits the adding replica and the controller's next
pass completes the move; refusals and a cancellation; each replica change appends its ``place_vgroup`` catalog
record in the transaction that writes the state; a state deleted mid-move is made again from those records with its
move."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from cluster_support import KEYS, Node, create_states, eventually, within
from etcd_cluster import EtcdCluster
from test_partition_states import controller_and_one

from walgate.cluster.elections import ElectionRequestDamaged, ask, decode_request, encode_request
from walgate.cluster.etcd import tx
from walgate.cluster.model import decode_record
from walgate.cluster.partition_codec import CatalogVnodes, PartitionId, ReplicatedVnode, partition_key
from walgate.cluster.partition_states import PartitionStates, Reconciler
from walgate.cluster.reassignments import ReassignmentRequest, decide, first_states
from walgate.replication.partition import AlterIsr, IsrMember, PartitionState
from walgate.storage.catalog import DB_DEFAULTS, Catalog
from walgate.storage.names import new_db_id
from walgate.wire.errors import ErrorCode


def test_a_request_round_trips_and_damage_is_refused() -> None:
    request = ReassignmentRequest(((PartitionId("d", 0), (2, 1)), (PartitionId("e", 3), None)))
    assert decode_request(encode_request(request)) == request
    assert request.partitions == (PartitionId("d", 0), PartitionId("e", 3))
    for damaged in (b'{"reassign": null}', b'{"reassign": [["d", 0]]}', b'{"reassign": [["d", "0", null]]}',
                    b'{"reassign": [["d", 0, [1, "2"]]]}', b'{"reassign": [["d", 0, 3]]}', b'{"reassign": [[0, 0, []]]}'):
        with pytest.raises(ElectionRequestDamaged, match="not walgate's"):
            decode_request(damaged)


async def test_a_move_asked_of_another_node_is_written_then_completed_by_the_controller(etcd1: EtcdCluster,
                                                                                        tmp_path: Path) -> None:
    async with controller_and_one(etcd1, tmp_path) as (n1, n2):
        e1, e2 = n1.registration.epoch or 0, n2.registration.epoch or 0
        live = {1: e1, 2: e2}
        moved, invalid, idle, cancelled = (PartitionId("d", v) for v in range(4))
        await create_states(n1, {pid: PartitionState((1,), 1, 0, 0, (IsrMember(1, e1),), (), 1)
                                 for pid in (moved, invalid, idle, cancelled)})
        view = PartitionStates(n1.session, KEYS)
        reconciler = Reconciler(view, n1.election, retry_delay=0.1)
        n1.tasks.append(asyncio.create_task(reconciler.run()))
        lease = n2.registration.lease_id
        assert lease is not None
        missing = PartitionId("gone", 0)
        answers = await within(ask(n2.session, KEYS, 2, lease, ReassignmentRequest((
            (moved, (2,)), (invalid, (9,)), (idle, None), (missing, (1,)), (cancelled, (1, 2))))))
        assert answers == {moved: ErrorCode.none, invalid: ErrorCode.invalid_replica_assignment,
                           idle: ErrorCode.no_reassignment_in_progress, missing: ErrorCode.unknown_topic_or_partition,
                           cancelled: ErrorCode.none}
        moving = await view.read(moved)
        assert moving is not None
        assert (moving.replicas, moving.adding, moving.removing, moving.leader) == ((2, 1), (2,), (1,), 1)
        assert (await view.read(cancelled)).adding == (2,)  # type: ignore[union-attr]

        revert = await within(ask(n2.session, KEYS, 2, lease, ReassignmentRequest(((cancelled, None),))))
        assert revert == {cancelled: ErrorCode.none}
        back = await view.read(cancelled)
        assert back is not None and (back.replicas, back.moving, back.leader) == ((1,), False, 1)

        # the leader (node 1) admits node 2, caught up, to the ISR: the controller completes the move
        done = await _admitted_then_completed(view, moving, moved, AlterIsr(
            1, 0, moving.partition_epoch, (IsrMember(1, e1), IsrMember(2, e2)), e1), live)
        assert (done.replicas, done.isr, done.leader, done.leader_epoch) == ((2,), (IsrMember(2, e2),), 2, 1)
        assert reconciler.moves_completed == 1
        assert (await n2.session.get_prefix(KEYS.root + b"elections/"))[1] == []
        _, records = await n2.session.get_prefix(KEYS.records)
        placed = [json.loads(decode_record(kv.value)[1]) for kv in sorted(records, key=lambda kv: int(kv.key[len(
            KEYS.records):]))]
        assert [(r["op"], r["vgroup"], r["replicas"], r.get("adding"), r.get("removing")) for r in placed] == [
            ("place_vgroup", 0, [2, 1], [2], [1]), ("place_vgroup", 3, [1, 2], [2], []),
            ("place_vgroup", 3, [1], None, None), ("place_vgroup", 0, [2], None, None)]
        # begun (the union, target first, with the move), cancelled, completed
        assert (await n2.session.get(KEYS.seq)).value == b"4"


async def test_a_state_deleted_mid_move_is_made_again_with_the_move_and_its_adding_replica_out_of_the_isr(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    """The controller's catalog is a real one fed from the stream: the ``place_vgroup`` record of a move of d/0
    from nodes 1, 2 to 3, 2 names its adding and removing replicas; the state's key deleted mid-move (by an
    operator), the controller makes it again from the catalog with the move, node 3 (adding: it may hold nothing)
    neither in the ISR nor leading though listed first, in a leader epoch above the deleted state's,
    and the move completes once the leader admits node 3 (fails without the move in the record: checked, the state
    made again had node 3 in sync and leading, and the move completed at once)."""
    async with controller_and_one(etcd1, tmp_path) as (n1, n2):
        n3 = Node(etcd1.endpoints, 3, tmp_path / "n3", ttl=2)
        try:
            n3.start("registration")
            await eventually("node 3 registered", lambda: _registered(n3))
            catalog = Catalog.open(tmp_path / "catalog.log")
            catalog.cluster, catalog.node_id = True, 1
            db_id = new_db_id()
            catalog.apply({"op": "create_db", "name": "d", "id": db_id, "options": {**DB_DEFAULTS, "VGROUPS": 1},
                           "created_ms": 0, "nodes": [1], "replicas": [[1, 2]]})
            pid = PartitionId(db_id, 0)

            view = PartitionStates(n1.session, KEYS)
            reconciler = Reconciler(view, n1.election, retry_delay=0.1, catalog=_fed(n1, catalog))
            n1.tasks.append(asyncio.create_task(reconciler.run()))

            async def made() -> bool:
                return await view.read(pid) is not None

            await eventually("d/0's state made", made)
            lease = n2.registration.lease_id
            assert lease is not None
            assert await within(ask(n2.session, KEYS, 2, lease, ReassignmentRequest(((pid, (3, 2)),)))) == {
                pid: ErrorCode.none}

            async def catalog_moving() -> bool:
                return catalog.replicated_vnodes()[pid].adding == (3,)

            await eventually("the catalog has the move", catalog_moving)
            before = await view.read(pid)
            assert before is not None
            await n1.session.txn([], [tx.Delete(partition_key(KEYS, pid))])  # an operator deletes it
            await eventually("d/0's state made again", lambda: _created(reconciler, 2))
            again = await view.read(pid)
            assert again is not None
            assert again.leader_epoch > before.leader_epoch, "made again above the deleted state's (KIP-101)"
            assert (again.replicas, again.adding, again.removing) == ((3, 2, 1), (3,), (1,))
            assert (again.isr_ids, again.leader) == ({1, 2}, 2)
            e1, e2, e3 = (n.registration.epoch or 0 for n in (n1, n2, n3))
            live = {1: e1, 2: e2, 3: e3}
            done = await _admitted_then_completed(view, again, pid, AlterIsr(
                2, again.leader_epoch, again.partition_epoch, (*again.isr, IsrMember(3, e3)), e2), live)
            assert (done.replicas, done.leader) == ((3, 2), 2)
            await eventually("the catalog has the move completed", lambda: _placed(catalog, pid, (3, 2)))
        finally:
            await n3.close()


async def test_a_one_copy_vgroup_moved_gets_a_state_that_lives_on(etcd1: EtcdCluster, tmp_path: Path) -> None:
    """Issue 26: the controller's catalog (a real one, fed from the stream, with ``replication``) holds d/0 of one
    copy on node 1: no state is made for it. A move to node 2 makes its first state with the move (node 1 leading
    in leader epoch 0, node 2 adding) and the ``place_vgroup`` record, in one transaction; the catalog then counts
    the vgroup replicated, so the passes that follow keep its state; the leader admits node 2 and the move completes
    (node 2 leads, leader epoch 1), the state kept after it. Fails on main (UNKNOWN_TOPIC_OR_PARTITION: checked)."""
    async with controller_and_one(etcd1, tmp_path) as (n1, n2):
        catalog = Catalog.open(tmp_path / "catalog.log")
        catalog.cluster, catalog.node_id, catalog.replication = True, 1, True
        db_id = new_db_id()
        catalog.apply({"op": "create_db", "name": "d", "id": db_id, "options": {**DB_DEFAULTS, "VGROUPS": 1},
                       "created_ms": 0, "nodes": [1], "replicas": [[1]]})
        pid = PartitionId(db_id, 0)

        view = PartitionStates(n1.session, KEYS)
        reconciler = Reconciler(view, n1.election, retry_delay=0.1, catalog=_fed(n1, catalog))
        n1.tasks.append(asyncio.create_task(reconciler.run()))

        async def passes(count: int) -> bool:
            return reconciler.passes >= count

        await eventually("a pass", lambda: passes(1))
        assert await view.read(pid) is None  # (one copy: no state)
        lease = n2.registration.lease_id
        assert lease is not None
        assert await within(ask(n2.session, KEYS, 2, lease, ReassignmentRequest(((pid, (2,)),)))) == {
            pid: ErrorCode.none}
        moving = await view.read(pid)
        assert moving is not None
        assert (moving.replicas, moving.adding, moving.removing, moving.leader, moving.leader_epoch) == (
            (2, 1), (2,), (1,), 1, 0)
        await eventually("the catalog has the move", lambda: _moving(catalog, pid))
        done_passes = reconciler.passes
        await eventually("more passes (one lease TTL apart at most)", lambda: passes(done_passes + 2))
        assert await view.read(pid) == moving and reconciler.deleted == 0  # (the catalog wants it now)
        e1, e2 = (n.registration.epoch or 0 for n in (n1, n2))
        done = await _admitted_then_completed(view, moving, pid, AlterIsr(
            1, 0, moving.partition_epoch, (IsrMember(1, e1), IsrMember(2, e2)), e1), {1: e1, 2: e2})
        assert (done.replicas, done.leader, done.leader_epoch, done.isr_ids) == ((2,), 2, 1, {2})
        await eventually("the catalog has the move completed", lambda: _placed(catalog, pid, (2,)))
        assert catalog.databases["d"].replicated(0) and await view.read(pid) == done


async def _moving(catalog: Catalog, pid: PartitionId) -> bool:
    vnode = catalog.replicated_vnodes().get(pid)
    return vnode is not None and vnode.adding == (2,)


def _fed(n1: Node, catalog: Catalog) -> Callable[[int], Awaitable[CatalogVnodes]]:
    """The controller's ``catalog(seq)``: ``catalog`` fed the stream's records up to ``seq`` read from etcd, then its
    vnodes."""

    async def at(seq: int) -> CatalogVnodes:
        _, kvs = await n1.session.get_prefix(KEYS.records)
        for kv in sorted(kvs, key=lambda kv: int(kv.key[len(KEYS.records):])):
            record_seq = int(kv.key[len(KEYS.records):])
            if catalog.shared_seq < record_seq <= seq:
                assert catalog.apply_shared(record_seq, json.loads(decode_record(kv.value)[1]))
        return catalog.controller_vnodes()

    return at


async def _registered(node: Node) -> bool:
    return node.registration.epoch is not None


async def _created(reconciler: Reconciler, count: int) -> bool:
    return reconciler.created == count


async def _placed(catalog: Catalog, pid: PartitionId, replicas: tuple[int, ...]) -> bool:
    return catalog.replicated_vnodes()[pid] == ReplicatedVnode(replicas, 1)


async def _admitted_then_completed(view: PartitionStates, moving: PartitionState, pid: PartitionId,
                                   proposal: AlterIsr, live: dict[int, int]) -> PartitionState:
    """The leader's ISR change ``proposal`` (admitting the adding replica, caught up) written, then the state once
    the controller completed the move (within 10 s)."""
    assert (await view.alter_isr(moving, pid, proposal, live)).error is None

    async def completed() -> bool:
        state = await view.read(pid)
        return state is not None and not state.moving

    await eventually("the move completed", completed, timeout=10)
    done = await view.read(pid)
    assert done is not None
    return done


def test_a_move_of_a_one_copy_vgroup_starts_from_its_first_state() -> None:
    """Issue 26: a vgroup of one copy (no state) that a request moves starts from the state ``first_states`` makes
    from the catalog (its replica leading in epoch 0, the only ISR member), then decided as any move: node 2 added,
    node 1 removing, node 1 still leading; a cancellation, a replica not registered, or a vgroup not of one copy
    gets no first state (answered as a partition with no state)."""
    solo, other, gone = PartitionId("d", 0), PartitionId("d", 1), PartitionId("d", 2)
    one_copy = {solo: ReplicatedVnode((1,), 1), other: ReplicatedVnode((1,), 1), gone: ReplicatedVnode((4,), 1)}
    live = {1: 10, 2: 20}
    request = ReassignmentRequest(((solo, (2,)), (other, None), (gone, (2,)), (PartitionId("e", 0), (2,))))
    made = first_states(request, {}, one_copy, live)
    assert made == {solo: PartitionState((1,), 1, 0, 0, (IsrMember(1, 10),), (), 1)}
    writes, answers = decide(request, made, live)
    assert writes == {solo: PartitionState((2, 1), 1, 0, 1, (IsrMember(1, 10),), (), 1, adding=(2,), removing=(1,))}
    assert answers == {solo: ErrorCode.none, other: ErrorCode.unknown_topic_or_partition,
                       gone: ErrorCode.unknown_topic_or_partition,
                       PartitionId("e", 0): ErrorCode.unknown_topic_or_partition}
    assert first_states(request, {solo: made[solo]}, one_copy, live) == {}  # (a state already: moved as it is)
