"""The audit log: one INFO line on the ``walgate.audit`` logger per change of what exists or who may do what.

Logged, whether they succeed or not (never a validate-only request): every ``/rest/sql`` statement that
:func:`sql_change` names (``CREATE``/``DROP``/``ALTER`` of databases, supertables, tables, topics, users;
``GRANT``/``REVOKE``; ``REDISTRIBUTE``/``BALANCE VGROUP``, ``DROP DNODE``), the Kafka admin changes CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs,
DeleteRecords, DeleteGroups and AlterClientQuotas, and what the modules changing users and ACLs over Kafka report
through :func:`audit_kafka`.
Each line names the principal (``User:name``, Kafka's form), the peer address, the operation, the resource and the
outcome; with ``--log-format json`` these are the fields ``principal``, ``peer``, ``operation``, ``resource`` and
``outcome`` of the line's object (:mod:`walgate.gateway.logs`), e.g.::

    audit: User:root from 127.0.0.1: CREATE USER "CREATE USER alice PASS '***'": ok
    audit: User:ANONYMOUS from 10.0.0.7: DeleteTopics topic orders: failed: UNKNOWN_TOPIC_OR_PARTITION

Secrets never reach the log: every resource and outcome passes :func:`~walgate.security.secrets.mask_secrets`.
"""

from __future__ import annotations

import logging
import re

from walgate.gateway.kafka.context import RequestContext
from walgate.security.secrets import mask_secrets
from walgate.wire.errors import ErrorCode

__all__ = ["audit", "audit_kafka", "kafka_outcome", "sql_change"]

log = logging.getLogger("walgate.audit")

_MAX_RESOURCE = 300  # characters of a resource kept in the line (a statement can be long)
_SQL_CHANGE = re.compile(r"\s*(CREATE|DROP|ALTER|GRANT|REVOKE|REDISTRIBUTE|BALANCE)\b(?:\s+(DATABASE|STABLE|TABLE|TOPIC|USER"
                         r"|CONSUMER\s+GROUP|INDEX|VIEW|STREAM|SMA|FUNCTION|DNODE|VGROUP))?", re.I)


def audit(principal: str, peer: str, operation: str, resource: str, outcome: str) -> None:
    """Log one audit line: ``principal`` (``User:name``) from ``peer`` (an address) did ``operation`` (e.g.
    ``CreateTopics``, ``CREATE USER``) on ``resource`` (e.g. ``topic orders``, or a SQL statement) with ``outcome``
    (``ok``, or ``failed: <why>``). Secrets in ``resource`` and ``outcome`` are masked before anything is logged."""
    resource = " ".join(mask_secrets(resource).split())
    if len(resource) > _MAX_RESOURCE:
        resource = resource[:_MAX_RESOURCE] + "..."
    outcome = mask_secrets(outcome)
    log.info("audit: %s from %s: %s %s: %s", principal, peer, operation, resource, outcome,
             extra={"principal": principal, "peer": peer, "operation": operation, "resource": resource,
                    "outcome": outcome})


def kafka_outcome(error_code: int) -> str:
    """``ok`` for error code 0, else ``failed: <Kafka's error name>``."""
    if error_code == 0:
        return "ok"
    try:
        return f"failed: {ErrorCode(error_code).name.upper()}"
    except ValueError:
        return f"failed: error code {error_code}"


def audit_kafka(ctx: RequestContext, operation: str, resource: str, error_code: int) -> None:
    """:func:`audit` of a Kafka request: its principal and peer (``ctx``)."""
    audit(ctx.principal, ctx.peer, operation, resource, kafka_outcome(error_code))


def sql_change(statement: str) -> str | None:
    """The operation (``CREATE DATABASE``, ``DROP TOPIC``, ``GRANT``, ...) when ``statement`` is one the audit log
    records (DDL, users, grants), else None (queries, INSERT, SHOW, USE): a prefix match, no parsing."""
    match = _SQL_CHANGE.match(statement)
    if match is None:
        return None
    return " ".join(w.upper() for w in match.group(0).split())
