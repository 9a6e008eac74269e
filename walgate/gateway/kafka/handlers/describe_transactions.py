"""DescribeTransactions (key 65) v0: each transactional id's producer, state, timeout, start time and partitions.

ACLs (Kafka's ``handleDescribeTransactionsRequest``): an id the principal may not Describe answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; topics it may not Describe are left out of the partitions. In cluster mode an
id another node coordinates answers NOT_COORDINATOR (the Admin client asks each id's coordinator).
"""

from __future__ import annotations

from typing import cast

from walgate.gateway.kafka.access import Operation, ResourceType, allowed, allowed_names
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.handlers.common import TRANSACTIONS, error_of
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsResponseTransactionState,
)

API_KEY, MIN_VERSION, MAX_VERSION = 65, 0, 0
State = DescribeTransactionsResponseTransactionState


def _failed(tid: str, code: int) -> State:
    """The answer of an id the coordinator does not describe: the schema's zero values."""
    return {"transactional_id": tid, "error_code": code, "transaction_state": "", "transaction_timeout": 0,
            "transaction_start_time": 0, "producer_id": 0, "producer_epoch": 0, "topics": []}


async def handle(broker: Broker, ctx: RequestContext,
                 request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    svc = broker.transactions
    ids = list(request.transactional_ids)
    visible = {tid for tid in ids if allowed(broker, ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid)}
    elsewhere = {tid: code for tid in visible if (code := await refusal(broker.coordinators, tid, transactional=True))}
    visible -= elsewhere.keys()
    try:
        if svc is None:
            described = {tid: {"transactional_id": tid, "error_code": ErrorCode.coordinator_not_available}
                         for tid in visible}
        else:
            described = await svc.call(lambda c: {tid: c.describe(tid) for tid in visible})
    except Exception as exc:  # noqa: BLE001 - answered, the connection stays
        code = error_of(exc, TRANSACTIONS)
        described = {tid: {"transactional_id": tid, "error_code": code} for tid in visible}
    states: list[State] = []
    for tid in ids:
        if tid in elsewhere:  # another node's transactional id (cluster mode), as Kafka's coordinator answers it
            states.append(_failed(tid, elsewhere[tid]))
            continue
        if tid not in visible:
            states.append(_failed(tid, ErrorCode.transactional_id_authorization_failed))
            continue
        # the coordinator answers in the response's field names; an error, with the id and the code only
        state = cast(State, {**_failed(tid, ErrorCode.none), **described[tid]})
        topics = state["topics"]
        shown = allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC, {t["topic"] for t in topics})
        state["topics"] = [t for t in topics if t["topic"] in shown]
        states.append(state)
    return {"throttle_time": 0, "transaction_states": states}
