"""InitProducerId (key 22) v0–v5: producer ids for idempotent and transactional producers.

A new idempotent producer gets a fresh id (allocated in durable blocks, never reused) at
epoch 0. A producer that names its id and epoch (v3+, KIP-360, after an
error it could not resolve) gets the same id at the next epoch, which resets
its sequences. An id the engine cannot allocate durably (the disk refused the write) is
COORDINATOR_LOAD_IN_PROGRESS, which every client retries (:mod:`.common`).

A transactional id goes to the transaction coordinator (:mod:`walgate.coordinator.transactions`): its producer id,
the epoch bumped (fencing any older producer of the id), the state durable before the answer; an ongoing
transaction is aborted first (markers written) and the answer is CONCURRENT_TRANSACTIONS, which the client retries.
``transaction_timeout`` above ``transaction.max.timeout.ms`` is INVALID_TRANSACTION_TIMEOUT; PRODUCER_FENCED is
answered as INVALID_PRODUCER_EPOCH below v4; a failed write of the transaction log is COORDINATOR_NOT_AVAILABLE. A
node without a coordinator (``broker.transactions`` None) answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED, fatal at
once in every client.

ACLs (as Kafka 4): a transactional id needs Write on it (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent
producer needs IdempotentWrite on the cluster or Write on some topic, else CLUSTER_AUTHORIZATION_FAILED.
In cluster mode a transactional id another node coordinates answers NOT_COORDINATOR, after the ACL checks
(docs/cluster.md, "Transaction coordinators"): the client looks its coordinator up again.
"""

from __future__ import annotations

from walgate.coordinator.transactions import Step, TransactionCoordinator
from walgate.gateway.kafka.access import Operation, ResourceType, allowed, by_resource_type, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import INIT_PRODUCER_ID, TRANSACTIONS, error_of, millis
from walgate.gateway.kafka.transactions import for_version
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import InitProducerIdRequest, InitProducerIdResponse

API_KEY, MIN_VERSION, MAX_VERSION = 22, 0, 5
_MAX_EPOCH = 32766


def _refused(code: int) -> InitProducerIdResponse:
    return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


async def _transactional(broker: Broker, ctx: RequestContext, tid: str,
                         request: InitProducerIdRequest) -> InitProducerIdResponse:
    svc = broker.transactions
    if svc is None or not allowed(broker, ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return _refused(ErrorCode.transactional_id_authorization_failed)
    if code := await refusal(broker.coordinators, tid, transactional=True):  # another node's transactional id (cluster mode)
        return _refused(code)
    pid, epoch = request.producer_id, request.producer_epoch  # -1 before v3
    if (pid == -1) != (epoch == -1):
        return _refused(ErrorCode.invalid_request)
    timeout = millis(request.transaction_timeout)

    def init(c: TransactionCoordinator, engine: Engine) -> Step:
        return c.init_producer_id(tid, timeout, None if pid == -1 else (pid, epoch), now_ms(),
                                  engine.producer_ids.allocate)

    try:
        step = await svc.decide(init)
    except Exception as exc:  # noqa: BLE001 - answered, the connection stays
        return _refused(error_of(exc, TRANSACTIONS))
    if step.error != ErrorCode.none or step.txn is None:
        return _refused(for_version(step.error, ctx.api_version, 4))
    return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": step.txn.producer_id,
            "producer_epoch": step.txn.producer_epoch}


async def handle(broker: Broker, ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        return await _transactional(broker, ctx, request.transactional_id, request)
    if not (cluster_allowed(broker, ctx, Operation.IDEMPOTENT_WRITE)
            or by_resource_type(broker, ctx, Operation.WRITE, ResourceType.TOPIC)):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "producer_id": -1,
                "producer_epoch": -1}
    pid, epoch = request.producer_id, request.producer_epoch  # -1 before v3
    if pid >= 0 and 0 <= epoch < _MAX_EPOCH:
        return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": pid, "producer_epoch": epoch + 1}
    try:
        new_pid = await broker.call(_allocate)
    except Exception as exc:  # noqa: BLE001 - answered, the connection stays
        return {"throttle_time": 0, "error_code": error_of(exc, INIT_PRODUCER_ID), "producer_id": -1,
                "producer_epoch": -1}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": new_pid, "producer_epoch": 0}


def _allocate(engine: Engine) -> int:
    return engine.producer_ids.allocate()
