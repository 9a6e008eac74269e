"""Replica moves asked of the controller through etcd (AlterPartitionReassignments' path:
walgate/cluster/reassignments.py), on real etcd with in-process nodes: the node asked is not the controller, the
controller writes the move (fenced), the leader's ISR change admits the adding replica and the controller's next
pass completes the move; refusals and a cancellation; each replica change appends its ``place_vgroup`` catalog
record in the transaction that writes the state."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from cluster_support import KEYS, create_states, eventually, within
from etcd_cluster import EtcdCluster
from test_partition_states import controller_and_one

from walgate.cluster.elections import ElectionRequestDamaged, ask, decode_request, encode_request
from walgate.cluster.model import decode_record
from walgate.cluster.partition_codec import PartitionId
from walgate.cluster.partition_states import PartitionStates, Reconciler
from walgate.cluster.reassignments import ReassignmentRequest
from walgate.replication.partition import AlterIsr, IsrMember, PartitionState
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
        admitted = await view.alter_isr(moving, moved, AlterIsr(1, 0, moving.partition_epoch,
                                                                 (IsrMember(1, e1), IsrMember(2, e2)), e1), live)
        assert admitted.error is None

        async def completed() -> bool:
            state = await view.read(moved)
            return state is not None and not state.moving

        await eventually("the move completed", completed, timeout=10)
        done = await view.read(moved)
        assert done is not None
        assert (done.replicas, done.isr, done.leader, done.leader_epoch) == ((2,), (IsrMember(2, e2),), 2, 1)
        assert reconciler.moves_completed == 1
        assert (await n2.session.get_prefix(KEYS.root + b"elections/"))[1] == []
        _, records = await n2.session.get_prefix(KEYS.records)
        placed = [json.loads(decode_record(kv.value)[1]) for kv in sorted(records, key=lambda kv: int(kv.key[len(
            KEYS.records):]))]
        assert [(r["op"], r["vgroup"], r["replicas"]) for r in placed] == [
            ("place_vgroup", 0, [2, 1]), ("place_vgroup", 3, [1, 2]), ("place_vgroup", 3, [1]),
            ("place_vgroup", 0, [2])]  # begun (the union, target first), cancelled, completed
        assert (await n2.session.get(KEYS.seq)).value == b"4"
