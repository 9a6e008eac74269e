"""``walgate group list|describe|reset-offsets|delete``: Kafka's kafka-consumer-groups, over ListGroups,
DescribeGroups / ConsumerGroupDescribe, OffsetFetch, ListOffsets, OffsetCommit and DeleteGroups.

``describe`` shows per partition the committed offset, the log end offset, their difference (the lag) and the
member that owns it. ``reset-offsets`` computes a plan and only prints it unless ``--execute`` is given; like
Kafka it refuses (dry run included) while the group has members, and keeps new offsets within each partition's
``[log start, log end]``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    TopicPartition,
)
from confluent_kafka.admin import ConsumerGroupDescription, OffsetSpec

from walgate.admin.client import (
    COORDINATOR_REQUEST_TIMEOUT_S,
    AdminError,
    Connection,
    UsageError,
    connect,
    describe_error,
    result,
)
from walgate.admin.output import note, print_json, print_table

__all__ = ["delete_groups", "describe_groups", "list_groups", "reset_offsets"]

Partition = tuple[str, int]


def _kafka_name(enum_name: str) -> str:
    """``PREPARING_REBALANCE`` → ``PreparingRebalance``, as Kafka's tools print states and types."""
    return "".join(word.capitalize() for word in enum_name.split("_"))


def _describe_group(conn: Connection, group: str) -> ConsumerGroupDescription:
    futures = conn.admin.describe_consumer_groups([group], request_timeout=COORDINATOR_REQUEST_TIMEOUT_S)
    description: ConsumerGroupDescription = result(futures[group], f"cannot describe group '{group}'", conn.timeout)
    return description


def _committed(conn: Connection, group: str) -> dict[Partition, int]:
    """The group's committed offsets (OffsetFetch for all its partitions)."""
    futures = conn.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                     request_timeout=COORDINATOR_REQUEST_TIMEOUT_S)
    answer = result(futures[group], f"cannot fetch the committed offsets of group '{group}'", conn.timeout)
    committed: dict[Partition, int] = {}
    for tp in answer.topic_partitions or []:
        if tp.error is not None:
            raise AdminError(f"cannot fetch the committed offset of group '{group}' on {tp.topic}[{tp.partition}]: "
                             f"{describe_error(tp.error)}")
        if tp.offset >= 0:
            committed[tp.topic, tp.partition] = tp.offset
    return committed


# ---------------------------------------------------------------------- list


def list_groups(args: argparse.Namespace) -> None:
    """``walgate group list``: every group with its state and type (Classic / Consumer)."""
    conn = connect(args)
    answer = result(conn.admin.list_consumer_groups(request_timeout=conn.timeout), "cannot list consumer groups", conn.timeout)
    if answer.errors:
        raise AdminError(f"cannot list consumer groups: {answer.errors[0]}")
    groups = [
        {"group": g.group_id, "state": _kafka_name(g.state.name), "type": _kafka_name(g.type.name)}
        for g in sorted(answer.valid or [], key=lambda g: g.group_id)
    ]
    if args.json:
        print_json(groups)
    else:
        print_table(["GROUP", "STATE", "TYPE"], [list(g.values()) for g in groups])


# ------------------------------------------------------------------ describe


def _describe_one(conn: Connection, group: str) -> dict[str, Any]:
    description = _describe_group(conn, group)
    if description.state == ConsumerGroupState.DEAD:
        raise AdminError(f"consumer group '{group}' does not exist")
    committed = _committed(conn, group)
    owners = {(tp.topic, tp.partition): member for member in description.members
              for tp in member.assignment.topic_partitions}
    keys = sorted(committed.keys() | owners.keys())
    end = conn.offsets((k for k in keys if k[0] in conn.metadata.topics), OffsetSpec.latest())
    partitions = []
    for key in keys:
        current, log_end, owner = committed.get(key), end.get(key), owners.get(key)
        partitions.append({
            "topic": key[0], "partition": key[1], "current_offset": current, "log_end_offset": log_end,
            "lag": log_end - current if current is not None and log_end is not None else None,
            "member_id": owner.member_id if owner else None, "host": owner.host if owner else None,
            "client_id": owner.client_id if owner else None,
        })
    return {
        "group": group, "state": _kafka_name(description.state.name), "type": _kafka_name(description.type.name),
        "assignor": description.partition_assignor or None,
        "members": [
            {"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
             "group_instance_id": m.group_instance_id,
             "assignment": [[tp.topic, tp.partition] for tp in m.assignment.topic_partitions]}
            for m in description.members
        ],
        "partitions": partitions,
    }


