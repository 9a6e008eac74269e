"""InitProducerId (key 22) v0–v5: producer ids for idempotent producers; transactions are refused.

A new producer gets a fresh id (allocated in durable blocks, never reused) at
epoch 0. A producer that names its id and epoch (v3+, KIP-360, after an
error it could not resolve) gets the same id at the next epoch, which resets
its sequences. A transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
walgate has no transaction coordinator, and the error is fatal at once in
every client (rather than retried until a timeout). An id the engine cannot
allocate durably (the disk refused the write) is COORDINATOR_LOAD_IN_PROGRESS,
which every client retries (:mod:`.common`).

ACLs (as Kafka 4): an idempotent producer needs IdempotentWrite on the cluster or Write on some topic, else
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from walgate.gateway.kafka.access import Operation, ResourceType, by_resource_type, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.common import INIT_PRODUCER_ID, error_of
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 22, 0, 5
_MAX_EPOCH = 32766


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    if request.transactional_id is not None:
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed,
                "producer_id": -1, "producer_epoch": -1}
    if not (cluster_allowed(broker, Operation.IDEMPOTENT_WRITE)
            or by_resource_type(broker, Operation.WRITE, ResourceType.TOPIC)):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "producer_id": -1,
                "producer_epoch": -1}
    pid, epoch = getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1)
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
