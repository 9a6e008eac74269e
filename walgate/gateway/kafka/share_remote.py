"""A share group's coordinator reaching the share-partition state other nodes keep (KIP-932; docs/cluster.md,
"Share groups"): the share coordinator's state RPCs, sent over :class:`~.node_links.NodeLinks` to each partition's
leader, which answers them from its own ``share_groups.log`` (:mod:`.share_state`), as Kafka's group coordinator
reaches them through its persister:

* :func:`summaries`: ReadShareGroupStateSummary v1 (DescribeShareGroupOffsets);
* :func:`initialize`: InitializeShareGroupState v0 with the new start offsets (AlterShareGroupOffsets);
* :func:`delete`: DeleteShareGroupState v0 (DeleteShareGroupOffsets, DeleteGroups of a share group);
* :func:`high_watermarks`: ListOffsets (latest) of the partitions described, whose lag (KIP-1226) is their high
  watermark less their start offset and delivery complete count, as Kafka's group coordinator asks the partitions'
  leaders for it.
* :func:`groups_kept`: ListGroups (type ``share``) of each other node, which answers a cluster node with the share
  groups whose share-partition state it keeps, whoever coordinates them (walgate's own use of the request: Kafka's
  coordinator knows its share groups from its own log; here one whose members left may have state only on other
  nodes).

Each asks every node concerned at once, one request per node, and answers per share-partition. A node that does
not answer (down, unreachable, its node authentication refused: :class:`~.node_links.NodeUnreachable`) answers its
partitions COORDINATOR_NOT_AVAILABLE, retriable, with a message naming it, as Kafka's persister fails a partition
whose share coordinator is not available; the other nodes' answers stand. A refusal of this node's ClusterAction
there (CLUSTER_AUTHORIZATION_FAILED: its node token not read yet) answers the same, never the client's to see.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from kio.schema.delete_share_group_state.v0.request import DeleteShareGroupStateRequest, DeleteStateData
from kio.schema.delete_share_group_state.v0.request import PartitionData as DeletePartition
from kio.schema.initialize_share_group_state.v0.request import InitializeShareGroupStateRequest, InitializeStateData
from kio.schema.initialize_share_group_state.v0.request import PartitionData as InitializePartition
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.list_groups.v5.response import ListGroupsResponse
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.list_offsets.v7.response import ListOffsetsResponse
from kio.schema.read_share_group_state_summary.v1.request import PartitionData as SummaryPartition
from kio.schema.read_share_group_state_summary.v1.request import (
    ReadShareGroupStateSummaryRequest,
    ReadStateSummaryData,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.node_links import NodeLinks, NodeUnreachable
from walgate.gateway.kafka.share_leaders import elsewhere as leaders_elsewhere
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode

__all__ = ["ASK_S", "Placed", "StateAnswer", "delete", "elsewhere", "everything_elsewhere", "groups_kept",
           "high_watermarks", "initialize", "kept_elsewhere", "led_elsewhere", "summaries"]

ASK_S = 2.0
"""How long a client request's question to the other nodes waits for their answers (a consumer group's first join,
ListGroups: unanswered by then, a node's answer is left out), not the node links' 10 s."""

Key = tuple[str, int]
"""(topic name, partition)."""
Placed = Mapping[Key, int]
"""The share-partitions whose state another node keeps -> that node."""
Asked = dict[uuid.UUID, list[int]]
"""Topic id -> partitions, of one request."""


class StateAnswer(NamedTuple):
    """A leader's answer for one share-partition (``start_offset``, ``delivery_complete``: a summary's; -1 without
    state or for other requests)."""

    error_code: int
    error_message: str | None = None
    start_offset: int = -1
    delivery_complete: int = -1


def elsewhere(node_id: int, topics: TopicsSnapshot, asked: Iterable[Key]) -> dict[Key, int]:
    """Those of the ``asked`` share-partitions placed on a node other than ``node_id`` -> their node."""
    return {(name, p): node for name, p in asked if (node := topics.node_of(name, p, node_id)) != node_id}


def led_elsewhere(broker: Broker, topics: TopicsSnapshot, asked: Iterable[Key]) -> dict[Key, int]:
    """Those of the ``asked`` share-partitions another node serves now -> that node: a one-copy partition's node by
    placement (as :func:`elsewhere`), a replicated one's leader by its partition state (-1 while it has none, or
    none was read: :func:`walgate.gateway.kafka.share_leaders.elsewhere`), so a change reaches its leader wherever
    it moved. A topic gone is left out (answered as unknown here)."""
    keyed = [(str(tid), name, p) for name, p in asked if (tid := topics.topic_id(name)) is not None]
    names = {(key, p): name for key, name, p in keyed}
    return {(names[k], k[1]): leader for k, (leader, _) in leaders_elsewhere(broker, topics, keyed).items()}


def everything_elsewhere(node_id: int, topics: TopicsSnapshot) -> dict[Key, int]:
    """Every partition of every topic placed on a node other than ``node_id`` -> its node (the share-partitions a
    group may have state of there: a leader answers those without state as having none)."""
    return elsewhere(node_id, topics, ((name, p) for name in sorted(topics.names())
                                       for p in range(topics.partition_count(name) or 0)))


async def _ask(links: NodeLinks | None, node: int, keys: Mapping[uuid.UUID, Sequence[Key]],
               request_of: Callable[[Asked], Any]) -> dict[Key, StateAnswer]:
    """Node ``node``'s answer per share-partition of ``keys`` (topic id -> its (name, partition)s)."""
    every = [k for ks in keys.values() for k in ks]
    try:
        if links is None:  # (elsewhere is empty on a single node: only a cluster node has others)
            raise NodeUnreachable(f"node {node}: no links to other nodes")
        answer = await links.call(node, request_of({tid: [p for _, p in ks] for tid, ks in keys.items()}))
    except NodeUnreachable as exc:
        return dict.fromkeys(every, StateAnswer(
            ErrorCode.coordinator_not_available, f"The share-partition state is kept by {exc}: try again later."))
    got = {(r.topic_id, int(p.partition)): p for r in answer.results for p in r.partitions}
    out: dict[Key, StateAnswer] = {}
    for tid, ks in keys.items():
        for name, p in ks:
            r = got.get((tid, p))
            if r is None:
                out[(name, p)] = StateAnswer(ErrorCode.unknown_server_error, f"node {node} did not answer {name}-{p}")
            elif r.error_code == ErrorCode.cluster_authorization_failed:
                out[(name, p)] = StateAnswer(ErrorCode.coordinator_not_available,
                                             f"node {node} did not take this node's request yet: try again later.")
            else:
                out[(name, p)] = StateAnswer(int(r.error_code), r.error_message,
                                             int(getattr(r, "start_offset", -1)),
                                             int(getattr(r, "delivery_complete_count", -1)))
    return out