def describe_groups(args: argparse.Namespace) -> None:
    """``walgate group describe``: per partition the committed offset, log end offset, lag and owner; an
    ``AdminError`` for a group that does not exist."""
    conn = connect(args)
    described = [_describe_one(conn, group) for group in args.groups]
    if args.json:
        print_json(described)
        return
    for group in described:
        if not group["members"]:
            note(f"Consumer group '{group['group']}' has no active members.")
        print_table(
            ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
            ([group["group"], *p.values()] for p in group["partitions"]),
            title=f"group {group['group']}: {group['state']}, {len(group['members'])} member(s)"
                  + (f", assignor {group['assignor']}" if group["assignor"] else ""),
        )


# ------------------------------------------------------------- reset-offsets


@dataclass(frozen=True)
class _Plan:
    key: Partition
    current: int | None
    new: int


def _reset_partitions(conn: Connection, args: argparse.Namespace, committed: dict[Partition, int]) -> list[Partition]:
    if args.all_topics:
        if not committed:
            raise AdminError(f"group '{args.group}' has no committed offsets: name the partitions with --topic")
        for topic in {topic for topic, _ in committed}:
            conn.partitions(topic)
        return sorted(committed)
    keys: set[Partition] = set()
    for topic, wanted in args.topic:
        known = conn.partitions(topic)
        if unknown := sorted(set(wanted or ()) - set(known)):
            raise AdminError(f"topic '{topic}' has no partition {', '.join(map(str, unknown))}")
        keys.update((topic, p) for p in (wanted or known))
    return sorted(keys)


def _plan(conn: Connection, args: argparse.Namespace, committed: dict[Partition, int]) -> list[_Plan]:
    keys = _reset_partitions(conn, args, committed)
    start, end = conn.offsets(keys, OffsetSpec.earliest()), conn.offsets(keys, OffsetSpec.latest())
    if args.to_datetime is not None:
        at = conn.offsets(keys, OffsetSpec.for_timestamp(args.to_datetime))
        wanted = {k: at[k] if at[k] >= 0 else end[k] for k in keys}  # no record that late: the log end
    elif args.shift_by is not None:
        if missing := [k for k in keys if k not in committed]:
            raise AdminError(f"cannot shift {missing[0][0]}[{missing[0][1]}]: group '{args.group}' has no committed offset there")
        wanted = {k: committed[k] + args.shift_by for k in keys}
    elif args.to_offset is not None:
        wanted = dict.fromkeys(keys, args.to_offset)
    else:
        wanted = start if args.to_earliest else end
    plan = []
    for key in keys:
        new = min(max(wanted[key], start[key]), end[key])
        if new != wanted[key]:
            note(f"{key[0]}[{key[1]}]: offset {wanted[key]} is outside [{start[key]}, {end[key]}]; using {new}")
        plan.append(_Plan(key, committed.get(key), new))
    return plan


def reset_offsets(args: argparse.Namespace) -> None:
    """``walgate group reset-offsets``: print the plan, and with ``--execute`` commit it (OffsetCommit)."""
    if not args.all_topics and not args.topic:
        raise UsageError("name the partitions to reset: --topic TOPIC[:P1,P2] (repeatable) or --all-topics")
    conn = connect(args)
    description = _describe_group(conn, args.group)
    if description.state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD):
        raise AdminError(f"offsets of group '{args.group}' can only be reset while it is inactive, but it is "
                         f"{_kafka_name(description.state.name)} with {len(description.members)} member(s)")
    plan = _plan(conn, args, _committed(conn, args.group))
    if args.execute:
        request = ConsumerGroupTopicPartitions(args.group, [TopicPartition(p.key[0], p.key[1], p.new) for p in plan])
        futures = conn.admin.alter_consumer_group_offsets([request], request_timeout=COORDINATOR_REQUEST_TIMEOUT_S)
        answer = result(futures[args.group], f"cannot commit offsets for group '{args.group}'", conn.timeout)
        for tp in answer.topic_partitions or []:
            if tp.error is not None:
                raise AdminError(f"cannot commit the offset of group '{args.group}' on {tp.topic}[{tp.partition}]: "
                                 f"{describe_error(tp.error)}")
    rows = [{"group": args.group, "topic": p.key[0], "partition": p.key[1], "current_offset": p.current,
             "new_offset": p.new} for p in plan]
    if args.json:
        print_json({"executed": args.execute, "partitions": rows})
    else:
        print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], [list(r.values()) for r in rows])
    note(f"Offsets of group '{args.group}' reset." if args.execute
         else "Dry run: nothing changed. Add --execute to commit these offsets.")


# -------------------------------------------------------------------- delete


def delete_groups(args: argparse.Namespace) -> None:
    """``walgate group delete``: DeleteGroups (the server refuses a group with members: NON_EMPTY_GROUP)."""
    conn = connect(args)
    futures = conn.admin.delete_consumer_groups(args.groups, request_timeout=COORDINATOR_REQUEST_TIMEOUT_S)
    for group, future in futures.items():
        result(future, f"cannot delete consumer group '{group}'", conn.timeout)
        note(f"Deleted consumer group '{group}'.")
