"""ListTransactions (key 66) v0–v2: the transactional ids this node coordinates, filtered by state, producer id,
(v1) how long the transaction has been running and (v2, KIP-1152) a regular expression the transactional id must
match whole (as Java's ``Matcher.matches``; null or empty: no filter). A pattern that does not compile answers
INVALID_REGULAR_EXPRESSION with no transaction, as Kafka's coordinator refuses it. Python's ``re`` reads the pattern:
the common syntax (classes, groups, quantifiers, alternation, anchors) is Java's.

State names this node does not know are answered in ``unknown_state_filters`` (and match nothing), as Kafka does.
ACLs (Kafka's ``handleListTransactionsRequest``): only ids the principal may Describe are listed.
"""

from __future__ import annotations

import re

from walgate.coordinator.transactions import STATE_NAMES
from walgate.gateway.kafka.access import Operation, ResourceType, allowed_names
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import TRANSACTIONS, error_of
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    ListTransactionsRequest,
    ListTransactionsResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 66, 0, 2


async def handle(broker: Broker, ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    svc = broker.transactions
    states = list(request.state_filters)
    unknown = [s for s in states if s not in STATE_NAMES]
    answer: ListTransactionsResponse = {"throttle_time": 0, "error_code": ErrorCode.none,
                                        "unknown_state_filters": unknown,
                                        "transaction_states": []}
    if svc is None:
        return {**answer, "error_code": ErrorCode.coordinator_not_available}
    duration = request.duration_filter
    raw = request.transactional_id_pattern
    try:
        pattern = re.compile(raw) if raw else None
    except (re.error, OverflowError, RecursionError):
        return {**answer, "error_code": ErrorCode.invalid_regular_expression}
    try:
        txns = await svc.call(lambda c: c.list(states, request.producer_id_filters, duration, now_ms(), pattern))
    except Exception as exc:  # noqa: BLE001 - answered, the connection stays
        return {**answer, "error_code": error_of(exc, TRANSACTIONS)}
    shown = allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, {t.transactional_id for t in txns})
    answer["transaction_states"] = [
        {"transactional_id": t.transactional_id, "producer_id": t.producer_id, "transaction_state": t.state.value}
        for t in sorted(txns, key=lambda t: t.transactional_id) if t.transactional_id in shown
    ]
    return answer
