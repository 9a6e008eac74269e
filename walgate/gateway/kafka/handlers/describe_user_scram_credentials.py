"""DescribeUserScramCredentials (key 50) v0 (KIP-554): each user's SCRAM mechanisms and iterations, never a key.

``users`` null or empty: every user; a named user without credentials is RESOURCE_NOT_FOUND, a name given twice
DUPLICATE_RESOURCE (Kafka's answers and messages); a failure of the store is the top-level error code. Authorization: with ACLs, Describe on the cluster
(else CLUSTER_AUTHORIZATION_FAILED at the top level); without an authorizer every client may call it, as in Kafka.
"""

from __future__ import annotations

from walgate.gateway.kafka.access import Operation, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import answered
from walgate.security.scram import mechanism_type
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 50, 0, 0


def _describe(engine: Engine, names: list[str] | None) -> list[tuple[str, str | None, str, list[tuple[str, int]]]]:
    return engine.users.describe_scram(names)


async def handle(broker: Broker, ctx: RequestContext,
                 request: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse:
    names = [u.name for u in request.users] if request.users else None
    if not cluster_allowed(broker, ctx, Operation.DESCRIBE):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "error_message": "Describe on the cluster is needed", "results": []}
    return await answered(_answer(broker, names), lambda code: {
        "throttle_time": 0, "error_code": code, "error_message": None, "results": []})


async def _answer(broker: Broker, names: list[str] | None) -> DescribeUserScramCredentialsResponse:
    results = await broker.call(_describe, names)
    return {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
        "results": [
            {"user": user, "error_code": ErrorCode[error.lower()] if error else ErrorCode.none,
             "error_message": message or None,
             "credential_infos": [{"mechanism": mechanism_type(m), "iterations": i} for m, i in infos]}
            for user, error, message, infos in results
        ],
    }
