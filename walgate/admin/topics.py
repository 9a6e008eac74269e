"""``walgate topic list|describe|create|delete|alter-config``: Kafka's kafka-topics and kafka-configs for topics,
over Metadata, ListOffsets, CreateTopics, DeleteTopics, DescribeConfigs and IncrementalAlterConfigs.

Every TDengine topic and Kafka-native topic of the node is listed; create, delete and alter-config act on what
walgate lets a Kafka admin change (Kafka-native topics). An unknown topic is an error, never an empty answer.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from walgate.admin.client import Connection, UsageError, connect, result
from walgate.admin.output import note, print_json, print_table

__all__ = ["alter_config", "create_topics", "delete_topics", "describe_topics", "list_topics"]


def list_topics(args: argparse.Namespace) -> None:
    """``walgate topic list``: every topic with its partition count and replication factor."""
    conn = connect(args)
    topics = [
        {"topic": name, "partitions": len(meta.partitions),
         "replication_factor": min((len(p.replicas) for p in meta.partitions.values()), default=0)}
        for name, meta in sorted(conn.metadata.topics.items())
        if meta.error is None
    ]
    if args.json:
        print_json(topics)
    else:
        print_table(["TOPIC", "PARTITIONS", "REPLICAS"], [list(t.values()) for t in topics])


def _describe_one(conn: Connection, topic: str) -> dict[str, Any]:
    partitions = conn.partitions(topic)
    keys = [(topic, p) for p in partitions]
    start, end = conn.offsets(keys, OffsetSpec.earliest()), conn.offsets(keys, OffsetSpec.latest())
    resource = ConfigResource(ResourceType.TOPIC, topic)
    (future,) = conn.admin.describe_configs([resource], request_timeout=conn.timeout).values()
    configs: dict[str, ConfigEntry] = result(future, f"cannot describe the configs of topic '{topic}'", conn.timeout)
    meta = conn.metadata.topics[topic].partitions
    return {
        "topic": topic,
        "partitions": [
            {"partition": p, "leader": meta[p].leader, "replicas": meta[p].replicas, "isr": meta[p].isrs,
             "log_start_offset": start[topic, p], "log_end_offset": end[topic, p],
             "records": end[topic, p] - start[topic, p]}
            for p in partitions
        ],
        "configs": {
            name: {"value": entry.value, "source": ConfigSource(entry.source).name, "default": entry.is_default}
            for name, entry in sorted(configs.items())
        },
    }


def describe_topics(args: argparse.Namespace) -> None:
    """``walgate topic describe``: per partition the leader, replicas, log start and end offsets; the configs."""
    conn = connect(args)
    described = [_describe_one(conn, topic) for topic in args.topics]
    if args.json:
        print_json(described)
        return
    for topic in described:
        print_table(
            ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "LOG-END-OFFSET", "RECORDS"],
            ([p["partition"], p["leader"], ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])),
              p["log_start_offset"], p["log_end_offset"], p["records"]] for p in topic["partitions"]),
            title=f"topic {topic['topic']}: {len(topic['partitions'])} partition(s)",
        )
        print_table(
            ["CONFIG", "VALUE", "SOURCE"],
            ([name, c["value"], c["source"]] for name, c in topic["configs"].items()),
        )


def create_topics(args: argparse.Namespace) -> None:
    """``walgate topic create``: CreateTopics, one topic after the other as the server answers."""
    conn = connect(args)
    new = [NewTopic(t, num_partitions=args.partitions, replication_factor=args.replication_factor, config=dict(args.config))
           for t in args.topics]
    futures = conn.admin.create_topics(new, request_timeout=conn.timeout, operation_timeout=conn.timeout)
    for topic, future in futures.items():
        result(future, f"cannot create topic '{topic}'", conn.timeout)
        note(f"Created topic {topic}.")


def delete_topics(args: argparse.Namespace) -> None:
    """``walgate topic delete``: DeleteTopics, after checking that every named topic exists."""
    conn = connect(args)
    for topic in args.topics:
        conn.partitions(topic)  # unknown → AdminError before anything is deleted
    futures = conn.admin.delete_topics(args.topics, request_timeout=conn.timeout, operation_timeout=conn.timeout)
    for topic, future in futures.items():
        result(future, f"cannot delete topic '{topic}'", conn.timeout)
        note(f"Deleted topic {topic}.")


def alter_config(args: argparse.Namespace) -> None:
    """``walgate topic alter-config``: IncrementalAlterConfigs with SET and DELETE (back to the default) operations."""
    sets = dict(args.set)
    if not sets and not args.delete:
        raise UsageError("nothing to alter: give --set KEY=VALUE and/or --delete KEY")
    if both := sets.keys() & set(args.delete):
        raise UsageError(f"both set and deleted: {', '.join(sorted(both))}")
    conn = connect(args)
    conn.partitions(args.topic)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in args.delete]
    resource = ConfigResource(ResourceType.TOPIC, args.topic, incremental_configs=entries)
    (future,) = conn.admin.incremental_alter_configs([resource], request_timeout=conn.timeout).values()
    result(future, f"cannot alter the configs of topic '{args.topic}'", conn.timeout)
    changes = [f"{k}={v}" for k, v in sets.items()] + [f"{k} reset to its default" for k in args.delete]
    note(f"Altered configs of topic {args.topic}: {', '.join(changes)}.")
