"""``walgate share-group list|describe|reset-offsets|delete``: Kafka's kafka-share-groups, over ListGroups (type
``share``), ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets and
DeleteGroups (:mod:`walgate.admin.kafka_calls`: PLAINTEXT and SSL listeners), and ListOffsets for the targets of a
reset (confluent-kafka).

``describe`` shows per partition the share-partition start offset (where the group's next records come from) and
the lag (records from it not yet acknowledged), or with ``--members`` each member and its assignment.
``reset-offsets`` computes a plan and only prints it unless ``--execute`` is given; like Kafka it refuses while the
group has members (the server answers NON_EMPTY_GROUP) and keeps new offsets within each partition's
``[log start, log end]``. ``delete`` deletes whole groups, or with ``--topic`` the group's offsets of those topics.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka.admin import OffsetSpec
from kio.schema.alter_share_group_offsets.v0.request import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsRequestPartition,
    AlterShareGroupOffsetsRequestTopic,
)
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_share_group_offsets.v0.request import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequestTopic,
)
from kio.schema.describe_share_group_offsets.v1.request import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequestGroup,
    DescribeShareGroupOffsetsRequestTopic,
)
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from walgate.admin.client import AdminError, Connection, UsageError, client_config, connect
from walgate.admin.kafka_calls import KafkaCalls
from walgate.admin.output import note, print_json, print_table

__all__ = ["delete_share_groups", "describe_share_groups", "list_share_groups", "reset_share_offsets"]

Partition = tuple[str, int]


def _calls(args: argparse.Namespace) -> KafkaCalls:
    return KafkaCalls(args.bootstrap_server, client_config(args), args.timeout)


def _error(code: Any, message: str | None) -> str:
    return f"{message or code.name.replace('_', ' ').lower()} ({code.name.upper()})"


def list_share_groups(args: argparse.Namespace) -> None:
    """``walgate share-group list``: every share group with its state."""
    with _calls(args) as calls:
        answer = calls.call(ListGroupsRequest(states_filter=(), types_filter=("share",)))
    if answer.error_code != 0:
        raise AdminError(f"cannot list share groups: {_error(answer.error_code, None)}")
    groups = [{"group": g.group_id, "state": g.group_state} for g in sorted(answer.groups, key=lambda g: g.group_id)]
    if args.json:
        print_json(groups)
    else:
        print_table(["GROUP", "STATE"], [list(g.values()) for g in groups])


def _offsets(calls: KafkaCalls, group: str, partitions: list[Partition] | None = None) -> dict[Partition, Any]:
    """The group's share-partitions (all, or ``partitions``): (topic, partition) -> the response's partition."""
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
        topics = tuple(DescribeShareGroupOffsetsRequestTopic(topic_name=TopicName(t), partitions=tuple(map(i32, ps)))
                       for t, ps in by_topic.items())
    answer = calls.call(DescribeShareGroupOffsetsRequest(groups=(
        DescribeShareGroupOffsetsRequestGroup(group_id=GroupId(group), topics=topics),)), calls.coordinator(group))
    [g] = answer.groups
    if g.error_code != 0:
        raise AdminError(f"cannot describe the offsets of share group '{group}': {_error(g.error_code, g.error_message)}")
    return {(t.topic_name, p.partition_index): p for t in g.topics for p in t.partitions}


def _describe(calls: KafkaCalls, group: str) -> Any:
    answer = calls.call(ShareGroupDescribeRequest(group_ids=(GroupId(group),), include_authorized_operations=False),
                        calls.coordinator(group))
    [g] = answer.groups
    if g.error_code != 0:
        if g.error_code.name == "group_id_not_found":
            raise AdminError(f"share group '{group}' does not exist")
        raise AdminError(f"cannot describe share group '{group}': {_error(g.error_code, g.error_message)}")
    return g


def describe_share_groups(args: argparse.Namespace) -> None:
    """``walgate share-group describe``: per partition the start offset and lag, or (``--members``) the members."""
    rows: list[dict[str, Any]] = []
    with _calls(args) as calls:
        for group in args.groups:
            described = _describe(calls, group)
            if args.members:
                rows += [{"group": group, "member": m.member_id, "host": m.client_host, "client_id": m.client_id,
                          "assignment": sorted(f"{t.topic_name}:{p}" for t in m.assignment.topic_partitions
                                               for p in t.partitions)} for m in described.members]
            else:
                rows += [{"group": group, "state": described.group_state, "topic": topic, "partition": partition,
                          "start_offset": None if p.start_offset < 0 else p.start_offset,
                          "lag": None if p.lag < 0 else p.lag}
                         for (topic, partition), p in sorted(_offsets(calls, group).items())]
                if not any(r["group"] == group for r in rows):
                    note(f"Share group '{group}' ({described.group_state}) has no offsets.")
    if args.json:
        print_json(rows)
    elif args.members:
        print_table(["GROUP", "MEMBER-ID", "HOST", "CLIENT-ID", "ASSIGNMENT"],
                    [[r["group"], r["member"], r["host"], r["client_id"], ",".join(r["assignment"])] for r in rows])
    else:
        print_table(["GROUP", "STATE", "TOPIC", "PARTITION", "START-OFFSET", "LAG"], [list(r.values()) for r in rows])


def _targets(conn: Connection, args: argparse.Namespace, current: dict[Partition, Any]) -> dict[Partition, int]:
    """The new start offset of each partition to reset, within its ``[log start, log end]``."""
    if args.all_topics:
        keys = sorted(current)
    else:
        keys = sorted({(topic, p) for topic, ps in args.topic for p in (ps if ps is not None else conn.partitions(topic))})
    start, end = conn.offsets(keys, OffsetSpec.earliest()), conn.offsets(keys, OffsetSpec.latest())
    if args.to_datetime is not None:
        at = conn.offsets(keys, OffsetSpec.for_timestamp(args.to_datetime))
        wanted = {k: at[k] if at[k] >= 0 else end[k] for k in keys}
    elif args.to_offset is not None:
        wanted = dict.fromkeys(keys, args.to_offset)
    else:
        wanted = start if args.to_earliest else end
    out = {}
    for key in keys:
        out[key] = min(max(wanted[key], start[key]), end[key])
        if out[key] != wanted[key]:
            note(f"{key[0]}[{key[1]}]: offset {wanted[key]} is outside [{start[key]}, {end[key]}]; using {out[key]}")
    return out


def reset_share_offsets(args: argparse.Namespace) -> None:
    """``walgate share-group reset-offsets``: print the plan, and with ``--execute`` apply it
    (AlterShareGroupOffsets)."""
    if not args.all_topics and not args.topic:
        raise UsageError("name the partitions to reset: --topic TOPIC[:P1,P2] (repeatable) or --all-topics")
    conn = connect(args)
    with _calls(args) as calls:
        described = _describe(calls, args.group)
        if described.members:
            raise AdminError(f"offsets of share group '{args.group}' can only be reset while it is empty, but it "
                             f"has {len(described.members)} member(s)")
        current = _offsets(calls, args.group)
        plan = _targets(conn, args, current)
        if args.execute:
            by_topic: dict[str, list[AlterShareGroupOffsetsRequestPartition]] = {}
            for (topic, p), offset in plan.items():
                by_topic.setdefault(topic, []).append(
                    AlterShareGroupOffsetsRequestPartition(partition_index=i32(p), start_offset=i64(offset)))
            answer = calls.call(AlterShareGroupOffsetsRequest(group_id=GroupId(args.group), topics=tuple(
                AlterShareGroupOffsetsRequestTopic(topic_name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items())),
                calls.coordinator(args.group))
            if answer.error_code != 0:
                raise AdminError(f"cannot reset the offsets of share group '{args.group}': "
                                 f"{_error(answer.error_code, answer.error_message)}")
            for t in answer.responses:
                for p in t.partitions:
                    if p.error_code != 0:
                        raise AdminError(f"cannot reset the offset of share group '{args.group}' on "
                                         f"{t.topic_name}[{p.partition_index}]: {_error(p.error_code, p.error_message)}")
    rows = [{"group": args.group, "topic": key[0], "partition": key[1],
             "current_offset": None if key not in current or current[key].start_offset < 0
             else current[key].start_offset, "new_offset": new} for key, new in plan.items()]
    if args.json:
        print_json({"executed": args.execute, "partitions": rows})
    else:
        print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], [list(r.values()) for r in rows])
    note(f"Offsets of share group '{args.group}' reset." if args.execute
         else "Dry run: nothing changed. Add --execute to apply these offsets.")


def delete_share_groups(args: argparse.Namespace) -> None:
    """``walgate share-group delete``: DeleteGroups, or with ``--topic`` DeleteShareGroupOffsets of one group (the
    server refuses a group with members: NON_EMPTY_GROUP)."""
    with _calls(args) as calls:
        if args.topic:
            if len(args.groups) != 1:
                raise UsageError("--topic deletes the offsets of one group: name exactly one")
            [group] = args.groups
            answer = calls.call(DeleteShareGroupOffsetsRequest(group_id=GroupId(group), topics=tuple(
                DeleteShareGroupOffsetsRequestTopic(topic_name=TopicName(t)) for t in args.topic)), calls.coordinator(group))
            if answer.error_code != 0:
                raise AdminError(f"cannot delete the offsets of share group '{group}': "
                                 f"{_error(answer.error_code, answer.error_message)}")
            for t in answer.responses:
                if t.error_code != 0:
                    raise AdminError(f"cannot delete the offsets of share group '{group}' on topic '{t.topic_name}': "
                                     f"{_error(t.error_code, t.error_message)}")
            note(f"Deleted the offsets of share group '{group}' on {', '.join(repr(t) for t in args.topic)}.")
            return
        for group in args.groups:
            [r] = calls.call(DeleteGroupsRequest(groups_names=(GroupId(group),)), calls.coordinator(group)).results
            if r.error_code != 0:
                raise AdminError(f"cannot delete share group '{group}': {_error(r.error_code, None)}")
            note(f"Deleted share group '{group}'.")