async def _across(links: NodeLinks | None, topics: TopicsSnapshot, placed: Placed,
                  request_of: Callable[[Asked], Any]) -> dict[Key, StateAnswer]:
    """Every node of ``placed`` asked at once; each share-partition's answer (UNKNOWN_TOPIC_OR_PARTITION for a
    topic gone since)."""
    by_node: dict[int, dict[uuid.UUID, list[Key]]] = {}
    out: dict[Key, StateAnswer] = {}
    for (name, p), node in placed.items():
        tid = topics.topic_id(name)
        if tid is None:
            out[(name, p)] = StateAnswer(ErrorCode.unknown_topic_or_partition, f"There is no topic {name}.")
        elif node < 0:
            out[(name, p)] = StateAnswer(ErrorCode.coordinator_not_available,
                                         f"{name}-{p} has no leader now: try again later.")
        else:
            by_node.setdefault(node, {}).setdefault(tid, []).append((name, p))
    for answers in await asyncio.gather(*(_ask(links, node, keys, request_of) for node, keys in by_node.items())):
        out.update(answers)
    return out


async def summaries(links: NodeLinks | None, topics: TopicsSnapshot, group_id: str,
                    placed: Placed) -> dict[Key, StateAnswer]:
    """Start offset and delivery complete count of each share-partition of ``placed`` (-1: no state there)."""
    return await _across(links, topics, placed, lambda asked: ReadShareGroupStateSummaryRequest(
        group_id=group_id, topics=tuple(ReadStateSummaryData(topic_id=tid, partitions=tuple(
            SummaryPartition(partition=i32(p), leader_epoch=i32(0)) for p in ps)) for tid, ps in asked.items())))


