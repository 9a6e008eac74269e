"""A node's replication traffic (walgate/gateway/replication_traffic.py, KIP-73) over real catalog snapshots and a
fake clock: which vnodes its throttles hold back as leader and as follower (a replica in the ISR, or caught up, never;
a topic whose lists do not name this node, never), the rates from the node's own broker configs over the cluster
default, read again when the catalog changes, and the bytes counted (replication and reassignment)."""

from __future__ import annotations

import uuid

import pytest

from walgate.gateway.replication_traffic import ReplicationTraffic
from walgate.replication.partition import IsrMember, PartitionState
from walgate.storage.catalog import TopicDef
from walgate.storage.topics_snapshot import TopicsSnapshot

NODE = 2
DB, DB_ID = "kafka_moved", "0a1b"


def _snapshot(generation: int, topic_configs: dict[str, str], broker: dict[str, dict[str, str]]) -> TopicsSnapshot:
    topic = TopicDef("moved", "kafka", DB, "", False, "", str(uuid.uuid4()), 0, topic_configs)
    other = TopicDef("rows", "select", "power", "meters", False, "", str(uuid.uuid4()), 0, {})
    return TopicsSnapshot(generation, {"moved": topic, "rows": other}, {}, frozenset({DB, "power"}),
                          {("broker", name): configs for name, configs in broker.items()})


def _state(isr: tuple[int, ...], adding: tuple[int, ...] = ()) -> PartitionState:
    return PartitionState((1, 2, 3), isr[0], 1, 1, tuple(IsrMember(r, 5) for r in isr), (), 1, adding=adding)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _traffic(snapshot: list[TopicsSnapshot], state: PartitionState | None = None) -> tuple[ReplicationTraffic, Clock]:
    clock = Clock()
    return ReplicationTraffic(NODE, lambda: snapshot[0], lambda db_id, vgroup: state, clock), clock


def test_the_leader_holds_back_only_a_replica_out_of_the_isr_of_a_throttled_vnode_over_the_rate() -> None:
    snapshot = [_snapshot(1, {"leader.replication.throttled.replicas": "0:2,1:3"},
                          {"2": {"leader.replication.throttled.rate": "1000"}})]
    traffic, clock = _traffic(snapshot)
    out, back = _state(isr=(2,)), _state(isr=(2, 1))  # (this node leads)
    assert not traffic.hold_leader(DB, 0, 1, out)  # (not over the rate yet)
    traffic.sent(DB, 0, 1, out, 5000)
    assert traffic.leader.total == 5000 and traffic.counts.replication_out == 5000
    assert traffic.hold_leader(DB, 0, 1, out)
    assert traffic.hold_leader(DB, 0, 3, out)  # (3 is out of the ISR too)
    assert not traffic.hold_leader(DB, 0, 1, back)  # in the ISR: never throttled on the leader side
    assert not traffic.hold_leader(DB, 1, 1, out)  # 1:3 names partition 1 on node 3, not on this node
    assert not traffic.hold_leader("power", 0, 1, out)  # a database of TDengine topics takes no topic configs
    traffic.sent(DB, 1, 1, out, 700)  # not throttled here: counted, not recorded
    assert traffic.leader.total == 5000 and traffic.counts.replication_out == 5700
    clock.now += 5.0
    assert not traffic.hold_leader(DB, 0, 1, out)  # 5000 bytes over 5 s: at the rate


def test_the_follower_holds_back_a_throttled_vnode_not_caught_up_for_the_quotas_delay() -> None:
    snapshot = [_snapshot(1, {"follower.replication.throttled.replicas": "*"},
                          {"": {"follower.replication.throttled.rate": "1000"}})]
    traffic, clock = _traffic(snapshot, _state(isr=(1,), adding=(NODE,)))
    traffic.copied(DB, DB_ID, 0, 1500)
    assert traffic.counts.replication_in == traffic.counts.reassignment_in == traffic.follower.total == 1500
    assert traffic.hold_follower(DB, 0, in_sync=False) == 1.0  # (at most one window)
    assert traffic.hold_follower(DB, 0, in_sync=True) == 0.0
    clock.now += 0.7
    assert traffic.hold_follower(DB, 0, in_sync=False) == pytest.approx(0.8)  # until 1500 bytes are 1.5 s old
    clock.now += 0.8
    assert traffic.hold_follower(DB, 0, in_sync=False) == 0.0
    assert traffic.byte_rates() == (0.0, 1000.0)


def test_the_rates_are_the_nodes_own_over_the_cluster_default_and_follow_the_catalog() -> None:
    configs = {"leader.replication.throttled.replicas": "*", "follower.replication.throttled.replicas": "*"}
    snapshot = [_snapshot(1, configs, {})]
    traffic, _ = _traffic(snapshot, _state(isr=(1, 2)))
    out = _state(isr=(2,))
    traffic.sent(DB, 0, 3, out, 10**9)
    traffic.copied(DB, DB_ID, 0, 10**9)
    assert not traffic.hold_leader(DB, 0, 3, out) and traffic.hold_follower(DB, 0, False) == 0  # unlimited
    assert traffic.counts.reassignment_in == 0  # (this node is not an adding replica)
    snapshot[0] = _snapshot(2, configs, {"": {"leader.replication.throttled.rate": "1",
                                              "follower.replication.throttled.rate": "1"},
                                         "2": {"follower.replication.throttled.rate": str(10**10)}})
    assert traffic.hold_leader(DB, 0, 3, out)  # the cluster default, as the catalog now says
    assert traffic.hold_follower(DB, 0, False) == 0  # this node's own rate over it
    assert traffic.leader.bound == 1 and traffic.follower.bound == 10**10


def test_a_move_counts_the_bytes_answered_to_its_adding_replica() -> None:
    traffic, _ = _traffic([_snapshot(1, {}, {})])
    moving = _state(isr=(2, 1), adding=(3,))
    traffic.sent(DB, 0, 3, moving, 400)
    traffic.sent(DB, 0, 2, moving, 100)
    traffic.sent(DB, 0, 2, moving, 0)
    assert (traffic.counts.replication_out, traffic.counts.reassignment_out) == (500, 400)
    assert traffic.leader.total == 0  # (no list throttles it)
