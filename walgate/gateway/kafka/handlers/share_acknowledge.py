"""ShareAcknowledge (key 79) v1–v2: acknowledgements outside a fetch (KIP-932), e.g. a consumer's commitSync or
close.

The request carries the member's share session's next epoch (0: INVALID_SHARE_SESSION_EPOCH, a session is opened
by ShareFetch only) or -1, which applies the acknowledgements, then closes the session and releases the records
the member still holds. Each partition answers its acknowledgements' outcome (INVALID_RECORD_STATE for records the
member does not hold); they are durable (``share_groups.log``) before the answer, else every partition answers
KAFKA_STORAGE_ERROR and nothing changed.

In cluster mode a partition placed on another node, or a replicated one this node does not lead now (as Fetch
decides), answers NOT_LEADER_OR_FOLLOWER with its ``current_leader`` and the leader's endpoint in ``node_endpoints``
(KIP-951), its acknowledgements not applied
(:mod:`walgate.gateway.kafka.share_leaders`).

ACLs (as Kafka's ``handleShareAcknowledgeRequest``): Read on the group, else GROUP_AUTHORIZATION_FAILED at the top
level; a partition of a topic the principal may not Read answers TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import uuid

from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.handlers.share_fetch import Refused, ack_batches, admitted, resolve
from walgate.gateway.kafka.share_leaders import Leaders, elsewhere, requested
from walgate.gateway.kafka.shares import now_ms
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareAcknowledgeResponsePartitionData,
)

API_KEY, MIN_VERSION, MAX_VERSION = 79, 1, 2


def _top(error: int, message: str | None = None) -> ShareAcknowledgeResponse:
    """A ShareAcknowledge answer with a top-level error and no partitions."""
    return {"throttle_time": 0, "error_code": error, "error_message": message, "acquisition_lock_timeout": 0,
            "responses": [], "node_endpoints": []}


async def handle(broker: Broker, ctx: RequestContext, request: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    group_id, member_id, epoch = request.group_id or "", request.member_id or "", request.share_session_epoch
    admission = admitted(broker, ctx, group_id)
    if isinstance(admission, Refused):
        return _top(admission.error, admission.message)
    shares, readable = admission
    placed: dict[tuple[str, int], tuple[int, int]] = {}  # the request's partitions not served here, their leaders

    def acknowledge(topics: TopicsSnapshot, coordinator: ShareCoordinator) -> tuple[int, str | None, int,
                                                                             dict[tuple[str, int], tuple[int, str | None]]]:
        code, message = coordinator.session(group_id, member_id, epoch, fetch=False, now_ms=now_ms())
        if code != ErrorCode.none:
            return code, message, 0, {}
        names, errors = resolve(topics, request.topics, readable)
        out: dict[tuple[str, int], tuple[int, str | None]] = {tp: (e, None) for tp, e in errors.items()}
        placed.update(elsewhere(broker, topics, requested(names, request.topics)))
        out.update((tp, (ErrorCode.not_leader_or_follower, None)) for tp in placed)
        acks = [b for b in ack_batches(request.topics, names) if (b.topic, b.partition) not in placed]
        for tp, result in coordinator.acknowledge(group_id, member_id, acks, now_ms(), error_of).items():
            out[tp] = (result.ack_error, result.ack_message)
        if epoch == -1:
            coordinator.close(group_id, member_id)
        return ErrorCode.none, None, coordinator.logs.settings(group_id).lock_ms, out

    try:
        code, message, lock_ms, results = await shares.run(acknowledge)
    except Exception as exc:  # noqa: BLE001 - a refused write: every partition answers it, nothing changed
        error = error_of(exc)
        code, message, lock_ms = ErrorCode.none, None, 0
        results = {(str(t.topic_id), p.partition_index): (int(error), None) for t in request.topics
                   for p in t.partitions}
    if code != ErrorCode.none:
        return _top(code, message)
    leaders = Leaders(broker, ctx.listener.name, placed)
    grouped: dict[str, list[ShareAcknowledgeResponsePartitionData]] = {}
    for (topic, partition), (outcome, text) in results.items():
        leader = leaders.of(topic, partition)
        grouped.setdefault(topic, []).append({
            "partition_index": partition, "error_code": outcome, "error_message": text,
            "current_leader": {"leader_id": leader[0], "leader_epoch": leader[1]}})
    return {**_top(ErrorCode.none), "acquisition_lock_timeout": lock_ms,
            "responses": [{"topic_id": uuid.UUID(t), "partitions": parts} for t, parts in grouped.items()],
            "node_endpoints": leaders.endpoints(results)}
