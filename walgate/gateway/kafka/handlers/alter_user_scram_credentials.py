"""AlterUserScramCredentials (key 51) v0 (KIP-554): upsert or delete users' SCRAM credentials.

An upsertion carries the salt, iterations and SaltedPassword the client computed (``kafka-configs --alter
--add-config 'SCRAM-SHA-256=[password=...]'``, the Java Admin's ``alterUserScramCredentials``); walgate stores the
StoredKey and ServerKey derived from it. Each user's changes apply together or not at all (the store's
``alter_scram``), with Kafka's errors: UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL (iterations outside
4096..16384, an empty name), DUPLICATE_RESOURCE (one mechanism of a user twice), RESOURCE_NOT_FOUND (deleting a
credential that does not exist). A user whose last credential is deleted is dropped (``root`` keeps its last one).
The same users are SQL's (``CREATE USER`` / ``SHOW USERS``). Authorization: with ACLs, Alter on the cluster (else
CLUSTER_AUTHORIZATION_FAILED for every user); without an authorizer every client may call it, as in Kafka. Every
change is audited (user and mechanism, never a salt or key).
"""

from __future__ import annotations

import time

from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import answered
from walgate.security.scram import mechanism_name
from walgate.storage.engine import Engine
from walgate.storage.users import CredentialChange
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 51, 0, 0


def _alter(engine: Engine, changes: list[CredentialChange], now_ms: int) -> list[tuple[str, str | None, str]]:
    return engine.users.alter_scram(changes, now_ms)


async def handle(broker: Broker, ctx: RequestContext,
                 request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    changes = [CredentialChange(d.name, mechanism_name(d.mechanism), False) for d in request.deletions]
    changes += [CredentialChange(u.name, mechanism_name(u.mechanism), True, u.iterations, u.salt, u.salted_password)
                for u in request.upsertions]
    users = dict.fromkeys(c.user for c in changes)
    if not cluster_allowed(broker, ctx, Operation.ALTER):
        results: list[tuple[str, str | None, str]] = [
            (user, "CLUSTER_AUTHORIZATION_FAILED", "Alter on the cluster is needed") for user in users]
    else:
        results = await answered(broker.call(_alter, changes, int(time.time() * 1000)),
                                 lambda code: [(user, code.name.upper(), "") for user in users])
    outcome = {user: ErrorCode[error.lower()] if error else ErrorCode.none for user, error, _ in results}
    for c in changes:
        audit_kafka(ctx, "AlterUserScramCredentials", f"user {c.user} {'upsert' if c.upsertion else 'delete'} {c.mechanism}",
                    outcome.get(c.user, ErrorCode.none))
    return {
        "throttle_time": 0,
        "results": [{"user": user, "error_code": ErrorCode[error.lower()] if error else ErrorCode.none,
                     "error_message": message or None} for user, error, message in results],
    }
