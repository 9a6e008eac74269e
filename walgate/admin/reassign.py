"""``walgate cluster reassign``: Kafka's kafka-reassign-partitions (rpk's ``cluster partitions move``), over
AlterPartitionReassignments and ListPartitionReassignments (KIP-455; :mod:`walgate.admin.kafka_calls`: PLAINTEXT
and SSL listeners).

``-p TOPIC/PARTITION:R1,R2,...`` (repeatable) moves a partition's replicas to those nodes (the first the preferred
leader), ``--cancel -p TOPIC/PARTITION`` cancels its move in progress, ``--list`` shows the moves in progress (all,
or ``--topic``'s). A move is answered once the controller wrote it; it completes as the new replicas catch up
(``--list`` shows it until then). One row per partition: ``moving`` (or ``cancelled``), or Kafka's error name; exit
code 1 when some partition was refused, as kafka-reassign-partitions fails.
"""

from __future__ import annotations

import argparse
import datetime

from kio.schema.alter_partition_reassignments.v1.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta

from walgate.admin.client import AdminError, UsageError, client_config
from walgate.admin.kafka_calls import KafkaCalls
from walgate.admin.output import print_json, print_table

__all__ = ["reassign"]


def reassign(args: argparse.Namespace) -> None:
    """``walgate cluster reassign (-p TOPIC/P:R1,R2 ... | --cancel -p TOPIC/P ... | --list [--topic T]) [--json]``."""
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=args.timeout))
    with KafkaCalls(args.bootstrap_server, client_config(args), args.timeout) as calls:
        if args.list:
            if args.moves:
                raise UsageError("--list takes no -p: use --topic")
            _list(calls, args, timeout)
            return
        if not args.moves:
            raise UsageError("name the partitions to move with -p TOPIC/PARTITION:R1,R2,... (or use --list)")
        if any((target is None) != args.cancel for _, _, target in args.moves):
            raise UsageError("-p takes TOPIC/PARTITION:R1,R2,... to move, TOPIC/PARTITION alone with --cancel")
        by_topic: dict[str, list[ReassignablePartition]] = {}
        for topic, partition, target in args.moves:
            by_topic.setdefault(topic, []).append(ReassignablePartition(
                partition_index=i32(partition), replicas=None if target is None else tuple(map(BrokerId, target))))
        answer = calls.call(AlterPartitionReassignmentsRequest(timeout=timeout, topics=tuple(
            ReassignableTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items())))
    if answer.error_code != 0:
        raise AdminError(f"reassignment refused: {answer.error_message or answer.error_code.name} "
                         f"({answer.error_code.name.upper()})")
    done = "cancelled" if args.cancel else "moving"
    rows = [{"topic": t.name, "partition": int(p.partition_index),
             "result": done if p.error_code == 0 else p.error_code.name.upper(), "message": p.error_message}
            for t in answer.responses for p in t.partitions]
    if args.json:
        print_json(rows)
    else:
        print_table(["TOPIC", "PARTITION", "RESULT", "MESSAGE"],
                    [[r["topic"], r["partition"], r["result"], r["message"] or ""] for r in rows])
    failed = sum(r["result"] != done for r in rows)
    if failed:
        raise AdminError(f"the reassignment was refused for {failed} partition(s)")


def _list(calls: KafkaCalls, args: argparse.Namespace, timeout: i32Timedelta) -> None:
    """Every move in progress (``--topic``: that topic's), asked of all, as kafka-reassign-partitions --list."""
    answer = calls.call(ListPartitionReassignmentsRequest(timeout=timeout, topics=None))
    if answer.error_code != 0:
        raise AdminError(f"cannot list reassignments: {answer.error_message or answer.error_code.name} "
                         f"({answer.error_code.name.upper()})")
    rows = [{"topic": t.name, "partition": int(p.partition_index), "replicas": [int(r) for r in p.replicas],
             "adding_replicas": [int(r) for r in p.adding_replicas],
             "removing_replicas": [int(r) for r in p.removing_replicas]}
            for t in sorted(answer.topics, key=lambda t: t.name) if args.topic in (None, t.name)
            for p in sorted(t.partitions, key=lambda p: p.partition_index)]
    if args.json:
        print_json(rows)
    else:
        print_table(["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
                    [[r["topic"], r["partition"], ",".join(map(str, r["replicas"])),
                      ",".join(map(str, r["adding_replicas"])), ",".join(map(str, r["removing_replicas"]))]
                     for r in rows])
