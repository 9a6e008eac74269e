"""The group coordinators' partitions over the nodes (walgate/cluster/coordinators.py, pure) and a node's view of
them over a real etcd (walgate/gateway/kafka/group_coordinators.py): N made once by the first node, the placement
decided once however many nodes ask at the same time, and what node 1's FindCoordinator and group APIs answer
(its handlers in process, as test_not_leader.py) when etcd is gone before and after the placement was read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cluster_support import joined_member
from etcd_cluster import EtcdCluster
from kio.schema.find_coordinator.v4 import request as find_v4
from kio.schema.heartbeat.v4 import request as heartbeat_v4

from tests.gateway.test_handlers_hardening import Node, call, serving
from walgate.cluster.coordinators import CoordinatorPlacement, decode_partitions
from walgate.cluster.model import ControlPlaneError
from walgate.cluster.placement import NoLiveNode
from walgate.gateway.cluster_member import ClusterMember
from walgate.gateway.kafka.group_coordinators import GroupCoordinators, cluster_partitions, refusal
from walgate.storage.coordinator_partitions import partition_for
from walgate.wire.errors import ErrorCode


def test_the_placement_balances_partitions_and_names_each_groups_node() -> None:
    placed = CoordinatorPlacement.decide(6, {1: "a", 2: "a", 3: "b"})
    assert placed.nodes == (1, 3, 2, 3, 1, 2)  # by count, then the rack used least, then the smallest id
    assert all(placed.owner(g) == placed.nodes[partition_for(g, 6)] for g in ("a", "group-1", "ü", ""))
    assert CoordinatorPlacement.decode(placed.encode(), 6) == placed
    with pytest.raises(NoLiveNode):
        CoordinatorPlacement.decide(4, {})


@pytest.mark.parametrize("value", [b"", b"{}", b'{"nodes": 3}', b'{"nodes": [1, "2"]}', b'{"nodes": [1, -2]}',
                                   b"\xff", b'{"nodes": [1, 2, 3]}'])
def test_a_placement_that_is_not_walgates_is_an_error(value: bytes) -> None:
    with pytest.raises(ControlPlaneError, match="placement"):
        CoordinatorPlacement.decode(value, 4)


@pytest.mark.parametrize("value", [b"", b"0", b"-1", b"x", b"1.5", "²".encode(), b"\xff"])
def test_a_number_of_partitions_that_is_not_walgates_is_an_error(value: bytes) -> None:
    with pytest.raises(ControlPlaneError, match="coordinator partitions"):
        decode_partitions(value)


@pytest.fixture
async def members(etcd1: EtcdCluster, tmp_path: Path) -> AsyncIterator[list[ClusterMember]]:
    """Nodes 1, 2 and 3 registered."""
    joined = [await joined_member(etcd1.spec, tmp_path / f"n{i}", i) for i in (1, 2, 3)]
    try:
        yield joined
    finally:
        for member in joined:
            await member.leave()


async def test_n_is_the_first_nodes_and_the_placement_is_decided_once(members: list[ClusterMember]) -> None:
    assert [await cluster_partitions(m, wanted) for m, wanted in zip(members, (6, 2, 50), strict=True)] == [6, 6, 6]
    views = [GroupCoordinators(m, 6) for m in members]
    await asyncio.gather(*(v.load() for v in views))
    assert [v.known for v in views] == [None, None, None], "nothing placed before a coordinator is looked for"
    placements = await asyncio.gather(*(v.placement() for v in views))  # three nodes deciding at once
    assert len(set(placements)) == 1 and sorted(set(placements[0].nodes)) == [1, 2, 3]
    again = GroupCoordinators(members[0], 6)
    await again.load()  # a restarted node reads it at start
    assert again.known == placements[0]
    group = next(g for g in (f"g{i}" for i in range(100)) if placements[0].owner(g) == 2)
    assert [await refusal(v, group) for v in views] == [ErrorCode.not_coordinator, ErrorCode.none,
                                                        ErrorCode.not_coordinator]
    assert await refusal(None, group) == ErrorCode.none, "a single node coordinates every group"


async def _find(node: Node, group: str) -> dict[str, Any]:
    answer = await call(node, 10, 4, find_v4.FindCoordinatorRequest(key_type=0, coordinator_keys=(group,)))
    return dict(answer["coordinators"][0])


async def _heartbeat(node: Node, group: str) -> int:
    answer = await call(node, 12, 4, heartbeat_v4.HeartbeatRequest(group_id=group, generation_id=1, member_id="m",
                                                                   group_instance_id=None))
    return int(answer["error_code"])


async def test_without_etcd_a_node_answers_from_the_placement_it_read(etcd1: EtcdCluster,
                                                                      members: list[ClusterMember],
                                                                      tmp_path: Path) -> None:
    partitions = await cluster_partitions(members[0], 4)
    placement = await GroupCoordinators(members[1], partitions).placement()  # node 2 looked a coordinator up
    read, unread = GroupCoordinators(members[0], partitions), GroupCoordinators(members[0], partitions)
    await read.load()
    assert [n.node_id for n in (await members[0].refresh()).nodes] == [1, 2, 3]  # node 1's view of the others
    own = next(g for g in (f"g{i}" for i in range(100)) if placement.owner(g) == 1)
    other = next(g for g in (f"g{i}" for i in range(100)) if placement.owner(g) == 2)
    async with serving(tmp_path / "n1", 9091, members[0]) as node1:
        etcd1.stop()
        node1.broker.coordinators = unread  # node 1 had not read the placement: it cannot name a coordinator
        found = await _find(node1, other)
        assert (found["node_id"], found["error_code"]) == (-1, ErrorCode.coordinator_not_available)
        assert "not available" in found["error_message"] and "etcd" in found["error_message"]
        assert await _heartbeat(node1, own) == ErrorCode.coordinator_not_available
        node1.broker.coordinators = read  # once read, the placement is kept: answered without etcd
        assert (await _find(node1, own))["node_id"] == 1
        found = await _find(node1, other)
        assert (found["node_id"], found["port"], found["error_code"]) == (2, 9092, ErrorCode.none)
        assert await _heartbeat(node1, other) == ErrorCode.not_coordinator
        assert await _heartbeat(node1, own) == ErrorCode.unknown_member_id  # its coordinator answers
