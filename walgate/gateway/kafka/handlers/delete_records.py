"""DeleteRecords (key 21) v0–v2: move partitions' log start offsets (-1: to the high watermark).

Fetches below the new log start get OFFSET_OUT_OF_RANGE and the consumer's
reset policy; the bytes go when retention deletes their WAL segment. An offset past the high watermark is
OFFSET_OUT_OF_RANGE (Kafka's ``UnifiedLog.deleteRecordsOnLeader``: records not committed are not deleted). Each
partition answers its own error (:mod:`.common`'s table). Leadership as ListOffsets'
(:class:`~walgate.gateway.kafka.leaders.Reads`): a replicated partition (issue 25) only on its leader, else
NOT_LEADER_OR_FOLLOWER (the Admin client asks Metadata again), so a follower's copy never moves its log start by
itself. Its followers take the leader's log start from their next WalFetch answer and report theirs with the fetch
after (WalFetch v1); the leader answers once every other replica that is registered reported a log start at least
the new one (Kafka's ``DelayedDeleteRecords`` on ``Partition.lowWatermarkIfLeader``), with that low watermark, or
REQUEST_TIMED_OUT after the request's ``timeout_ms`` (the leader's log start moved; a failover before the followers
took it may serve the records again), so that a failover after the answer never serves the deleted records again.

ACLs (as Kafka): Delete on the topic, else TOPIC_AUTHORIZATION_FAILED in its partitions.
"""

from __future__ import annotations

from collections.abc import Callable

from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, ResourceType, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.leaders import Reads
from walgate.gateway.kafka.led_vnodes import until_changed
from walgate.storage.engine import Engine
from walgate.storage.lanes import partition_keys
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DeleteRecordsPartitionResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)

API_KEY, MIN_VERSION, MAX_VERSION = 21, 0, 2
_RECHECK_S = 1.0
"""How often a DeleteRecords of replicated partitions looks at their followers' log starts besides when one of their
vnodes changed (a follower's fetch recorded, a leadership or state change): for a replica's registration lapsing."""


def _one(engine: Engine, reads: Reads, topic: str, partition: int, offset: int) -> DeleteRecordsPartitionResult:
    check, low = reads.serve(topic, partition, -1, lambda: engine.partitions.delete_records(topic, partition, offset))
    return {"partition_index": partition, "low_watermark": -1 if low is None else low, "error_code": check.error}


def _delete(engine: Engine, request: DeleteRecordsRequest, deletable: Callable[[str], bool] | None,
            broker: Broker) -> list[DeleteRecordsTopicResult]:
    reads = Reads(broker)
    return [
        {"name": t.name, "partitions": [
            _one(engine, reads, t.name, p.partition_index, p.offset) if deletable is None or deletable(t.name)
            else {"partition_index": p.partition_index, "low_watermark": -1,
                  "error_code": ErrorCode.topic_authorization_failed}
            for p in t.partitions]}
        for t in request.topics
    ]


def _low_watermarks(engine: Engine, broker: Broker, deleted: list[tuple[str, int, int]]) -> list[int | None]:
    """Each deleted partition's low watermark over its replicas (:meth:`LeaderView.low_watermark
    <walgate.replication.leader.LeaderView.low_watermark>`), None for one not replicated or not led here now. On the
    partitions' lanes (the views' owners)."""
    reads, led = Reads(broker), broker.led
    out: list[int | None] = []
    for topic, partition, start in deleted:
        view, topic_id = reads.leader_view(topic, partition), engine.views.topic_id(topic)
        alive = (lambda r: led.registered_epoch(r) is not None) if led is not None else (lambda _: False)
        out.append(None if view is None or topic_id is None else view.low_watermark(topic_id.hex, start, alive))
    return out


async def _replicated(broker: Broker, topics: list[DeleteRecordsTopicResult], timeout_s: float) -> None:
    """Wait, at most ``timeout_s``, until each replicated partition deleted here reached its new log start on every
    registered replica (the module docstring), looked at again when one of their vnodes changed (a follower's fetch
    recorded: :func:`~walgate.gateway.kafka.led_vnodes.until_changed`); its answer's low watermark is then that, or
    REQUEST_TIMED_OUT."""
    deleted = [(t["name"], p, int(p["low_watermark"])) for t in topics for p in t["partitions"]
               if p["error_code"] == ErrorCode.none]
    led = broker.led
    if led is None or not deleted:
        return
    keys = [(name, p["partition_index"]) for name, p, _ in deleted]
    asked = [(name, p["partition_index"], start) for name, p, start in deleted]
    known = broker.topics()
    vnodes = [vgroup for name, index in keys if (vgroup := known.vgroup_of(name, index)) is not None]
    lows: list[int | None] = []

    async def reached() -> bool:
        lows[:] = await broker.call_on(lambda known: partition_keys(known, keys), _low_watermarks, broker, asked)
        return all(low is None or low >= start for low, (_, _, start) in zip(lows, asked))

    if await until_changed(led, vnodes, reached, timeout_s, _RECHECK_S):
        for low, (_, p, _) in zip(lows, deleted):
            p["low_watermark"] = p["low_watermark"] if low is None else low
        return
    for low, (_, p, start) in zip(lows, deleted):
        if low is not None and low < start:
            p["error_code"], p["low_watermark"] = ErrorCode.request_timed_out, -1


async def handle(broker: Broker, ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    keys = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    topics = await broker.call_on(lambda known: partition_keys(known, keys), _delete, request,
                                  checker(broker, ctx, Operation.DELETE, ResourceType.TOPIC), broker)
    await _replicated(broker, topics, request.timeout.total_seconds())
    for t, asked in zip(topics, request.topics):
        for p, a in zip(t["partitions"], asked.partitions):
            audit_kafka(ctx, "DeleteRecords", f"topic {t['name']} partition {p['partition_index']} before offset {a.offset}",
                        p["error_code"])
    return {"throttle_time": 0, "topics": topics}
