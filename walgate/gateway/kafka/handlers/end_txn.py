"""EndTxn (key 26) v0–v5: commit or abort the producer's ongoing transaction.

The decision (PrepareCommit / PrepareAbort) is made durable, then a marker is written into every partition of the
transaction and, on commit, the offsets TxnOffsetCommit gave are committed to their groups; the answer comes once
that is done (:mod:`walgate.gateway.kafka.transactions`), so a read_committed consumer sees the outcome as soon as the
producer does. A retry of a finished EndTxn answers NONE, one of a decided but unfinished one
CONCURRENT_TRANSACTIONS, the opposite outcome INVALID_TXN_STATE; PRODUCER_FENCED is answered as
INVALID_PRODUCER_EPOCH below v2.

v5 is transaction version 2 (KIP-890 part 2), decided on the request version alone as Kafka's
``transactionVersionForEndTxn`` does (whatever the finalized ``transaction.version``): the epoch is bumped by every
EndTxn (the markers carry the bumped one), an abort with no transaction is accepted, a retry names the epoch before
the bump, and the answer carries the producer id and epoch the producer goes on with (a new producer id at epoch 0
when the epoch is exhausted); -1 / -1 with an error. The rules per state are
:meth:`~walgate.coordinator.transactions.TransactionCoordinator.end_txn`'s.

ACLs (Kafka's ``handleEndTxnRequest``): Write on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
In cluster mode a transactional id another node coordinates answers NOT_COORDINATOR, after the ACL checks
(docs/cluster.md, "Transaction coordinators"): the client looks its coordinator up again.
"""

from __future__ import annotations

from walgate.coordinator.transactions import Step, TransactionCoordinator
from walgate.gateway.kafka.access import Operation, ResourceType, allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import TRANSACTIONS, error_of
from walgate.gateway.kafka.transactions import for_version
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import EndTxnRequest, EndTxnResponse

API_KEY, MIN_VERSION, MAX_VERSION = 26, 0, 5
_V2_SINCE = 5  # Kafka's transactionVersionForEndTxn: v5 and later are transaction version 2
_NO_PRODUCER = (-1, -1)


async def _end(broker: Broker, ctx: RequestContext, request: EndTxnRequest) -> tuple[int, tuple[int, int]]:
    svc, version = broker.transactions, ctx.api_version
    tid = request.transactional_id
    if svc is None:
        return ErrorCode.coordinator_not_available, _NO_PRODUCER
    if not allowed(broker, ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return ErrorCode.transactional_id_authorization_failed, _NO_PRODUCER
    if code := await refusal(broker.coordinators, tid, transactional=True):  # another node's transactional id (cluster mode)
        return code, _NO_PRODUCER
    tv = 2 if version >= _V2_SINCE else 0

    def end(c: TransactionCoordinator, engine: Engine) -> Step:
        return c.end_txn(tid, request.producer_id, request.producer_epoch, request.committed, now_ms(), tv,
                         engine.producer_ids.allocate)

    try:
        step = await svc.decide(end)
    except Exception as exc:  # noqa: BLE001 - answered, the connection stays
        return error_of(exc, TRANSACTIONS), _NO_PRODUCER
    if step.error != ErrorCode.none:
        return for_version(step.error, version, 2), _NO_PRODUCER
    return ErrorCode.none, step.producer or _NO_PRODUCER


async def handle(broker: Broker, ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    error, (producer_id, producer_epoch) = await _end(broker, ctx, request)
    return {"throttle_time": 0, "error_code": error, "producer_id": producer_id,  # producer: v5+ only
            "producer_epoch": producer_epoch}
