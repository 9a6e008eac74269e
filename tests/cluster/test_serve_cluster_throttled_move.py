"""A move throttled (KIP-73) in ``walgate serve``: three real ``walgate serve --cluster`` nodes with
``replication.enable=true`` over a real etcd (stopped by PID).

The confluent-kafka Admin sets ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` on
every broker (IncrementalAlterConfigs) and a topic's throttled-replica lists as ``kafka-reassign-partitions
--throttle`` does (the leaders' replicas, the one added), and DescribeConfigs reads them back as set (dynamic
broker configs, topic configs). Node 3 is moved out of the topic's partition, 1 MB is written, and moved back in:
its catch-up completes at a 500 kB/s throttle (its ISR whole again, bounded by the usual wait), node 3 serves every
value in order, node 3 counts the bytes it copied as an adding replica and its follower throttle's rate, the leader
its leader throttle's, and the controller the move back in it completed; no node logged a traceback. That the throttle
keeps the rate is checked where it can be without timing a loaded machine: tests/gateway/test_wal_fetch.py and
tests/replication/test_throttle.py."""

from __future__ import annotations

import urllib.request
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from etcd_cluster import EtcdCluster
from prometheus_client.parser import text_string_to_metric_families
from serve_support import create_topics, eventually, no_traceback, produce_to
from test_serve_cluster_reassignments import read_all, reassign
from test_serve_cluster_replicated_topics import described, three_nodes

from livewalgate import WalgateServer
from walgate.wire.errors import ErrorCode

TOPIC = "moved"  # (test_serve_cluster_reassignments' helpers move its partition 0)
RATE = 500_000
RATES = {"leader.replication.throttled.rate": str(RATE), "follower.replication.throttled.rate": str(RATE)}
LISTS = {"leader.replication.throttled.replicas": "0:1,0:2", "follower.replication.throttled.replicas": "0:3"}
DYNAMIC_BROKER_CONFIG, TOPIC_CONFIG = 2, 1  # (DescribeConfigs' config sources)


def metric(server: WalgateServer, name: str) -> float:
    with urllib.request.urlopen(server.http_url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def _set(admin: AdminClient, resource_type: ResourceType, name: str, configs: dict[str, str]) -> None:
    resource = ConfigResource(resource_type, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)  # (one BROKER resource a call)


def _described(admin: AdminClient, resource_type: ResourceType, name: str, keys: dict[str, str]) -> dict[str, tuple[
        str | None, int]]:
    resource = ConfigResource(resource_type, name)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {k: (entries[k].value, int(entries[k].source)) for k in keys}


def test_a_throttled_move_completes_and_its_throttle_round_trips(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        n1, n2, n3 = three_nodes(stack, etcd1, tmp_path)
        servers = f"127.0.0.1:{n1.kafka_port}"
        create_topics(servers, NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"}))
        eventually("three in sync", lambda: described(n2, TOPIC)[0][2] == [1, 2, 3])
        admin = AdminClient({"bootstrap.servers": servers})
        for node in (1, 2, 3):
            _set(admin, ResourceType.BROKER, str(node), RATES)
        _set(admin, ResourceType.TOPIC, TOPIC, LISTS)
        for node in (1, 3):
            assert _described(admin, ResourceType.BROKER, str(node), RATES) == {
                k: (v, DYNAMIC_BROKER_CONFIG) for k, v in RATES.items()}
        assert _described(admin, ResourceType.TOPIC, TOPIC, LISTS) == {k: (v, TOPIC_CONFIG) for k, v in LISTS.items()}

        assert reassign(n2.kafka_port, [1, 2]) == (ErrorCode.none, ErrorCode.none)  # in sync: completes at once
        eventually("replicas 1 and 2", lambda: described(n3, TOPIC)[0][1:] == ([1, 2], [1, 2]))
        values = [b"%04d" % i + b"v" * 10_000 for i in range(100)]
        produce_to(n1.kafka_port, TOPIC, {0: values})
        leader = {1: n1, 2: n2}[described(n1, TOPIC)[0][0]]
        assert reassign(n2.kafka_port, [1, 2, 3]) == (ErrorCode.none, ErrorCode.none)
        eventually("node 3 back in sync", lambda: described(n1, TOPIC)[0][1:] == ([1, 2, 3], [1, 2, 3]))

        assert read_all(n3.kafka_port, 100) == values
        assert metric(n3, "kafka_server_brokertopicmetrics_reassignmentbytesin_total") >= 1_000_000
        assert metric(n3, "kafka_server_followerreplication_byte_rate") > 0
        assert metric(leader, "kafka_server_leaderreplication_byte_rate") > 0
        assert metric(leader, "kafka_server_brokertopicmetrics_reassignmentbytesout_total") >= 1_000_000
        eventually("the move back completed", lambda: sum(  # (the move out, in sync when asked, was written done)
            metric(n, "walgate_controller_reassignments_completed_total") for n in (n1, n2, n3)) >= 1)
        for server in (n1, n2, n3):
            no_traceback(server)
