"""Share groups' administration (KIP-932, issue 27) through real admin clients against walgate: the Java Admin of
kafka-clients 4.3 (``listGroups`` of share groups, ``listShareGroupOffsets``, ``alterShareGroupOffsets``,
``deleteShareGroupOffsets``, ``deleteShareGroups``) and confluent-kafka's AdminClient (``list_groups``, ListGroups
v0, lists share groups, ``list_consumer_groups`` asks for consumer and classic groups only, as against Kafka;
``delete_consumer_groups`` deletes a share group too), with confluent-kafka ``ShareConsumer`` workers consuming:

* offsets of a group that consumed are its share-partition start offsets, with the lag of what is left;
* a group with a live member refuses alter, delete-offsets and delete (GroupNotEmptyException, NON_EMPTY_GROUP);
* an altered start offset is where the next worker starts (records below it are not delivered again, those from it
  are), and deleted offsets start the group over (``share.auto.offset.reset=earliest``);
* an empty share group is listed (type Share, state Empty) and deleted, with its state.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from test_share_groups import bootstrap, create_topic, drain, from_earliest, polled, worker

from coordinator_admin import deleted_groups
from livewalgate import WalgateServer, running_walgate


@pytest.fixture
def server(tmp_path: Path) -> Iterator[WalgateServer]:
    with running_walgate(tmp_path / "run") as s:
        yield s


def admin(java: Any, server: WalgateServer, *ops: list[str]) -> list[list[dict[str, Any]]]:
    """The results of each operation, run in order by one Java Admin (one JVM: they take seconds to start)."""
    argv = [a for op in ops for a in ["--", *op]][1:]
    out: list[list[dict[str, Any]]] = []
    for line in java("ShareGroupOffsetsAdmin.java", bootstrap(server), *argv).json_lines():
        if "op" in line:
            out.append([])
        else:
            out[-1].append(line)
    return out


def produce(server: WalgateServer, topic: str, partitions: int, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap(server)})
    for i in range(first, first + count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def consumed(server: WalgateServer, group: str, topic: str, want: int) -> list[tuple[int, int]]:
    """(partition, offset) of the records one worker of ``group`` accepts until ``want``; the worker closes."""
    consumer = worker(server, group, topic, **{"share.acknowledgement.mode": "explicit"})
    got = sorted((m.partition(), m.offset()) for m in drain(consumer, want))
    consumer.close()
    return got


def test_java_admin_lists_alters_and_deletes_share_group_offsets(server: WalgateServer, java: Any) -> None:
    create_topic(server, "jq", 2, 10)  # offsets 0..4 in each partition
    from_earliest(server, "jg")
    assert len(consumed(server, "jg", "jq", 10)) == 10
    produce(server, "jq", 2, 10, 4)  # offsets 5, 6 in each
    assert admin(java, server, ["offsets", "jg"], ["list"]) == [
        [{"tp": "jq:0", "start": 5, "lag": 2}, {"tp": "jq:1", "start": 5, "lag": 2}],
        [{"group": "jg", "type": "Share", "state": "Empty"}]]

    live = worker(server, "jg", "jq", **{"share.acknowledgement.mode": "explicit"})
    try:
        polled(live, 1.0)  # joins the group
        assert admin(java, server, ["list"], ["alter", "jg", "jq:0=1"], ["delete-offsets", "jg", "jq"],
                     ["delete", "jg"]) == [
            [{"group": "jg", "type": "Share", "state": "Stable"}],
            [{"item": "jq:0", "error": "GroupNotEmptyException"}],
            [{"item": "jq", "error": "GroupNotEmptyException"}],
            [{"item": "jg", "error": "GroupNotEmptyException"}]]
    finally:
        live.close()  # what it held goes back

    assert admin(java, server, ["alter", "jg", "jq:0=1", "jq:9=0"], ["alter", "nope", "jq:0=1"],
                 ["offsets", "jg", "jq:0"]) == [
        [{"item": "jq:0"}, {"item": "jq:9", "error": "UnknownTopicOrPartitionException"}],
        [{"item": "jq:0", "error": "GroupIdNotFoundException"}],
        [{"tp": "jq:0", "start": 1, "lag": 6}]]
    again = consumed(server, "jg", "jq", 8)
    assert again == [(0, o) for o in range(1, 7)] + [(1, 5), (1, 6)], again  # p0 from 1 again, p1 where it was

    assert admin(java, server, ["delete-offsets", "jg", "jq", "nope"], ["offsets", "jg"]) == [
        [{"item": "jq"}, {"item": "nope", "error": "UnknownTopicOrPartitionException"}], []]
    assert len(consumed(server, "jg", "jq", 14)) == 14  # earliest again: every record

    assert admin(java, server, ["delete", "jg", "nope"], ["list"], ["list", "all"]) == [
        [{"item": "jg"}, {"item": "nope", "error": "GroupIdNotFoundException"}], [], []]


def test_confluent_admin_lists_and_deletes_share_groups(server: WalgateServer) -> None:
    create_topic(server, "cq", 1, 4)
    from_earliest(server, "cg")
    assert len(consumed(server, "cg", "cq", 4)) == 4
    client = AdminClient({"bootstrap.servers": bootstrap(server)})
    assert client.list_consumer_groups().result(30).valid == []  # it asks for consumer and classic groups
    assert [g.id for g in client.list_groups(timeout=30)] == ["cg"]  # ListGroups v0: every group
    live = worker(server, "cg", "cq")
    try:
        polled(live, 1.0)
        refused = deleted_groups(bootstrap(server), ["cg"], 30)["cg"]
        assert isinstance(refused, KafkaException) and refused.args[0].name() == "NON_EMPTY_GROUP"
    finally:
        live.close()
    assert deleted_groups(bootstrap(server), ["cg"], 30) == {"cg": None}
    assert client.list_groups(timeout=30) == []
