"""A single node's committed offsets carried into a replicated cluster's ``__consumer_offsets`` (issue 26; the marker
and its rule: :mod:`walgate.storage.offsets_import`).

Run by the node whose data dir holds the marker, in the background, from its start: for each group of the data dir's
coordinator logs, in name order, it asks the group's coordinator (the leader of the group's ``__consumer_offsets``
partition, :meth:`ReplicatedCoordinators.placement
<walgate.gateway.kafka.group_coordinators.ReplicatedCoordinators.placement>`) through this node's links to the nodes
(:class:`~walgate.gateway.kafka.node_links.NodeLinks`, this node included) for the group's committed offsets
(OffsetFetch v7), and commits those of partitions the cluster holds none of (OffsetCommit v7 with generation -1 and no
member, as an admin's AlterConsumerGroupOffsets: Kafka's coordinator takes it only while the group has no members),
each with its offset, leader epoch and metadata. A coordinator not elected, loading, moved or unreachable is asked
again every :data:`RETRY_S` seconds, for as long as it takes. A group that has members by then (consumers that
started from their ``auto.offset.reset``) or whose commit is refused otherwise is left as the cluster holds it, and
logged. Once every group is done the marker is removed, and the import is not repeated.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from kio.schema.offset_commit.v7.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_commit.v7.response import OffsetCommitResponse
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.offset_fetch.v7.response import OffsetFetchResponse
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from walgate.cluster.model import ControlPlaneError
from walgate.gateway.kafka.group_coordinators import ReplicatedCoordinators
from walgate.gateway.kafka.node_links import NodeLinks, NodeUnreachable
from walgate.replication.partition import NO_LEADER
from walgate.storage.coordinator_log import Committed
from walgate.storage.offsets_import import OffsetsOf, to_import
from walgate.wire.errors import ErrorCode

__all__ = ["RETRY_S", "import_offsets"]

log = logging.getLogger("walgate.groups")

RETRY_S = 1.0
"""How long a group whose coordinator did not answer waits before it is asked again."""

_AGAIN = frozenset((ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
                    ErrorCode.not_coordinator, ErrorCode.request_timed_out))
"""The answers of a coordinator not ready (yet) or moved: asked again."""


class _Again(Exception):
    """The group's coordinator is not elected, not ready or moved: ask again."""


async def import_offsets(offsets: OffsetsOf, coordinators: ReplicatedCoordinators, links: NodeLinks,
                         done: Callable[[], Awaitable[None]]) -> None:
    """Import ``offsets`` (by group, the module docstring), then await ``done`` (which removes the marker)."""
    imported = 0
    for group in sorted(offsets):
        while True:
            try:
                imported += await _import_group(group, offsets[group], coordinators, links)
                break
            except (_Again, NodeUnreachable, ControlPlaneError) as e:
                log.debug("importing the committed offsets of group %r: %s; asked again", group, e)
                await asyncio.sleep(RETRY_S)
    try:
        await done()
    except OSError as e:  # imported all the same; the next start asks again, and commits nothing twice
        log.error("the mark of the committed offsets to import (storage/offsets_import.py) cannot be removed: %s", e)
    log.warning("the single node's committed offsets are imported into __consumer_offsets: %d partition(s) of %d "
                "group(s) committed (a partition the cluster held a commit of kept it)", imported, len(offsets))


async def _import_group(group: str, old: dict[tuple[str, int], Committed], coordinators: ReplicatedCoordinators,
                        links: NodeLinks) -> int:
    """Commit the partitions of ``group`` :func:`~walgate.storage.offsets_import.to_import` names; how many were
    committed. Raises :class:`_Again`, NodeUnreachable or ControlPlaneError to be asked again."""
    placement = await coordinators.placement()
    node = placement.nodes[placement.partition(group)]
    if node == NO_LEADER:
        raise _Again("its coordinator partition has no leader")
    topics = sorted({topic for topic, _ in old})
    fetched: OffsetFetchResponse = await links.call(node, OffsetFetchRequest(
        group_id=GroupId(group), require_stable=False,
        topics=tuple(OffsetFetchRequestTopic(name=TopicName(t), partition_indexes=tuple(
            i32(p) for topic, p in sorted(old) if topic == t)) for t in topics)))
    _check(ErrorCode(int(fetched.error_code)), group, "OffsetFetch")
    now = {(str(t.name), int(p.partition_index)): int(p.committed_offset) for t in fetched.topics for p in t.partitions
           if int(p.error_code) == ErrorCode.none}
    commits = to_import(old, now)
    if not commits:
        return 0
    answer: OffsetCommitResponse = await links.call(node, OffsetCommitRequest(
        group_id=GroupId(group), generation_id_or_member_epoch=i32(-1), member_id="", group_instance_id=None,
        topics=tuple(OffsetCommitRequestTopic(name=TopicName(t), partitions=tuple(
            OffsetCommitRequestPartition(partition_index=i32(p), committed_offset=i64(c.offset),
                                         committed_leader_epoch=i32(c.leader_epoch), committed_metadata=c.metadata)
            for (topic, p), c in sorted(commits.items()) if topic == t)) for t in sorted({t for t, _ in commits}))))
    codes = {ErrorCode(int(p.error_code)) for t in answer.topics for p in t.partitions}
    for code in codes - {ErrorCode.none}:
        _check(code, group, "OffsetCommit")
    return sum(int(p.error_code) == ErrorCode.none for t in answer.topics for p in t.partitions)


def _check(code: ErrorCode, group: str, api: str) -> None:
    """Raise :class:`_Again` for a coordinator not ready or moved; log any other refusal (the group is then left as
    the cluster holds it)."""
    if code in _AGAIN:
        raise _Again(f"{api}: {code.name}")
    if code != ErrorCode.none:
        log.warning("the committed offsets of group %r are not imported: its coordinator answered %s to %s (a group "
                    "whose consumers joined since keeps the offsets they committed)", group, code.name.upper(), api)
