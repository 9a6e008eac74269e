"""A replicated cluster's share-partition states fail over (issue 25, docs/plans/replication-wiring.md step 7
increment 6): a share-partition's leader persists its state in the group's ``__consumer_offsets`` partition (kept by
the group's coordinator: another node for one group, WriteShareGroupState; the leader itself for the other, killed
with it), acknowledging only once its in-sync replicas hold it; after the data partition's leader is killed -9 its
new leader reads the state (ReadShareGroupState, or locally) before it serves the partition: the real Java ``KafkaShareConsumer`` (kafka-clients 4.3, compat-tests/java/ShareWorker.java)
receives every record not acknowledged before the kill and none that was (real nodes and etcd).
"""

from __future__ import annotations

import signal
from contextlib import ExitStack
from pathlib import Path
from typing import NamedTuple

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from etcd_cluster import EtcdCluster
from serve_support import create_topics, eventually, no_traceback, produce_to
from test_serve_cluster_coordinators import _find
from test_serve_cluster_replicated_topics import bootstrap, described, three_nodes
from test_serve_cluster_shares import TOPIC, _java, _records  # (its _java consumes its TOPIC)

from livewalgate import WalgateServer
from walgate.wire.errors import ErrorCode

COUNT = 30


def _groups(servers: str, leader: int) -> tuple[str, str]:
    """Two share group ids with ``share.auto.offset.reset=earliest``: one coordinated (the leader of its
    ``__consumer_offsets`` partition) by another node than ``leader``, one by ``leader``."""
    admin = AdminClient({"bootstrap.servers": servers})
    candidates = [f"sf-{n}" for n in range(30)]
    coordinators: dict[str, int] = {}

    def named() -> bool:
        """Every candidate's coordinator named by FindCoordinator v4 through the first node (COORDINATOR_NOT_AVAILABLE
        until ``__consumer_offsets`` is made and led). Not librdkafka's DescribeConsumerGroups: in two CI runs its
        process aborted inside librdkafka here (``Fatal Python error: Aborted``), which hung the whole run."""
        port = int(servers.split(",")[0].rsplit(":", 1)[1])
        for group, node_id, _port, error in _find(port, *(g for g in candidates if g not in coordinators)):
            if error == ErrorCode.none:
                coordinators[group] = node_id
        return len(coordinators) == len(candidates)

    eventually("the candidate groups' coordinators are named", named)
    apart = next(g for g in candidates if coordinators[g] not in (-1, leader))
    together = next(g for g in candidates if coordinators[g] == leader)
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, g, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
            for g in (apart, together)]).values():
        future.result(30)
    return apart, together


class Killed(NamedTuple):
    """What :func:`consumed_then_killed` left: the three nodes (node ``i + 1`` is ``nodes[i]``), those still running,
    the two groups, the values each acknowledged, and every value produced."""

    nodes: list[WalgateServer]
    survivors: list[WalgateServer]
    groups: tuple[str, str]
    acknowledged: list[set[str]]
    values: list[bytes]


def consumed_then_killed(stack: ExitStack, etcd: EtcdCluster, tmp_path: Path) -> Killed:
    """Three replicated nodes, ``TOPIC`` of one partition of replication factor 3 with :data:`COUNT` records, two
    share groups (:func:`_groups`) whose Java ``KafkaShareConsumer`` each acknowledged 10 to 14 records through the
    partition's leader; then the leader killed -9 and another node leading the partition."""
    nodes = three_nodes(stack, etcd, tmp_path, "--override", "offsets.topic.num.partitions=3")
    servers = bootstrap(nodes)
    create_topics(servers, NewTopic(TOPIC, 1, 3))
    values = [b"v%d" % i for i in range(COUNT)]
    assert produce_to(nodes[0].kafka_port, TOPIC, {0: values}) == {0: list(range(COUNT))}
    leader = described(nodes[0], TOPIC)[0][0]
    groups = _groups(servers, leader)

    workers = [_java("ShareWorker.java", nodes[leader - 1].kafka_port, group, "--max-records", "10",
                     "--set", "max.poll.records=5", "--idle", "10", "--timeout", "60") for group in groups]
    # each record ACCEPTed and committed (commitSync) before its worker exited
    acknowledged = [{r["value"] for r in _records(w, timeout=90)} for w in workers]
    assert all(10 <= len(a) < COUNT for a in acknowledged), acknowledged
    victim = nodes[leader - 1]
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    survivors = [s for s in nodes if s is not victim]
    eventually("another node leads the partition", lambda: described(survivors[0], TOPIC)[0][0] not in
               (leader, -1))
    return Killed(nodes, survivors, groups, acknowledged, values)


def test_acknowledged_records_stay_acknowledged_after_the_share_partitions_leader_is_killed(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    """Two share groups over one partition: one coordinated by another node (its leader writes its state with
    WriteShareGroupState), one by the partition's leader itself (written locally; killed with it, its
    ``__consumer_offsets`` partition's new leader replays the state)."""
    with ExitStack() as stack:
        nodes, survivors, groups, acknowledged, values = consumed_then_killed(stack, etcd1, tmp_path)
        workers = [_java("ShareWorker.java", survivors[0].kafka_port, group, "--idle", "4", "--timeout", "60")
                   for group in groups]
        for group, worker, before in zip(groups, workers, acknowledged, strict=True):
            again = {r["value"] for r in _records(worker, timeout=90)}
            assert not again & before, f"{group}: no acknowledged record is delivered again"
            assert again == {v.decode() for v in values} - before, f"{group}: no record is lost"
        new = nodes[described(survivors[0], TOPIC)[0][0] - 1]
        for group in groups:
            assert f"share group '{group}': the state of 1 share-partition(s) read from node " in new.log(), \
                f"{group}: the new leader read the state"
        for s in survivors:
            no_traceback(s)
