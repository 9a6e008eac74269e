"""EndTxn (key 26) v0–v4: commit or abort the producer's ongoing transaction.

The decision (PrepareCommit / PrepareAbort) is made durable, then a marker is written into every partition of the
transaction and, on commit, the offsets TxnOffsetCommit gave are committed to their groups; the answer comes once
that is done (:mod:`walgate.gateway.kafka.transactions`), so a read_committed consumer sees the outcome as soon as the
producer does. A retry of a finished EndTxn answers NONE, one of a decided but unfinished one
CONCURRENT_TRANSACTIONS, the opposite outcome INVALID_TXN_STATE; PRODUCER_FENCED is answered as
INVALID_PRODUCER_EPOCH below v2. v5 (KIP-890 part 2: an epoch bump with every transaction) is not served.

ACLs (Kafka's ``handleEndTxnRequest``): Write on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from walgate.coordinator.transactions import Step, TransactionCoordinator
from walgate.gateway.kafka.access import Operation, ResourceType, allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.transactions import TRANSACTIONS, for_version
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 26, 0, 4


async def _error(broker: Broker, version: int, request: Any) -> int:
    svc = broker.transactions
    tid = request.transactional_id
    if svc is None:
        return ErrorCode.coordinator_not_available
    if not allowed(broker, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return ErrorCode.transactional_id_authorization_failed

    def end(c: TransactionCoordinator, engine: Engine) -> Step:
        return c.end_txn(tid, request.producer_id, request.producer_epoch, request.committed, now_ms())

    try:
        return for_version((await svc.decide(end)).error, version, 2)
    except Exception as exc:  # noqa: BLE001 - answered, the connection stays
        return error_of(exc, TRANSACTIONS)


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": await _error(broker, header.api_version, request)}
