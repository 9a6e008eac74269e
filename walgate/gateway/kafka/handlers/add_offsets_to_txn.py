"""AddOffsetsToTxn (key 25) v0–v4: a consumer group's offsets may be committed in the producer's transaction.

The group joins the transaction (starting one); TxnOffsetCommit then adds its offsets, which the group sees only
when the transaction commits (:mod:`walgate.coordinator.transactions`). PRODUCER_FENCED is answered as
INVALID_PRODUCER_EPOCH below v2.

ACLs (Kafka's ``handleAddOffsetsToTxnRequest``): Write on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then Read on the group (else GROUP_AUTHORIZATION_FAILED).
In cluster mode a transactional id another node coordinates answers NOT_COORDINATOR, after the ACL checks
(docs/cluster.md, "Transaction coordinators"): the client looks its coordinator up again. Another cluster node sends
it too (:mod:`walgate.gateway.kafka.node_auth`): a group's coordinator given a TxnOffsetCommit v5 of an id this node
coordinates; the client's ACLs were checked there, and the add is transaction version 2's (as the TxnOffsetCommit
v5 it stands for), so the transaction keeps its version.
"""

from __future__ import annotations

from walgate.coordinator.transactions import Step, TransactionCoordinator
from walgate.gateway.kafka.access import Operation, ResourceType, allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import TRANSACTIONS, error_of
from walgate.gateway.kafka.node_auth import from_cluster_node
from walgate.gateway.kafka.transactions import for_version
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse

API_KEY, MIN_VERSION, MAX_VERSION = 25, 0, 4


async def _error(broker: Broker, ctx: RequestContext, request: AddOffsetsToTxnRequest) -> int:
    svc = broker.transactions
    tid, group = request.transactional_id, request.group_id
    if svc is None:
        return ErrorCode.coordinator_not_available
    if from_cluster_node(broker, ctx):
        pass  # a group's coordinator for a TxnOffsetCommit it took: it checked the client's ACLs
    elif not allowed(broker, ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return ErrorCode.transactional_id_authorization_failed
    elif not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, group):
        return ErrorCode.group_authorization_failed
    if code := await refusal(broker.coordinators, tid, transactional=True):  # another node's transactional id (cluster mode)
        return code

    tv = 2 if from_cluster_node(broker, ctx) else 0  # a node sends it for a TxnOffsetCommit v5 (an implicit add)

    def add(c: TransactionCoordinator, engine: Engine) -> Step:
        return c.add_offsets(tid, request.producer_id, request.producer_epoch, group, now_ms(), tv=tv)

    try:
        return for_version((await svc.decide(add)).error, ctx.api_version, 2)
    except Exception as exc:  # noqa: BLE001 - answered, the connection stays
        return error_of(exc, TRANSACTIONS)


async def handle(broker: Broker, ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    return {"throttle_time": 0, "error_code": await _error(broker, ctx, request)}