async def kept_elsewhere(links: NodeLinks | None, topics: TopicsSnapshot, node_id: int,
                         group_id: str) -> bool | None:
    """Whether another node keeps state of ``group_id``: True when a summary of its partitions of every topic has a
    start offset, else None (unknown) when a node did not answer for one of them (any error but
    UNKNOWN_TOPIC_OR_PARTITION, a topic gone), else False."""
    answers = (await summaries(links, topics, group_id, everything_elsewhere(node_id, topics))).values()
    if any(a.error_code == ErrorCode.none and a.start_offset >= 0 for a in answers):
        return True
    unanswered = any(a.error_code not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition) for a in answers)
    return None if unanswered else False


async def initialize(links: NodeLinks | None, topics: TopicsSnapshot, group_id: str, placed: Placed,
                     starts: Mapping[Key, int]) -> dict[Key, StateAnswer]:
    """Each share-partition of ``placed`` started afresh at its offset in ``starts`` (NONE once durable there)."""
    names = {tid: name for name, _ in placed if (tid := topics.topic_id(name)) is not None}
    return await _across(links, topics, placed, lambda asked: InitializeShareGroupStateRequest(
        group_id=group_id, topics=tuple(InitializeStateData(topic_id=tid, partitions=tuple(
            InitializePartition(partition=i32(p), state_epoch=i32(0), start_offset=i64(starts[(names[tid], p)]))
            for p in ps)) for tid, ps in asked.items())))


async def delete(links: NodeLinks | None, topics: TopicsSnapshot, group_id: str,
                 placed: Placed) -> dict[Key, StateAnswer]:
    """The state of each share-partition of ``placed`` deleted (NONE once durable there, or when it had none)."""
    return await _across(links, topics, placed, lambda asked: DeleteShareGroupStateRequest(
        group_id=group_id, topics=tuple(DeleteStateData(topic_id=tid, partitions=tuple(
            DeletePartition(partition=i32(p)) for p in ps)) for tid, ps in asked.items())))


async def high_watermarks(links: NodeLinks | None, placed: Placed) -> dict[Key, int]:
    """The high watermark of each partition of ``placed`` its node answered (ListOffsets v7, latest,
    read_uncommitted); a node that does not answer, or a partition it refuses (TOPIC_AUTHORIZATION_FAILED when an
    authorizer grants nodes nothing on the topic), is left out."""
    by_node: dict[int, dict[str, list[int]]] = {}
    for (name, p), node in placed.items():
        by_node.setdefault(node, {}).setdefault(name, []).append(p)

    async def ask(node: int, topics: dict[str, list[int]]) -> dict[Key, int]:
        if links is None:  # (placed is empty on a single node)
            return {}
        try:
            answer: ListOffsetsResponse = await links.call(node, ListOffsetsRequest(
                replica_id=BrokerId(-1), isolation_level=i8(0), topics=tuple(ListOffsetsTopic(
                    name=TopicName(name), partitions=tuple(ListOffsetsPartition(partition_index=i32(p),
                                                                                timestamp=i64(-1)) for p in ps))
                    for name, ps in topics.items())))
        except NodeUnreachable:
            return {}
        return {(str(t.name), int(p.partition_index)): int(p.offset) for t in answer.topics for p in t.partitions
                if p.error_code == ErrorCode.none}

    out: dict[Key, int] = {}
    for answered in await asyncio.gather(*(ask(node, topics) for node, topics in by_node.items())):
        out.update(answered)
    return out


async def groups_kept(links: NodeLinks | None, node_id: int) -> set[str]:
    """The ids of the share groups whose share-partition state any registered node but ``node_id`` keeps (ListGroups
    v5, type ``share``, asked of each at once); a node that does not answer within :data:`ASK_S`, or answers an
    error, adds none (a stalled node does not hold every ListGroups for the node links' 10 s: rv7 R7-1)."""
    async def ask(links: NodeLinks, node: int) -> set[str]:
        try:
            async with asyncio.timeout(ASK_S):
                answer: ListGroupsResponse = await links.call(node, ListGroupsRequest(states_filter=(),
                                                                                      types_filter=("share",)))
        except (NodeUnreachable, TimeoutError):
            return set()
        return {str(g.group_id) for g in answer.groups} if answer.error_code == ErrorCode.none else set()

    if links is None:  # (no other nodes on a single node)
        return set()
    others = [n.node_id for n in links.member.view.nodes if n.node_id != node_id]
    return set().union(*await asyncio.gather(*(ask(links, n) for n in others)))
