"""ListOffsets (key 2) v0–v9: earliest, latest, by timestamp, max timestamp, looked up by the partition interface
(:meth:`walgate.storage.partitions.Partitions.list_offset`).

* -2 EARLIEST and -4 EARLIEST_LOCAL: the log start offset (first retained record);
* -1 LATEST: the high watermark; with ``isolation_level`` 1 (read_committed, v2+) the last stable offset;
* -3 MAX_TIMESTAMP (v7+): the first record holding the largest timestamp;
* -5 EARLIEST_PENDING_UPLOAD (v9+): -1, there is no tiered storage;
* T >= 0: the first offset whose record timestamp >= T, or offset -1 when there is none.
Under read_committed, a -3 or T lookup whose offset is at or past the last stable offset answers -1, as Kafka bounds
it by its "last fetchable offset".
Lost records (a quarantined WAL entry) are a gap these lookups skip. An error
in one partition is its error code (:mod:`.common`); the others are answered.
Timestamps answered for -1/-2 are -1, as Kafka answers them. v0 answers in
``old_style_offsets`` (a list). A topic the principal may not Describe
answers TOPIC_AUTHORIZATION_FAILED in each of its partitions (Kafka's ACL check).
"""

from __future__ import annotations

from collections.abc import Callable

from walgate.gateway.kafka.access import Operation, ResourceType, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import LEADER_EPOCH, error_of
from walgate.gateway.kafka.leaders import leadership
from walgate.storage.engine import Engine
from walgate.storage.lanes import partition_keys
from walgate.storage.partitions import EARLIEST_PENDING_UPLOAD
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
    """Each partition's offset; a replicated one's (issue 25) only on its leader, in its leader epoch, else
    NOT_LEADER_OR_FOLLOWER (the client asks Metadata again)."""
    committed = request.isolation_level == READ_COMMITTED
    topics: list[ListOffsetsTopicResponse] = []
    for t in request.topics:
        parts: list[ListOffsetsPartitionResponse] = []
        denied = describable is not None and not describable(t.name)
        for p in t.partitions:
            epoch = LEADER_EPOCH
            try:
                err, epoch, _ = leadership(broker, t.name, p.partition_index, p.current_leader_epoch)
                if denied:
                    err = ErrorCode.topic_authorization_failed
                if err == ErrorCode.none and p.timestamp < EARLIEST_PENDING_UPLOAD:
                    err = ErrorCode.invalid_request
                if err == ErrorCode.none:
                    offset, ts = engine.partitions.list_offset(t.name, p.partition_index, p.timestamp,
                                                               read_committed=committed)
            except Exception as exc:  # noqa: BLE001 - mapped per partition, siblings unaffected
                err = error_of(exc)
            out: ListOffsetsPartitionResponse = {"partition_index": p.partition_index, "leader_epoch": epoch,
                                                 "error_code": ErrorCode.none}
            if err != ErrorCode.none:
                offset, ts = -1, -1
            out.update({"error_code": err, "offset": offset, "timestamp": ts})
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
