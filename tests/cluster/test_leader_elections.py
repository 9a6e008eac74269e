"""Leader elections asked of the controller through etcd (ElectLeaders' path: walgate/cluster/elections.py) and the
controller's preferred-leader rebalance, on real etcd with in-process nodes: the node asked is not the controller,
the controller writes (fenced), a request nobody answers is withdrawn, the rebalance honours its percentage."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cluster_support import KEYS, Node, create_states, eventually, within
from etcd_cluster import EtcdCluster
from test_partition_states import controller_and_one

from walgate.cluster.elections import ElectionRequest, ask, decode_request, encode_request
from walgate.cluster.partition_codec import PartitionId
from walgate.cluster.partition_states import PartitionStates, Reconciler
from walgate.replication.elections import ElectionType
from walgate.replication.partition import NO_LEADER, IsrMember, PartitionState
from walgate.wire.errors import ErrorCode

PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN


def test_a_request_round_trips_and_damage_is_refused() -> None:
    for request in (ElectionRequest(PREFERRED, ()), ElectionRequest(UNCLEAN, (PartitionId("d", 0), PartitionId("e", 3)))):
        assert decode_request(encode_request(request)) == request
    for damaged in (b"", b"[]", b'{"type": 2, "partitions": []}', b'{"type": 0, "partitions": null}', b'{"type": 0, "partitions": [["d"]]}',
                    b'{"type": 0, "partitions": [["d", "0"]]}', b'{"type": 0}'):
        with pytest.raises(Exception, match="not walgate's"):
            decode_request(damaged)


def _run(reconciler: Reconciler, node: Node) -> None:
    node.tasks.append(asyncio.create_task(reconciler.run()))


async def test_elections_asked_of_another_node_are_made_by_the_controller(etcd1: EtcdCluster, tmp_path: Path) -> None:
    async with controller_and_one(etcd1, tmp_path) as (n1, n2):
        e1, e2 = n1.registration.epoch or 0, n2.registration.epoch or 0
        both = (IsrMember(1, e1), IsrMember(2, e2))
        moved, leads, behind, offline = (PartitionId("d", v) for v in range(4))
        await create_states(n1, {
            moved: PartitionState((1, 2), 2, 3, 0, both, (), 1),  # preferred 1 in sync: moved back
            leads: PartitionState((2, 1), 2, 0, 0, both, (), 1),  # preferred 2 leads: not needed
            behind: PartitionState((1, 2), 2, 0, 0, (IsrMember(2, e2),), (), 1),  # preferred 1 out of sync
            offline: PartitionState((3, 2), 3, 0, 0, (IsrMember(3, 1),), (), 1),  # its only ISR member is gone
        })
        reconciler = Reconciler(PartitionStates(n1.session, KEYS), n1.election, retry_delay=0.1)
        _run(reconciler, n1)
        lease = n2.registration.lease_id
        assert lease is not None
        missing = PartitionId("gone", 0)
        named = (moved, leads, behind, offline, missing)
        answers = await within(ask(n2.session, KEYS, 2, lease, ElectionRequest(PREFERRED, named)))
        assert answers == {moved: ErrorCode.none, leads: ErrorCode.election_not_needed,
                           behind: ErrorCode.preferred_leader_not_available,
                           offline: ErrorCode.preferred_leader_not_available,
                           missing: ErrorCode.preferred_leader_not_available}
        states = await reconciler.states.read_all()
        assert (states[moved].leader, states[moved].leader_epoch, states[moved].isr) == (1, 4, both)
        assert states[offline].leader == NO_LEADER  # (the reconciliation fenced 3 out first)
        again = await within(ask(n2.session, KEYS, 2, lease, ElectionRequest(PREFERRED, (moved,))))
        assert again == {moved: ErrorCode.election_not_needed}
        unclean = await within(ask(n2.session, KEYS, 2, lease, ElectionRequest(UNCLEAN, (offline, moved))))
        assert unclean == {offline: ErrorCode.none, moved: ErrorCode.election_not_needed}
        after = await reconciler.states.read_all()
        assert (after[offline].leader, after[offline].isr) == (2, (IsrMember(2, e2),))
        assert reconciler.unclean_elections == 1
        none_left = await n2.session.get_prefix(KEYS.root + b"elections/")
        assert none_left[1] == []  # requests deleted by the controller, outcomes by the node asked


async def test_a_request_no_controller_answers_is_withdrawn(etcd1: EtcdCluster, tmp_path: Path) -> None:
    async with controller_and_one(etcd1, tmp_path) as (_, n2):  # (no reconciliation runs)
        lease = n2.registration.lease_id
        assert lease is not None
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ask(n2.session, KEYS, 2, lease, ElectionRequest(PREFERRED, (PartitionId("d", 0),))), 0.5)
        assert (await n2.session.get_prefix(KEYS.elections))[1] == []


async def test_the_rebalance_moves_leaders_back_above_the_imbalance_percentage_only(etcd1: EtcdCluster,
                                                                                    tmp_path: Path) -> None:
    async with controller_and_one(etcd1, tmp_path) as (n1, n2):
        e1, e2 = n1.registration.epoch or 0, n2.registration.epoch or 0
        both = (IsrMember(1, e1), IsrMember(2, e2))
        # node 1 prefers four partitions, one led by node 2: 25%
        states = {PartitionId("d", v): PartitionState((1, 2), 1, 0, 0, both, (), 1) for v in range(3)}
        elsewhere = PartitionId("d", 3)
        states[elsewhere] = PartitionState((1, 2), 2, 0, 0, both, (), 1)
        await create_states(n1, states)
        view = PartitionStates(n1.session, KEYS)
        patient = Reconciler(view, n1.election, retry_delay=0.1, rebalance_every=(0.2, 25))
        for _ in range(3):  # 25% is not above 25: nothing moves, however often it checks
            await patient.reconcile_once()
            await asyncio.sleep(0.25)
        assert (await view.read(elsewhere)).leader == 2  # type: ignore[union-attr]
        eager = Reconciler(view, n1.election, retry_delay=0.1, rebalance_every=(0.2, 20))
        _run(eager, n1)

        async def moved_back() -> bool:
            state = await view.read(elsewhere)
            return state is not None and state.leader == 1

        await eventually("the preferred leader back", moved_back, timeout=10)
        assert eager.unclean_elections == 0
