"""ListOffsets (key 2) v0–v9: earliest, latest, by timestamp, max timestamp, looked up by the partition interface
(:meth:`walgate.storage.partitions.Partitions.list_offset`).

* -2 EARLIEST and -4 EARLIEST_LOCAL: the log start offset (first retained record);
* -1 LATEST: the high watermark; with ``isolation_level`` 1 (read_committed, v2+) the last stable offset;
  OFFSET_NOT_AVAILABLE (retriable) from a replicated partition's leader just elected whose high watermark has not
  reached the start of its leader epoch (KIP-207: offsets answered never go back across a leader change), as for a
  timestamp whose record is past what is fetchable then;
* -3 MAX_TIMESTAMP (v7+): the first record holding the largest timestamp;
* -5 EARLIEST_PENDING_UPLOAD (v9+): -1, there is no tiered storage;
* T >= 0: the first offset whose record timestamp >= T, or offset -1 when there is none;
* any other negative timestamp: INVALID_REQUEST.
Under read_committed, a -3 or T lookup whose offset is at or past the last stable offset answers -1, as Kafka bounds
it by its "last fetchable offset".
Lost records (a quarantined WAL entry) are a gap these lookups skip. An error
in one partition is its error code (:mod:`.common`); the others are answered.
Timestamps answered for -1/-2 are -1, as Kafka answers them. v0 answers in
``old_style_offsets`` (a list). A topic the principal may not Describe
answers TOPIC_AUTHORIZATION_FAILED in each of its partitions (Kafka's ACL check). Leadership as Fetch's
(:class:`~walgate.gateway.kafka.leaders.Reads`): NOT_LEADER_OR_FOLLOWER where this node does not lead the partition
(a replicated one while it starts too), a current leader epoch checked first (KIP-320); ``leader_epoch`` is the
partition's (-1 while unknown).
"""

from __future__ import annotations

from collections.abc import Callable

from walgate.gateway.kafka.access import Operation, ResourceType, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import LEADER_EPOCH
from walgate.gateway.kafka.leaders import ReadCheck, Reads
from walgate.storage.engine import Engine
from walgate.storage.lanes import partition_keys
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 2, 0, 9
READ_COMMITTED = 1

def _answer(engine: Engine, request: ListOffsetsRequest, version: int,
            describable: Callable[[str], bool] | None, broker: Broker) -> list[ListOffsetsTopicResponse]:
    """Each partition's offset where this node serves it (:meth:`~walgate.gateway.kafka.leaders.Reads.serve`: a
    replicated one, issue 25, only on its leader, in its leader epoch, else NOT_LEADER_OR_FOLLOWER: the client asks
    Metadata again)."""
    committed = request.isolation_level == READ_COMMITTED
    reads = Reads(broker)
    topics: list[ListOffsetsTopicResponse] = []
    for t in request.topics:
        parts: list[ListOffsetsPartitionResponse] = []
        denied = describable is not None and not describable(t.name)
        for p in t.partitions:
            if denied:
                check, found = ReadCheck(ErrorCode.topic_authorization_failed, LEADER_EPOCH), None
            else:
                check, found = reads.serve(t.name, p.partition_index, p.current_leader_epoch, lambda: (
                    engine.partitions.list_offset(t.name, p.partition_index, p.timestamp, read_committed=committed)))
            offset, ts = (-1, -1) if found is None else found
            out: ListOffsetsPartitionResponse = {"partition_index": p.partition_index, "leader_epoch": check.epoch,
                                                 "error_code": check.error, "offset": offset, "timestamp": ts}
            if version == 0:
                out["old_style_offsets"] = [offset] if offset >= 0 and p.max_num_offsets > 0 else []
            parts.append(out)
        topics.append({"name": t.name, "partitions": parts})
    return topics


async def handle(broker: Broker, ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    asked = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    topics = await broker.call_on(lambda known: partition_keys(known, asked), _answer, request, ctx.api_version,
                               checker(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC), broker)
    return {"throttle_time": 0, "topics": topics}
