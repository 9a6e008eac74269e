"""What node 1 answers for partitions placed on other nodes (docs/cluster.md, "Placement"): its Kafka handlers on a
real Engine, requests dispatched as the server does (tests.gateway.test_handlers_hardening.call), nodes 1 and 2
registered in a real etcd, node 3 never.

Topic ``events`` has partition 0 on node 1, partition 1 on node 2 (registered) and partition 2 on node 3 (not).
Metadata names leaders 1, 2 and -1 (LEADER_NOT_AVAILABLE) and lists brokers 1 and 2, also when it names no
leader (every live node, as Kafka's broker list); Produce (v10+) and Fetch
(v16+) answer NOT_LEADER_OR_FOLLOWER for partitions 1 and 2 with KIP-951's CurrentLeader (node 2, or -1 for node
3) and node 2's endpoint; ListOffsets answers NOT_LEADER_OR_FOLLOWER too; partition 0 is served."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cluster_support import joined_member
from etcd_cluster import EtcdCluster
from kio.schema.fetch.v16 import request as fetch_v16
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.produce.v10 import request as produce_v10

from tests.gateway.test_handlers_hardening import Node, call, serving
from walgate.storage import lines
from walgate.storage.engine import Engine
from walgate.wire import encode_batch
from walgate.wire.errors import ErrorCode
from walgate.wire.protocol import build_response

TOPIC = "events"
NOT_LEADER = ErrorCode.not_leader_or_follower


def _placed(data_dir: Path) -> None:
    """A data dir of node 1 whose topic ``TOPIC``'s partitions are placed on nodes 1, 2 and 3."""
    engine = Engine.open(data_dir, node_id=1)  # a single node's record, given the placement below
    engine.create_kafka_topic(TOPIC, 3, {})
    engine.close()
    catalog = data_dir / "catalog.log"
    records = [{**r, "nodes": [1, 2, 3]} if r.get("op") == "create_kafka_topic" else r
               for _, _, r in lines.scan(catalog.read_bytes()).records]
    catalog.write_bytes(b"".join(lines.encode(r) for r in records))


@pytest.fixture
async def node1(etcd1: EtcdCluster, tmp_path: Path) -> AsyncIterator[Node]:
    _placed(tmp_path / "n1")
    members = [await joined_member(etcd1.spec, tmp_path / "n1", 1), await joined_member(etcd1.spec, tmp_path / "n2", 2)]
    for _ in range(200):  # bounded: node 1's view of the membership takes node 2 in (re-read every ttl / 3)
        if [n.node_id for n in (await members[0].refresh()).nodes] == [1, 2]:
            break
        await asyncio.sleep(0.05)
    try:
        async with serving(tmp_path / "n1", 9091, members[0]) as served:
            yield served
    finally:
        for member in members:
            await member.leave()


def _by_partition(parts: Any, key: str) -> dict[int, dict[str, Any]]:
    return {p[key]: p for p in parts}


async def test_metadata_names_each_partitions_node_and_lists_every_live_node(node1: Node) -> None:
    request = metadata_v12.MetadataRequest(topics=(metadata_v12.MetadataRequestTopic(name=TOPIC, topic_id=None),),
                                           allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False)
    answer = await call(node1, 3, 12, request)
    assert [(b["node_id"], b["port"]) for b in answer["brokers"]] == [(1, 9091), (2, 9092)]
    parts = _by_partition(answer["topics"][0]["partitions"], "partition_index")
    assert [(p["error_code"], p["leader_id"], p["replica_nodes"], p["offline_replicas"]) for p in parts.values()] == [
        (ErrorCode.none, 1, [1], []), (ErrorCode.none, 2, [2], []),
        (ErrorCode.leader_not_available, -1, [3], [3])]
    no_topics = metadata_v12.MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False)
    answer = await call(node1, 3, 12, no_topics)
    assert answer["topics"] == [] and [b["node_id"] for b in answer["brokers"]] == [1, 2], "every live node"


async def test_produce_and_fetch_answer_not_leader_with_the_current_leader(node1: Node) -> None:
    batch = encode_batch(0, [1_700_000_000_000], [b"k"], [b"v"], [[]])
    request = produce_v10.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
        produce_v10.TopicProduceData(name=TOPIC, partition_data=tuple(
            produce_v10.PartitionProduceData(index=i, records=batch) for i in range(3))),))
    answer = await call(node1, 0, 10, request)
    parts = _by_partition(answer["responses"][0]["partition_responses"], "index")
    assert (parts[0]["error_code"], parts[0]["base_offset"]) == (ErrorCode.none, 0)
    assert "current_leader" not in parts[0]
    assert (parts[1]["error_code"], parts[1]["current_leader"]) == (NOT_LEADER, {"leader_id": 2, "leader_epoch": 0})
    assert "vgroup 1" in parts[1]["error_message"] and "on node 2" in parts[1]["error_message"]
    assert (parts[2]["error_code"], parts[2]["current_leader"]) == (NOT_LEADER, {"leader_id": -1, "leader_epoch": -1})
    assert answer["node_endpoints"] == [{"node_id": 2, "host": "127.0.0.1", "port": 9092, "rack": None}]
    built = build_response(0, 10, answer)  # kio's ProduceResponse v10, from Kafka's schema: the tagged fields are in it
    assert built.responses[0].partition_responses[1].current_leader.leader_id == 2
    assert [(n.node_id, n.port) for n in built.node_endpoints] == [(2, 9092)]

    request = fetch_v16.FetchRequest(max_wait=datetime.timedelta(0), min_bytes=1, topics=(fetch_v16.FetchTopic(
        topic_id=node1.engine.topic_id(TOPIC), partitions=tuple(
            fetch_v16.FetchPartition(partition=i, fetch_offset=0, partition_max_bytes=1 << 20) for i in range(3))),),
                                     forgotten_topics_data=())
    answer = await call(node1, 1, 16, request)
    parts = _by_partition(answer["responses"][0]["partitions"], "partition_index")
    assert parts[0]["error_code"] == ErrorCode.none and parts[0]["high_watermark"] == 1
    assert (parts[1]["error_code"], parts[1]["current_leader"]) == (NOT_LEADER, {"leader_id": 2, "leader_epoch": 0})
    assert (parts[2]["error_code"], parts[2]["current_leader"]) == (NOT_LEADER, {"leader_id": -1, "leader_epoch": -1})
    assert answer["node_endpoints"] == [{"node_id": 2, "host": "127.0.0.1", "port": 9092, "rack": None}]
    built = build_response(1, 16, answer)
    assert built.responses[0].partitions[1].current_leader.leader_id == 2
    assert [(n.node_id, n.port) for n in built.node_endpoints] == [(2, 9092)]

    request = list_offsets_v7.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
        list_offsets_v7.ListOffsetsTopic(name=TOPIC, partitions=tuple(
            list_offsets_v7.ListOffsetsPartition(partition_index=i, timestamp=-1) for i in range(3))),))
    answer = await call(node1, 2, 7, request)
    assert [p["error_code"] for p in answer["topics"][0]["partitions"]] == [ErrorCode.none, NOT_LEADER, NOT_LEADER]
