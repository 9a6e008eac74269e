"""DescribeShareGroupOffsets (key 90) v0–v1: the share-partition start offsets of share groups (and their lag, v1),
as :func:`walgate.coordinator.share_admin.describe_offsets` answers them.

ACLs (as Kafka's ``handleDescribeShareGroupOffsetsRequest``): Describe on the group, else the group answers
GROUP_AUTHORIZATION_FAILED; Describe on each asked topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED
(start offset -1); with no topics asked, the topics the principal may not Describe are left out. A share
coordinator that fails answers every asked group's error (:mod:`.common`).

In cluster mode a group answers NOT_COORDINATOR from every node but its coordinator, which reads the start offset of
an asked partition placed on another node from that partition's leader, which keeps its share-partition state
(ReadShareGroupStateSummary, :mod:`walgate.gateway.kafka.share_remote`), and its lag from the high watermark the
leader answers to a ListOffsets (-1, unknown, when it does not); a leader that does not answer makes its partitions
answer COORDINATOR_NOT_AVAILABLE (start offset -1), retriable, the others answer. With no topics asked, every node is asked
for the group's share-partitions of every topic placed on it; those of a node that does not answer are answered
COORDINATOR_NOT_AVAILABLE for the topics the coordinator's node keeps state of, and are left out otherwise (the
coordinator does not know which a group consumed there).

In a replicated cluster the coordinator answers from the share coordinator's records, which it keeps
(:mod:`walgate.gateway.kafka.share_records`): every share-partition with state (with no topics asked), whichever
nodes lead the partitions now, none asked of another node; the lag from the high watermark of each partition's leader
now (its own, or ListOffsets), -1 when it does not answer.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Collection, Sequence
from typing import Any, cast

from walgate.coordinator.share_admin import describe_offsets, describe_recorded
from walgate.coordinator.share_coordinator import ReadWant, ShareCoordinator
from walgate.gateway.kafka.access import Operation, ResourceType, allowed_names
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.handlers.common import answered
from walgate.gateway.kafka.share_admin import TOPIC_DENIED, SnapshotTopics, topic_uuid
from walgate.gateway.kafka.share_records import group_records, persisted
from walgate.gateway.kafka.share_remote import (
    StateAnswer,
    elsewhere,
    everything_elsewhere,
    high_watermarks,
    led_elsewhere,
    summaries,
)
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponseTopic,
)

API_KEY, MIN_VERSION, MAX_VERSION = 90, 0, 1
Group = DescribeShareGroupOffsetsResponseGroup
Topic = DescribeShareGroupOffsetsResponseTopic


def _partition(p: int, answer: StateAnswer, high_watermark: int | None) -> dict[str, Any]:
    """An asked partition whose state another node keeps, as its leader answered (start offset -1 for an error); its
    lag from the ``high_watermark`` its leader answered (-1: unknown)."""
    ok = answer.error_code == ErrorCode.none
    lag = -1
    if ok and answer.start_offset >= 0 and answer.delivery_complete >= 0 and high_watermark is not None:
        lag = max(0, high_watermark - answer.start_offset - answer.delivery_complete)
    return {"partition_index": p, "start_offset": answer.start_offset if ok else -1, "leader_epoch": 0, "lag": lag,
            "error_code": answer.error_code, "error_message": answer.error_message}


def _denied(topics: Sequence[Any], readable: Collection[str]) -> list[dict[str, Any]]:
    """The asked topics the principal may not Describe: their partitions TOPIC_AUTHORIZATION_FAILED."""
    return [{"topic_name": t.topic_name, "topic_id": None, "partitions": [
        {"partition_index": p, "start_offset": -1, "leader_epoch": 0, "lag": -1,
         "error_code": ErrorCode.topic_authorization_failed, "error_message": TOPIC_DENIED}
        for p in t.partitions]} for t in topics if t.topic_name not in readable]


def _group(group_id: str, code: int, topics: list[Topic] | None = None) -> Group:
    return {"group_id": group_id, "error_code": code, "error_message": None, "topics": topics or []}


async def handle(broker: Broker, ctx: RequestContext,
                 request: DescribeShareGroupOffsetsRequest) -> DescribeShareGroupOffsetsResponse:
    shares = broker.shares
    groups = list(request.groups)
    if shares is None:
        return {"throttle_time": 0, "groups": [_group(g.group_id, ErrorCode.unsupported_version) for g in groups]}
    permitted = allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.GROUP, [g.group_id for g in groups])
    names = {t.topic_name for g in groups for t in g.topics or ()}
    readable = allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC, names)
    refused = {g.group_id: code for g in groups if g.group_id in permitted
               if (code := await refusal(broker.coordinators, g.group_id))}  # another node coordinates it
    wanted = [g for g in groups if g.group_id in permitted and g.group_id not in refused]
    placed = broker.topics()
    remote = {g.group_id: elsewhere(broker.node_id, placed, ((t.topic_name, p) for t in g.topics
                                                             if t.topic_name in readable for p in t.partitions))
              if g.topics is not None else everything_elsewhere(broker.node_id, placed) for g in wanted}

    def describe(snapshot: TopicsSnapshot, coordinator: ShareCoordinator,
                 answers: dict[str, dict[tuple[str, int], StateAnswer]], marks: dict[tuple[str, int], int]
                 ) -> list[Group]:
        topics = SnapshotTopics(snapshot)
        out: list[Group] = []
        for g in wanted:
            there = answers[g.group_id]
            if g.topics is None:
                found = describe_offsets(coordinator, topics, g.group_id, None)
                local = {t["topic_name"] for t in found}
                by_name = {t["topic_name"]: t for t in found}
                for (name, p), answer in sorted(there.items()):
                    kept = answer.error_code == ErrorCode.none and answer.start_offset >= 0
                    if kept or (answer.error_code != ErrorCode.none and name in local):
                        topic = by_name.setdefault(name, {"topic_name": name, "topic_id": topics.key(name),
                                                          "partitions": []})
                        topic["partitions"].append(_partition(p, answer, marks.get((name, p))))
                found = [{**by_name[n], "partitions": sorted(by_name[n]["partitions"],
                                                             key=lambda d: d["partition_index"])}
                         for n in sorted(by_name) if n in allowed_names(
                             broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC, [n])]
            else:
                asked = [t for t in g.topics if t.topic_name in readable]
                found = describe_offsets(coordinator, topics, g.group_id, [
                    (t.topic_name, [p for p in t.partitions if (t.topic_name, p) not in there]) for t in asked])
                for t, a in zip(found, asked):  # one per topic asked, in order; its partitions in the asked order
                    mine = {d["partition_index"]: d for d in t["partitions"]}
                    t["partitions"] = [_partition(p, there[(a.topic_name, p)], marks.get((a.topic_name, p)))
                                       if (a.topic_name, p) in there else mine[p] for p in a.partitions]
                found += _denied(g.topics, readable)
            # the coordinator answers in the response's field names, a topic's id as its key
            out.append(_group(g.group_id, ErrorCode.none, [cast(Topic, {**t, "topic_id": topic_uuid(t["topic_id"])})
                                                           for t in found]))
        return out

    async def described() -> list[Group]:
        """The state other nodes keep read from them; the lags need the high watermarks: the share-partitions with
        state named on the coordinator lane, their watermarks read on the storage lane, then the description on the
        coordinator lane."""
        assert shares is not None
        answers = dict(zip(remote, await asyncio.gather(*(summaries(broker.links, placed, group_id, there)
                                                          for group_id, there in remote.items()))))
        kept = {k: remote[g][k] for g, there in answers.items() for k, a in there.items() if a.start_offset >= 0}
        marks = await high_watermarks(broker.links, kept)
        for g in wanted:  # (a replicated cluster's) share-partitions asked of this node's: their state read first
            if g.topics is not None:
                await shares.ensure_read(g.group_id, [
                    (str(tid), p) for t in g.topics if t.topic_name in readable
                    and (tid := placed.topic_id(t.topic_name)) is not None
                    for p in t.partitions if (t.topic_name, p) not in remote[g.group_id]])
        keys = await shares.run(lambda _, coordinator: list(dict.fromkeys(
            (topic, p) for g in wanted for _, topic, p in coordinator.state_keys(g.group_id))))
        reads = await shares.read([ReadWant(topic, p, None, 0) for topic, p in keys], False, 0)
        return await shares.with_reads(reads, 0, lambda snapshot, coordinator, _: describe(snapshot, coordinator,
                                                                                           answers, marks))

    async def recorded() -> list[Group]:
        """A replicated cluster's: every group's share-partitions from the share coordinator's records (this node's:
        it coordinates them), their lags from the high watermark each partition's leader now answers."""
        assert shares is not None
        records = await shares.run(lambda _topics, _c: group_records(broker, [g.group_id for g in wanted]))
        named = {(k[1], k[2]): name for k in records if (name := placed.topic_name(uuid.UUID(k[1]))) is not None}
        away = led_elsewhere(broker, placed, {(name, p) for (_, p), name in named.items()})
        got = await high_watermarks(broker.links, {k: node for k, node in away.items() if node >= 0})
        reads = await shares.read([ReadWant(key, p, None, 0) for (key, p), name in named.items()
                                   if (name, p) not in away], False, 0)
        marks = {(key, p): got[(name, p)] for (key, p), name in named.items() if (name, p) in got}
        marks.update(((key, p), read.offsets.high_watermark) for (key, p), read in reads.items()
                     if read.error is None and read.offsets is not None)
        topics = SnapshotTopics(placed)
        out: list[Group] = []
        for g in wanted:
            if g.topics is None:
                found = [t for t in describe_recorded(topics, records, g.group_id, None, marks)
                         if t["topic_name"] in allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC,
                                                             [t["topic_name"]])]
            else:
                found = describe_recorded(topics, records, g.group_id, [
                    (t.topic_name, t.partitions) for t in g.topics if t.topic_name in readable], marks)
                found += _denied(g.topics, readable)
            out.append(_group(g.group_id, ErrorCode.none, [cast(Topic, {**t, "topic_id": topic_uuid(t["topic_id"])})
                                                           for t in found]))
        return out

    groups_described = await answered(recorded() if persisted(broker) else described(),
                                      lambda code: [_group(g.group_id, code) for g in wanted])
    by_id = {g["group_id"]: g for g in groups_described} | {g: _group(g, code) for g, code in refused.items()}
    return {"throttle_time": 0, "groups": [
        by_id[g.group_id] if g.group_id in permitted else _group(g.group_id, ErrorCode.group_authorization_failed)
        for g in groups]}
