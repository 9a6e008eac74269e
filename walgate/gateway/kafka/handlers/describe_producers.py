"""DescribeProducers (key 61) v0: the active producers of each requested partition (KIP-664).

Per partition, as Kafka's ``activeProducerState``: every producer id the partition keeps state for (see
:mod:`walgate.storage.producers`) with its epoch, last sequence, last timestamp, the coordinator epoch of its last
transaction marker and the first offset of its ongoing transaction (-1: none). A TDengine topic's partitions have
no producers. Errors, per topic as Kafka's ``handleDescribeProducersRequest`` checks them, in its order: an invalid
topic name INVALID_TOPIC_EXCEPTION, a topic the principal may not Read TOPIC_AUTHORIZATION_FAILED, an unknown topic
UNKNOWN_TOPIC_OR_PARTITION; then per partition UNKNOWN_TOPIC_OR_PARTITION for one the topic does not have.
"""

from __future__ import annotations

from collections.abc import Callable

from walgate.gateway.kafka.access import Operation, ResourceType, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue
from walgate.storage.partitions import Partitions
from walgate.storage.topic_configs import validate_topic_name
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeProducersResponsePartitionResponse,
    DescribeProducersResponseTopicResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 61, 0, 0


def _topic_error(engine: Engine, name: str, readable: Callable[[str], bool] | None) -> tuple[int, str | None]:
    known = engine.topic_id(name) is not None
    if not known:
        try:
            validate_topic_name(name)
        except InvalidValue as exc:
            return ErrorCode.invalid_topic_exception, exc.message
    if readable is not None and not readable(name):
        return ErrorCode.topic_authorization_failed, None
    if not known:
        return ErrorCode.unknown_topic_or_partition, f"unknown topic {name}"
    return ErrorCode.none, None


def _partition(partitions: Partitions, name: str, index: int) -> DescribeProducersResponsePartitionResponse:
    if not partitions.has(name, index):
        return {"partition_index": index, "error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": f"unknown partition {name}-{index}", "active_producers": []}
    try:
        producers = partitions.producers(name, index)
    except Exception as exc:  # noqa: BLE001 - mapped per partition, siblings unaffected
        return {"partition_index": index, "error_code": error_of(exc), "error_message": str(exc),
                "active_producers": []}
    return {"partition_index": index, "error_code": ErrorCode.none, "error_message": None, "active_producers": [
        {"producer_id": p.producer_id, "producer_epoch": p.epoch, "last_sequence": p.last_sequence,
         "last_timestamp": p.last_timestamp, "coordinator_epoch": p.coordinator_epoch,
         "current_txn_start_offset": p.txn_start_offset} for p in producers]}


def _answer(engine: Engine, request: DescribeProducersRequest,
            readable: Callable[[str], bool] | None) -> list[DescribeProducersResponseTopicResponse]:
    topics: list[DescribeProducersResponseTopicResponse] = []
    for t in request.topics:
        try:
            error, message = _topic_error(engine, t.name, readable)
        except Exception as exc:  # noqa: BLE001 - answered in the topic's partitions, other topics unaffected
            error, message = error_of(exc), str(exc)
        parts: list[DescribeProducersResponsePartitionResponse]
        if error != ErrorCode.none:
            parts = [{"partition_index": i, "error_code": error, "error_message": message, "active_producers": []}
                     for i in t.partition_indexes]
        else:
            parts = [_partition(engine.partitions, t.name, i) for i in t.partition_indexes]
        topics.append({"name": t.name, "partitions": parts})
    return topics


async def handle(broker: Broker, ctx: RequestContext, request: DescribeProducersRequest) -> DescribeProducersResponse:
    topics = await broker.call(_answer, request, checker(broker, ctx, Operation.READ, ResourceType.TOPIC))
    return {"throttle_time": 0, "topics": topics}
