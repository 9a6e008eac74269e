"""The HTTP API (aiohttp): TDengine-REST SQL, InfluxDB line protocol, CSV, health, metrics.

Routes:

- ``POST /rest/sql`` and ``POST /rest/sql/{db}``: the body is one SQL statement;
  ``{db}`` is the current database for unqualified names (REST is stateless).
  Answer, TDengine-REST style: ``{"code": 0, "column_meta": [[name, type, len], ...],
  "data": [[...], ...], "rows": n}``; a write answers ``column_meta``
  ``[["affected_rows", "INT", 4]]`` and ``data`` ``[[n]]``. ``USE db`` adds
  ``"database": db`` so a client can carry the current database forward.
- ``POST /influxdb/v1/write?db=D&precision=ns|us|ms|s`` (default ``ns``): line
  protocol; 204 on success like InfluxDB, with the number of rows written in the
  ``X-Walgate-Rows`` header.
- ``POST /csv/v1/write?db=D&table=T`` or ``&stable=ST``: CSV with a header row;
  answers ``{"code": 0, "rows": n}``.
- ``POST /cluster/v1/tables`` (cluster mode, another node's signed request only): which tables exist here
  (:func:`~.sql_forward.tables_exist`).
- ``GET /healthz`` (liveness): ``{"status": "ok", "quarantined": [...]}``, 200 whenever the event loop answers:
  it means "alive", never "busy" (a long INSERT or DDL on the storage thread must not make an orchestrator
  restart a healthy node; readiness tells whether the lanes answer). Damage found in the data dir
  (``engine.damage()``: file, byte range, reason, action, the copy kept, WAL versions lost) was quarantined and
  everything intact is served, so it does not fail liveness (a restart would not help); the list tells operators
  what was lost.
- ``GET /readyz`` (readiness): 200 ``{"status": "ready", "checks": {...}}`` when
  the storage thread (``storage_thread``) and the coordinator lane (``coordinator_lane``, when the app is made with
  it) each answer within ``HEALTH_TIMEOUT`` seconds (asked at once), the data dir is
  writable (the storage thread writes, fsyncs and removes ``PROBE_NAME`` in it)
  and every listener accepts connections (and, in cluster mode, ``cluster``: the node is a registered member of its
  cluster, and ``replicas``: it read the partition states and is in the ISR of every vgroup it replicates,
  :func:`~walgate.gateway.replica_status.replicas_check`, else the vgroups it is still catching up on); else 503
  ``{"status": "not ready", "failed": [names], "checks": {name: "ok" or what failed}}``.
- ``GET /metrics``: Prometheus text format (:mod:`walgate.gateway.metrics`), when
  the app is made with the node's metrics; 503 if the storage thread does not answer.
- ``GET /ui`` and ``/ui/api/...``: the web console (:mod:`walgate.gateway.console`), when the app is made with
  the node's group service.

Cross-origin browser requests (a foreign ``Origin``, ``Sec-Fetch-Site: cross-site``) get 403 before any handler
runs (:mod:`walgate.gateway.http_origin`).

In cluster mode an INSERT with rows for vgroups placed on other nodes (refused here with ``NotHere`` before anything
is written) is split by owning node and each other node's part forwarded to it (:mod:`walgate.gateway.sql_forward`),
and so is a CREATE TABLE or DROP TABLE naming tables of such vgroups, a CREATE STABLE whose name's vgroup is
there (that node alone sees a normal table of the name) and a CREATE TOPIC of one table there (that node alone knows
its columns); a request carrying that module's ``FORWARDED`` header is
such a part: the statement's clauses (tables) at the positions it names, run here or refused, never forwarded
again. It is accepted only signed with the cluster's node token
(:mod:`walgate.security.node_token`), for the caller principal and client address it carries, and with
``basic_auth`` only for a principal that is a user here (403 otherwise). A
SELECT whose database has vgroups elsewhere is run by each node over its own and merged here; its parts are stopped
(the other nodes' requests closed) when the client goes away or ``sql.timeout.ms`` passes.

A ``/rest/sql`` statement that changes what exists or who may do what (DDL, users, grants) is written to the audit
log with its outcome (:mod:`walgate.gateway.audit`).
Authentication (:mod:`walgate.gateway.http_auth`): when the app is made with ``basic_auth``, every route but
``/healthz`` and ``/readyz`` needs HTTP Basic credentials of a walgate user (401 with ``WWW-Authenticate: Basic
realm="walgate"`` otherwise, checked before the body is read); ``request[PRINCIPAL]`` is ``User:name``, or
``User:ANONYMOUS`` without ``basic_auth``, and ``request[HOST]`` the client's address: what authorization
(``/rest/sql`` and the other handlers) reads (for a signed forwarded request, the caller's it carries).

Errors are JSON ``{"code": <int>, "desc": "<message>"}``, TDengine-REST style:
400 for bad input or a configured limit (a :class:`StorageError`, e.g.
:class:`LimitExceeded` with its message; the engine guarantees nothing was
written), 413 for a body above ``max_request_bytes`` (refused from
``Content-Length`` before it is read, or as soon as reading passes the limit;
nothing written), 503 when the disk refused a write
(:class:`StorageUnavailable`, or an ``OSError`` the storage layer let through;
nothing kept, retry later) or a write's replicated vgroup has no leader here now (:class:`NotLedNow`; nothing
written, retry), or the in-sync replicas did not acknowledge a write in time (kept or lost: issue 25, an SQL, line
protocol or CSV write waits for the high watermark of what it appended to replicated vnodes led here), or the ingest worker planning a large body died
(:mod:`walgate.gateway.ingest_workers`; nothing written, retry) or the group-commit fdatasync of a WAL_LEVEL 2 write
failed (not acknowledged; its rows become visible if a later fdatasync succeeds,
see :mod:`walgate.storage.wal`), 500 with TDengine's "WAL file is corrupted" code
for stored data that fails its checksum, 500 for anything unexpected (logged
with its traceback). Handlers stay thin: every engine call goes through the
:class:`StorageThread`, but for a SELECT's run, in the :class:`QueryWorkers` (prepared on the storage thread), and
parsing, on a thread of its own, and but for SHOW CONSUMERS / SUBSCRIPTIONS and DROP CONSUMER GROUP, asked of the
coordinator lane first (:mod:`walgate.gateway.coordinator_sql`). A SELECT stopped because its client went away or it passed ``sql.timeout.ms`` answers 400
with TDengine's "Query killed" code (0x022D); one scanning more than ``sql.max.bytes`` 400 with its limit.

Authorization: when the node has an authorizer (``authorizer_class_name``), SQL, line protocol and CSV are checked
against the Kafka ACLs for the request's principal (``request[PRINCIPAL]``, set by authentication; ``User:ANONYMOUS``
without it) before anything runs (:mod:`walgate.security.sql_access`): refused with 403 and TDengine's
"Insufficient privilege" code (0x0303). ``/metrics`` and the console's data (``/ui/api/...``) are for super users
then.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import asdict
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST

from walgate.cluster.model import ControlPlaneError
from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.gateway import cluster_sql, coordinator_sql
from walgate.gateway.audit import audit, sql_change
from walgate.gateway.cluster_member import ClusterMember
from walgate.gateway.console import add_console
from walgate.gateway.http_auth import AUTH_FAILURE, UNAUTHENTICATED_PATHS, BasicAuth
from walgate.gateway.http_origin import Origin, same_origin_middleware
from walgate.gateway.ingest_workers import IngestWorkers, Prepared, Refused
from walgate.gateway.kafka.context import ANONYMOUS
from walgate.gateway.kafka.groups import GroupService
from walgate.gateway.metrics import Metrics
from walgate.gateway.query_workers import POLL_S, QueryWorkers, Spool
from walgate.gateway.replica_status import replicas_check
from walgate.gateway.replicas import ReplicaManager
from walgate.gateway.schemaless import Changes, LocalSchemas, no_other_node, with_schemas
from walgate.gateway.shared_catalog import SharedCatalog
from walgate.gateway.sql_forward import (
    FORWARDED,
    HERE,
    ROWS_HEADER,
    SCAN,
    TABLES,
    TABLES_PATH,
    Caller,
    Outcome,
    PartsBudget,
    SelectPart,
    answer,
    merge_rows,
    parse_tables,
    select_here,
    select_part,
    select_timeout,
    send,
    tables_exist,
)
from walgate.gateway.storage_thread import StorageThread
from walgate.replication.partition import NO_LEADER
from walgate.security.acl import Operation, ResourceType
from walgate.security.authorizer import Authorizer
from walgate.security.node_token import (
    CATALOG_SEQ,
    CLIENT_HOST,
    HEAD_SIGNATURE,
    HEADERS,
    SIGNATURE,
    TIME,
    VERSION,
    VERSION_HEADER,
    Signed,
    head_refusal,
    header_refusal,
    refusal,
)
from walgate.security.node_token import PRINCIPAL as PRINCIPAL_HEADER
from walgate.security.sql_access import NotPermitted, check, check_needs, database_resource, visible
from walgate.storage import fileio
from walgate.storage.catalog import DatabaseDef
from walgate.storage.damage import DamageLog
from walgate.storage.engine import Engine, PreparedSelect, Result
from walgate.storage.errors import (
    ClusterUnavailable,
    InvalidValue,
    LimitExceeded,
    NotAcknowledged,
    NotHere,
    NotLedNow,
    QueryCancelled,
    RequestTooLarge,
    SqlSyntaxError,
    StorageError,
    StorageUnavailable,
    table_not_found,
)
from walgate.storage.ingest import insert_databases, write_keys
from walgate.storage.insert_routing import (
    Part,
    TableDdl,
    parse_positions,
    parse_sender,
    split_csv,
    split_insert,
    split_lines,
    split_tables,
    tables_at,
    targets_at,
)
from walgate.storage.lanes import VnodeKey, database_keys
from walgate.storage.led_appends import LedAppend, recording
from walgate.storage.lineproto_columns import parse_body
from walgate.storage.query import plain
from walgate.storage.result import affected
from walgate.storage.select_merge import ARROW_STREAM, check_led
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse
from walgate.storage.vnode import vnode_of
from walgate.storage.wal import CorruptEntry
from walgate.storage.write_plan import CsvRequest, InsertRequest, LinesRequest, WriteSnapshot, not_a_supertable
from walgate.wire.errors import ErrorCode

__all__ = ["make_app", "PRINCIPAL", "HOST", "INTERNAL_ERROR", "WAL_FILE_CORRUPTED", "ROWS_HEADER", "HEALTH_TIMEOUT",
           "PROBE_NAME"]

log = logging.getLogger(__name__)

INTERNAL_ERROR = 0xFFFF  # "code" of a 500 answer: a walgate bug, not bad input
WAL_FILE_CORRUPTED = 0x1001  # TDengine's TSDB_CODE_WAL_FILE_CORRUPTED
HEALTH_TIMEOUT = 5.0  # seconds /readyz waits for each lane
_INSERT = re.compile(r"\s*insert\s", re.IGNORECASE)  # an SQL body sent to the ingest workers (which check it is one)
PROBE_NAME = ".walgate-ready-probe"  # the file /readyz writes, fsyncs and removes in the data dir

_ENGINE = web.AppKey("engine", Engine)
_STORAGE = web.AppKey("storage", StorageThread)
_COORDINATOR = web.AppKey("coordinator", StorageThread)
_GROUPS = web.AppKey("groups", GroupService)
_QUERIES = web.AppKey("queries", QueryWorkers)
_DAMAGE = web.AppKey("damage", DamageLog)
_INGEST = web.AppKey("ingest", IngestWorkers)
_MAX_REQUEST_BYTES = web.AppKey("max_request_bytes", int)
_METRICS = web.AppKey("metrics", Metrics)
_LISTENERS: web.AppKey[Callable[[], dict[str, bool]]] = web.AppKey("listeners")
_CLUSTER: web.AppKey[Callable[[], str | None]] = web.AppKey("cluster")
_SHARED: web.AppKey[Callable[[], SharedCatalog | None]] = web.AppKey("shared")
_REPLICAS: web.AppKey[Callable[[], ReplicaManager | None]] = web.AppKey("replicas")
_MEMBER: web.AppKey[Callable[[], ClusterMember | None]] = web.AppKey("member")
ACK_TIMEOUT_S = 30.0
"""How long an SQL, line-protocol or CSV write waits for the in-sync replicas (Kafka's ``request.timeout.ms``)."""
_AUTHORIZER = web.AppKey("authorizer", Authorizer)
_BASIC_AUTH: web.AppKey[BasicAuth | None] = web.AppKey("basic_auth")
_NODE_TLS: web.AppKey[ssl.SSLContext | None] = web.AppKey("node_tls")
PRINCIPAL = web.RequestKey("principal", str)
"""``request[PRINCIPAL]``: the principal of an HTTP request (``User:name``, or ``User:ANONYMOUS`` without auth)."""
HOST = web.RequestKey("host", str)
"""``request[HOST]``: the client's address ACLs are checked with: the peer's, or for a request another node of the
cluster forwarded (signed: :mod:`walgate.security.node_token`), its client's."""


def make_app(
    engine: Engine, storage: StorageThread, queries: QueryWorkers, damage: DamageLog, *, max_request_bytes: int,
    groups: GroupService | None = None, coordinator: StorageThread | None = None,
    metrics: Metrics | None = None, listeners: Callable[[], dict[str, bool]] | None = None,
    authorizer: Authorizer | None = None,
    allowed_origins: frozenset[Origin] = frozenset(),
    basic_auth: BasicAuth | None = None,
    ingest: IngestWorkers | None = None,
    shares: Callable[[], ShareCoordinator | None] | None = None,
    cluster: Callable[[], str | None] | None = None,
    shared: Callable[[], SharedCatalog | None] | None = None,
    node_tls: ssl.SSLContext | None = None,
    replicas: Callable[[], ReplicaManager | None] | None = None,
    member: Callable[[], ClusterMember | None] | None = None,
) -> web.Application:
    """The aiohttp application serving ``engine`` through ``storage`` (SELECTs on ``queries``; ``damage``: the
    engine's damage log, which ``/healthz`` reads on the event loop: it is only appended to); with the node's
    ``groups``, also the web console (:mod:`walgate.gateway.console`; ``shares()``: the share coordinator, whose
    share groups it shows beside them; in cluster mode ``member()``, the node's membership, and ``replicas()`` for
    its cluster page); with its ``metrics``, ``/metrics``. ``/readyz`` asks ``storage`` and, with the node's
    ``coordinator`` lane, that lane too (without it the coordinators run on the storage thread), and
    ``listeners()`` whether each listener besides HTTP (by name) accepts connections, and in cluster mode
    ``cluster()`` why the node is not a member of its cluster (None: it is); statements run through ``shared()``
    once it is not None (the cluster's users and ACLs: :mod:`.shared_catalog`). Cross-origin browser requests are
    refused before anything runs, except from ``allowed_origins`` (:mod:`walgate.gateway.http_origin`); with
    ``basic_auth``, requests need a user's credentials (module docstring); ``node_tls`` verifies other nodes'
    HTTPS certificates when parts of a statement are forwarded to them (None: the system's CAs)."""
    app = web.Application(client_max_size=max_request_bytes,
                          middlewares=[same_origin_middleware(allowed_origins), _errors, _authenticate])
    app[_BASIC_AUTH] = basic_auth
    app[_NODE_TLS] = node_tls
    app[_ENGINE] = engine
    app[_STORAGE] = storage
    if coordinator is not None:
        app[_COORDINATOR] = coordinator
    app[_QUERIES] = queries
    app[_DAMAGE] = damage
    app[_MAX_REQUEST_BYTES] = max_request_bytes
    if ingest is not None:
        app[_INGEST] = ingest
    if authorizer is not None:
        app[_AUTHORIZER] = authorizer
    app.router.add_post("/rest/sql", _sql)
    app.router.add_post("/rest/sql/{db}", _sql)
    app.router.add_post("/influxdb/v1/write", _influx_write)
    app.router.add_post("/csv/v1/write", _csv_write)
    app.router.add_post(TABLES_PATH, _tables)
    app.router.add_get("/healthz", _healthz)
    app[_LISTENERS] = listeners if listeners is not None else dict
    if cluster is not None:
        app[_CLUSTER] = cluster
    if shared is not None:
        app[_SHARED] = shared
    if replicas is not None:
        app[_REPLICAS] = replicas
    if member is not None:
        app[_MEMBER] = member  # REDISTRIBUTE / BALANCE VGROUP, DROP DNODE (cluster_sql)
    app.router.add_get("/readyz", _readyz)
    if metrics is not None:
        app[_METRICS] = metrics
        app.router.add_get("/metrics", _metrics)
    if groups is not None:
        app[_GROUPS] = groups  # SHOW CONSUMERS / SUBSCRIPTIONS, DROP CONSUMER GROUP: from its lane (coordinator_sql)
        add_console(app, engine, storage, groups, shares, member, replicas)
    return app


# ------------------------------------------------------------------ handlers


async def _sql(request: web.Request) -> web.StreamResponse:
    with recording() as appended:  # what the statement appends to replicated vnodes led here: waited for
        return await _statement(request, appended)


async def _statement(request: web.Request, appended: list[LedAppend]) -> web.StreamResponse:
    """``/rest/sql``'s statement run; answered once the in-sync replicas hold what it ``appended`` (the caller's
    :func:`~walgate.storage.led_appends.recording`), an INSERT, CREATE TABLE or DROP TABLE alike."""
    body = await request.read()
    try:
        sql = body.decode("utf-8")
    except UnicodeDecodeError:
        raise SqlSyntaxError("the SQL in the request body is not valid UTF-8") from None
    app = request.app
    db = request.match_info.get("db")
    authorizer = app.get(_AUTHORIZER)
    principal = request.get(PRINCIPAL, ANONYMOUS)
    if authorizer is not None and principal in authorizer.super_users:
        authorizer = None  # nothing to check
    change = sql_change(sql)  # audited, or None
    shared = app[_SHARED]() if _SHARED in app else None
    forwarded = request.headers.get(FORWARDED)  # a part of an INSERT another node was asked (sql_forward.py)
    host = request[HOST]
    stmt: ast.Statement | None = None  # once parsed
    try:
        engine = app[_ENGINE]
        ingest = app.get(_INGEST)
        if forwarded is not None:
            stmt = await asyncio.to_thread(_forwarded_part, sql, forwarded)
        elif ingest is not None and ingest.takes(len(body)) and _INSERT.match(sql):  # parsed, planned in a worker
            write = InsertRequest(sql, db, engine.clock.time_ns())
            planned = await ingest.plan(write, _snapshot(app))
            if isinstance(planned, Prepared):
                assert planned.insert is not None
                _still_there(request, len(body))
                rows = await app[_STORAGE].call_on(
                    write_keys(planned.write, planned.write.databases),
                    functools.partial(_apply_insert, engine, authorizer, principal, host, planned, write, db))
                await _acknowledged(app, appended)
                return _json(200, affected(rows).rest_body())
            if isinstance(planned, Refused):
                if authorizer is not None:  # a principal that may not write there learns nothing else
                    await app[_STORAGE].call(check, authorizer, principal, host, planned.insert, db)
                raise planned.error
            stmt = planned.stmt
        else:
            # parsed once, off the storage thread, on the loop's default executor (the body is within
            # max_request_bytes, the engine's statement limit)
            stmt = await asyncio.to_thread(parse, sql)
        if isinstance(stmt, ast.Select) or (forwarded is not None and isinstance(stmt, ast.Show)):
            return await _read(request, authorizer, principal, host, stmt, db, forwarded)
        if cluster_sql.moves_replicas(stmt):  # asked of the controller, from the event loop
            if authorizer is not None:
                check(authorizer, principal, host, stmt, db)
            result = await cluster_sql.run(stmt, engine, app[_STORAGE], app[_MEMBER]() if _MEMBER in app else None,
                                           app[_REPLICAS]() if _REPLICAS in app else None, db)
        elif _GROUPS in app and coordinator_sql.on_coordinator_lane(stmt):  # never the storage lane waiting for it
            if authorizer is not None:
                check(authorizer, principal, host, stmt, db)
            result = await coordinator_sql.run(stmt, engine, app[_GROUPS], app[_STORAGE])
            if authorizer is not None:
                result = visible(authorizer, principal, host, stmt, result)
        elif isinstance(stmt, ast.Insert):  # holding the vnodes of the databases it writes (Ingest.write)
            run = functools.partial(_run, engine, authorizer, principal, host, stmt, db)
            result = await app[_STORAGE].call_on(_database_keys(app, insert_databases(stmt, db)), run,
                                                 None if shared is None else functools.partial(shared.run, run))
        elif shared is not None:  # cluster mode: users and grants are the cluster's
            if forwarded is None and isinstance(stmt, ast.CreateStable):
                await app[_STORAGE].call(_name_here, engine, stmt.name, db)
            result = await shared.run(_run, engine, authorizer, principal, host, stmt, db)
        else:
            result = await app[_STORAGE].call(_run, engine, authorizer, principal, host, stmt, db)
    except NotHere:  # rows for another node's vgroup: nothing written; each node's part sent to it
        if shared is None or forwarded is not None:
            raise
        if _INSERT.match(sql) or isinstance(stmt, TableDdl):
            try:
                response = await _forward_statement(request, shared, authorizer, principal, host, body, db)
            except Exception as exc:  # (raised here, in an except clause, it passes the except clauses below)
                if change is not None:
                    audit(principal, host, change, sql, _failed(exc))
                raise
            if change is not None:  # each owner audits its part too
                audit(principal, host, change, sql, "ok" if response.status == 200 else
                      f"failed: HTTP {response.status} (the statement spans nodes: each node's part audited there)")
            return response
        if isinstance(stmt, ast.Select) or (isinstance(stmt, ast.Show) and stmt.what == "TABLES"):
            return await _merge_select(request, shared, authorizer, principal, host, body, stmt, db)
        raise
    except NotPermitted as e:  # the same ACLs as Kafka clients (walgate.security.sql_access); nothing run
        if change is not None:
            audit(principal, host, change, sql, f"refused: {e.message}")
        return _error(403, e.code, e.message)
    except Exception as exc:
        if change is not None:
            audit(principal, host, change, sql, _failed(exc))
        raise
    await _acknowledged(app, appended)
    if change is not None:
        audit(principal, host, change, sql, "ok")
    return _json(200, result.rest_body())


def _led(app: web.Application, db: DatabaseDef) -> DatabaseDef:
    """``db`` as a write or a merged read is routed: a replicated vgroup to its current leader (issue 25,
    :meth:`ReplicaManager.led_database <walgate.gateway.replicas.ReplicaManager.led_database>`), any other to the
    node it is placed on."""
    replicas = app[_REPLICAS]() if _REPLICAS in app else None
    return db if replicas is None else replicas.led_database(db)


def _led_databases(app: web.Application, engine: Engine) -> dict[str, DatabaseDef]:
    """Every database of ``engine``'s catalog as :func:`_led` routes it (on the storage lane)."""
    return {name: _led(app, d) for name, d in engine.catalog.databases.items()}


async def _acknowledged(app: web.Application, appended: list[LedAppend]) -> None:
    """After a write on this node (SQL INSERT, CREATE or DROP TABLE, line protocol, CSV): acks=all, once the in-sync
    replicas hold what it ``appended`` to the replicated vnodes this node leads (issue 25,
    :meth:`ReplicaManager.writes_acknowledged <walgate.gateway.replicas.ReplicaManager.writes_acknowledged>`); not
    acknowledged within :data:`ACK_TIMEOUT_S`, the ISR below ``MIN_INSYNC`` once passed, or this node deposed
    first: :class:`~walgate.storage.errors.NotAcknowledged` (503, outcome ``unknown``: the write may be kept or lost,
    as a Kafka producer's timed-out acks=all write; the part of a write spanning nodes is reported so, never "NOT
    written"). Nothing appended there (one-copy databases, a single node): no wait at all. (A write refused before its
    append because the ISR is below ``MIN_INSYNC`` raised :class:`~walgate.storage.errors.NotEnoughReplicas`.)"""
    replicas = app[_REPLICAS]() if _REPLICAS in app else None
    if replicas is None or not appended:
        return
    error = await replicas.writes_acknowledged(appended, ACK_TIMEOUT_S)
    if error != ErrorCode.none:
        raise NotAcknowledged(f"the write was not acknowledged by the in-sync replicas ({error.name.upper()}): it "
                                 "may be kept or lost; retry it")


def _failed(exc: Exception) -> str:
    """The audit outcome of a change that raised ``exc``."""
    return f"failed: {exc.message if isinstance(exc, StorageError) else exc}"


def _forwarded_part(sql: str, header: str) -> ast.Insert | TableDdl | ast.Select | ast.Show:
    """The part of the INSERT, CREATE [S]TABLE, DROP TABLE, CREATE TOPIC, SELECT or SHOW TABLES ``sql`` another node
    forwarded here (its :data:`~.sql_forward.FORWARDED` ``header``: ``<sender>;<positions>`` of an INSERT or of the
    tables of a CREATE [S]TABLE, DROP TABLE or CREATE TOPIC of one table, ``<sender>;here;<now ns>`` or
    ``<sender>;scan;<now ns>`` of a SELECT, then ``;<vgroups>`` (:func:`~.sql_forward.select_part`), ``<sender>;here``
    or ``<sender>;here;;<vgroups>`` of a SHOW TABLES);
    InvalidValue when the header is malformed or does not fit the statement."""
    sender, sep, positions = header.partition(";")
    parse_sender(sender)
    stmt = parse(sql)
    if sep and (part := select_part(positions)) is not None and isinstance(stmt, ast.Select) and (
            part.now_ns is not None or part.vgroups is None):  # (a node of the version before names neither)
        return stmt
    if sep and part is not None and not part.scan and part.now_ns is None and isinstance(stmt, ast.Show) and \
            stmt.what == "TABLES":
        return stmt
    if sep and positions not in (HERE, SCAN) and isinstance(stmt, TableDdl):
        return tables_at(stmt, parse_positions(positions))
    if not sep or not isinstance(stmt, ast.Insert):
        raise InvalidValue(f"a forwarded part ({FORWARDED}: {header[:100]!r}) must name positions of an INSERT, "
                           f"a CREATE TABLE, a DROP TABLE or a CREATE TOPIC, {HERE!r} or {SCAN!r} and the instant "
                           f"of now (ns) of a SELECT, or {HERE!r} of a SHOW TABLES")
    return targets_at(stmt, parse_positions(positions))


def _forwarded_as(request: web.Request, rest: str) -> None:
    """InvalidValue unless ``request`` is no forwarded part or its :data:`~.sql_forward.FORWARDED` header is
    ``<sender>;<rest>``, as :mod:`.sql_forward` sends it: ``rest`` empty for a line-protocol or CSV body's part (its
    own lines, named by no positions), :data:`~.sql_forward.TABLES` for the question which tables exist."""
    header = request.headers.get(FORWARDED)
    if header is None:
        return
    sender, sep, given = header.partition(";")
    parse_sender(sender)
    if not sep or given != rest:
        raise InvalidValue(f"a forwarded request to {request.path} ({FORWARDED}: {header[:100]!r}) names its sender "
                           f"and {rest!r}")


async def _read(request: web.Request, authorizer: Authorizer | None, principal: str, host: str,
                stmt: ast.Select | ast.Show, db: str | None, forwarded: str | None) -> web.StreamResponse:
    """A SELECT, or another node's part of one or of a SHOW TABLES (``forwarded``: its :data:`~.sql_forward.FORWARDED`
    header, :func:`_forwarded_part`): the rows of the vgroups it routed here, its ``now`` the node asked's. A vgroup
    routed here that this node no longer leads (its leadership moved since the node asked read it) answers 503, the
    query to be retried (never its rows left out). A SELECT asked here of vgroups held elsewhere raises
    :class:`NotHere` (NotLedNow for one this node holds but does not lead), which :func:`_statement` merges."""
    part = select_part(forwarded.partition(";")[2]) if forwarded is not None else None
    try:
        if isinstance(stmt, ast.Show):  # another node's SHOW TABLES: this node's tables
            result = await request.app[_STORAGE].call(_run_here, request.app[_ENGINE], authorizer, principal, host,
                                                      stmt, db, None if part is None else part.vgroups)
            return _json(200, result.rest_body())
        if part is not None and part.scan and plain(stmt):  # (select_merge.py)
            part = dataclasses.replace(part, scan=False)
        _, selected = await _select(request, authorizer, principal, host, stmt, db, part)
    except NotLedNow as e:
        if forwarded is None:  # (the statement's own: merged over the nodes, _statement)
            raise
        return _error(503, e.code, e.message)  # (the error middleware's answer is a write's)
    return await selected.send(request, ARROW_STREAM if part is not None and part.scan else
                               "application/json")  # from its file


async def _select(request: web.Request, authorizer: Authorizer | None, principal: str, host: str,
                  select: ast.Select, db: str | None, here: SelectPart | None = None) -> tuple[PreparedSelect, Spool]:
    """``select`` prepared once ``principal`` may run it and its JSON answer, run in a query worker (``here``: this
    node's part of a SELECT merged over nodes: :class:`~.sql_forward.SelectPart`, its vgroups, scanned rows as Arrow
    IPC or not, its ``now``: :meth:`~walgate.storage.select.Selects.prepare`), in the file the worker wrote
    (:mod:`~walgate.gateway.answer_spool`: the caller sends or reads it); raises its error."""
    app = request.app
    engine = app[_ENGINE]

    def prepare() -> Awaitable[PreparedSelect]:  # once a query slot is free; holding its database's vnodes alone
        return app[_STORAGE].call_on(_database_keys(app, {select.source.db or db}), functools.partial(
            _prepared, engine, authorizer, principal, host, select, db, here))

    return await _query(request, prepare)


async def _query(request: web.Request, prepare: Callable[[], Awaitable[PreparedSelect]]) -> tuple[PreparedSelect, Spool]:
    """The query ``prepare()`` gives (awaited once a query slot is free) and its answer from a query worker, in the
    file the worker wrote; the damage it found rechecked; raises its error."""
    app = request.app
    engine = app[_ENGINE]
    prepared, answer, spool = await app[_QUERIES].run(prepare, lambda: _gone(request))
    try:
        if answer.damaged:
            await app[_STORAGE].call(engine.recheck, prepared.db, answer.damaged)
    except BaseException:
        if spool is not None:
            spool.close()
        raise
    if answer.error is not None:
        if isinstance(answer.error, QueryCancelled):
            log.info("SELECT from %s stopped: %s", request[HOST], answer.error.message)
        raise answer.error
    assert spool is not None
    return prepared, spool


async def _not_permitted(storage: StorageThread, authorizer: Authorizer | None, principal: str, host: str,
                         stmt: ast.Statement, db: str | None) -> web.Response | None:
    """403 when ``principal`` may not run the whole of ``stmt`` (checked on the storage lane, before any part of it
    is sent to another node); None when it may or there is no ``authorizer``."""
    try:
        if authorizer is not None:
            await storage.call(check, authorizer, principal, host, stmt, db)
    except NotPermitted as e:
        return _error(403, e.code, e.message)
    return None


async def _merge_select(request: web.Request, shared: SharedCatalog, authorizer: Authorizer | None,
                        principal: str, host: str, body: bytes, stmt: ast.Select | ast.Show,
                        db: str | None) -> web.StreamResponse:
    """The SELECT or SHOW TABLES ``stmt`` (``body``'s text; current database ``db``), whose database has vgroups on
    other nodes: run by every node holding one over its own vgroups (this node in its query workers, the others
    asked through :func:`~.sql_forward.select_here`) at once, once ``principal`` may run it here, and merged; any
    node failing fails it whole, naming that node (never a partial answer). Every node's part of a SELECT reads
    ``now`` at one instant, this node's clock read once here (sent with each part: :func:`~.sql_forward.select_part`),
    as one node's query reads it once. A plain SELECT and SHOW TABLES: the
    nodes' answers concatenated (:func:`~.sql_forward.merge_rows`); any other SELECT: every node's scanned rows
    (this node's included) merged by the query run over them in a query worker here
    (:mod:`walgate.storage.select_merge`). Bounded by ``sql.max.bytes``, as on one node: the parts this node holds
    (:class:`~.sql_forward.PartsBudget`, counted as they are read), and the merge's rows in the worker; and by
    ``sql.timeout.ms`` (no limit when 0), every part awaited as long as the statement may run
    (:func:`~.sql_forward.select_timeout`)."""
    app = request.app
    engine, storage = app[_ENGINE], app[_STORAGE]
    refused = await _not_permitted(storage, authorizer, principal, host, stmt, db)
    if refused is not None:
        return refused
    local = engine.catalog.node_id
    select = stmt if isinstance(stmt, ast.Select) else None
    named = select.source.db if select is not None else stmt.db if isinstance(stmt, ast.Show) else None
    dbdef = _led(app, await storage.call(engine.store.resolve_db, named, db))
    replicas = app[_REPLICAS]() if _REPLICAS in app else None
    read: Collection[int] = range(dbdef.vgroups)  # the vgroups the statement reads
    # replicated: a vgroup with no leader now fails the statement (without the replica manager its rows would be left
    # out: no node leads it); one copy: each vgroup is read where it is placed, nothing to check (no lane call)
    if replicas is not None and dbdef.any_replicated:
        state_of = functools.partial(replicas.state_of, dbdef.id)
        alone = None  # a table read alone: its vgroup's leader is all it needs (rv4 R6)
        if select is not None and not await storage.call(_is_stable, engine, dbdef.name, select.source.name):
            alone = select.source.name
            read = (vnode_of(dbdef.name, alone, dbdef.vgroups),)
        check_led(dbdef, lambda vgroup: None if (state := state_of(vgroup)) is None else state.leader, alone)
    scan = select is not None and not plain(select)
    now_ns = engine.clock.time_ns() if select is not None else None  # every node's part reads ``now`` at this one
    # each vgroup read by exactly the node this one routes it to (its leader as read here), which refuses it when it
    # no longer leads it (NotLedNow): never left out, nor read twice, while a leadership moves
    routed = {v: dbdef.node_of(v, local) for v in read}
    nodes = sorted(set(routed.values()) | ({local} if scan else set()))  # scan: merged here, so run here
    assigned = {node: tuple(v for v in read if routed[v] == node) for node in nodes}
    urls = {info.node_id: info.http for info in shared.member.view.nodes}
    path = "/rest/sql" + (f"/{db}" if db else "")
    caller = _caller(request, shared)
    prepared: list[PreparedSelect] = []  # this node's scan, which the merge runs as
    budget = PartsBudget(app[_QUERIES].max_bytes)  # every node's part, this node's too, as it is read

    async def here() -> tuple[int, dict[str, Any] | bytes]:
        try:
            if select is None:
                assert isinstance(stmt, ast.Show)
                return 200, (await storage.call(_run_here, engine, authorizer, principal, host, stmt, db,
                                                assigned[local])).rest_body()
            scanned, spool = await _select(request, authorizer, principal, host, select, db,
                                           SelectPart(scan, now_ns, assigned[local]))
            prepared.append(scanned)
            if scan:
                try:
                    budget.take(spool.size)  # before it is read into memory
                except LimitExceeded:
                    spool.close()
                    raise
            answered = await spool.read()
            return 200, answered if scan else orjson.loads(answered)
        except StorageError as e:  # what the error middleware answers for it
            status = 503 if isinstance(e, (StorageUnavailable, NotLedNow)) else 403 if isinstance(e, NotPermitted) \
                else 400
            return status, {"code": e.code, "desc": f"node {local}: {e.message}"}

    answers = await _unless_gone(*(
        here() if node == local else select_here(node, urls.get(node), path, body, local, caller,
                                                 select_timeout(app[_QUERIES].timeout_s),
                                                 SelectPart(scan, now_ns, assigned[node]), budget if scan else None)
        for node in nodes), request=request, timeout=app[_QUERIES].timeout_s)
    for node, (status, answered) in zip(nodes, answers, strict=True):
        if status != 200:
            assert isinstance(answered, dict)
            desc = str(answered.get("desc", ""))
            what = "SELECT" if select is not None else "SHOW TABLES"
            return _error(status, int(answered.get("code", 0)), f"{what} of database {dbdef.name}, spread over nodes "
                          f"{', '.join(map(str, nodes))}: {desc if desc.startswith('node ') else f'node {node}: {desc}'}")
    if scan:
        blobs = tuple(answered for _, answered in answers if isinstance(answered, bytes))
        merge = dataclasses.replace(prepared[0], scan=False, sources=(), vgroups=(), remote=blobs)
        async def merged_here() -> PreparedSelect:
            return merge

        _, spool = await _query(request, merged_here)
        return await spool.send(request)
    parts = [answered for _, answered in answers if isinstance(answered, dict)]
    merged = orjson.dumps(merge_rows(select.limit if select is not None else None, parts, ordered=select is None))
    if len(merged) > app[_QUERIES].max_bytes:
        raise LimitExceeded(f"the query's answer is larger than {app[_QUERIES].max_bytes} bytes (sql.max.bytes), "
                            "merged from its nodes: narrow it, or add a LIMIT")
    return web.Response(body=merged, content_type="application/json")


async def _forward_statement(request: web.Request, shared: SharedCatalog, authorizer: Authorizer | None,
                             principal: str, host: str, body: bytes, db: str | None) -> web.Response:
    """The INSERT, CREATE TABLE, CREATE STABLE, DROP TABLE or CREATE TOPIC of ``body`` (current database ``db``),
    which has rows for, or names tables of, vgroups on other nodes, run as one part per owning node
    (:func:`~walgate.storage.insert_routing.split_insert`, :func:`~walgate.storage.insert_routing.split_tables`:
    IF [NOT] EXISTS kept; a CREATE STABLE goes to the node of its name's vgroup, which alone sees a normal table of
    that name, a CREATE TOPIC of one table to the table's node, which alone knows its columns): this node's here,
    every other node's sent to it (:mod:`.sql_forward`), all at once, once ``principal`` may run the whole statement
    here (nothing is sent otherwise); each owner checks its part again for the caller. A supertable or topic made by
    another node is known here too once answered."""
    app = request.app
    engine, storage = app[_ENGINE], app[_STORAGE]
    stmt = await asyncio.to_thread(parse, body.decode("utf-8"))
    if not isinstance(stmt, ast.Insert | TableDdl):
        raise InvalidValue("the statement is not an INSERT, CREATE TABLE, CREATE STABLE, DROP TABLE or CREATE TOPIC")
    refused = await _not_permitted(storage, authorizer, principal, host, stmt, db)
    if refused is not None:
        return refused
    local = engine.catalog.node_id
    parts = await storage.call(lambda: split_insert(stmt, db, _led_databases(request.app, engine), local)
                               if isinstance(stmt, ast.Insert) else
                               split_tables(stmt, db, _led_databases(request.app, engine), local))
    if all(part.node == local for part in parts):  # placed here after all: answered as any statement here
        result = await _run_acknowledged(app, shared, engine, authorizer, principal, host, stmt, db)
        return _json(200, result.rest_body())
    if isinstance(stmt, ast.DropTable) and not stmt.if_exists:
        await _all_exist(request, shared, stmt, db)

    async def write_here(part: Part) -> int:
        at = targets_at(stmt, part.positions) if isinstance(stmt, ast.Insert) else tables_at(stmt, part.positions)
        result = await _run_acknowledged(app, shared, engine, authorizer, principal, host, at, db)
        return result.affected_rows or 0

    what = "INSERT" if isinstance(stmt, ast.Insert) else "DROP TABLE" if isinstance(stmt, ast.DropTable) else \
        "CREATE STABLE" if isinstance(stmt, ast.CreateStable) else "CREATE TOPIC" \
        if isinstance(stmt, ast.CreateTopic) else "CREATE TABLE"
    response = await _forward(request, shared, body, parts, "/rest/sql" + (f"/{db}" if db else ""), None, write_here,
                              lambda rows: _json(200, affected(rows).rest_body()), what)
    if response.status == 200 and isinstance(stmt, (ast.CreateStable, ast.CreateTopic)):  # staged by its owner:
        try:  # known here too (a DROP TABLE naming a supertable is never forwarded: storage/ddl.py drop_table)
            await shared.catch_up()
        except ClusterUnavailable as e:  # made: the client is answered so, and this node learns it later
            log.warning("a %s made by another node is not known here yet: %s", what, e.message)
    return response


async def _run_acknowledged(app: web.Application, shared: SharedCatalog, engine: Engine,
                            authorizer: Authorizer | None, principal: str, host: str, stmt: ast.Statement,
                            db: str | None) -> Result:
    """``stmt`` run here as :func:`_run` runs it, answered once the in-sync replicas hold what it appended
    (:func:`_acknowledged`): this node's part of a statement spanning nodes, as every other node answers its own."""
    with recording() as appended:
        result = await shared.run(_run, engine, authorizer, principal, host, stmt, db)
    await _acknowledged(app, appended)
    return result


async def _all_exist(request: web.Request, shared: SharedCatalog, stmt: ast.DropTable, db: str | None) -> None:
    """NotFound naming the first table of ``stmt``'s list that does not exist, wherever its vgroup is, as one node
    refuses such a DROP TABLE before it drops any (TDengine's parser looks every table up first)."""
    named = [(name.db or db or "", name.name) for name in stmt.names]  # every one resolved: the statement ran here
    missing = [i for i, exists in enumerate(await _exist(request, shared, named)) if not exists]
    if missing:
        raise table_not_found(*named[missing[0]])


async def _no_table_named(request: web.Request, shared: SharedCatalog, changes: Changes) -> None:
    """InvalidValue, as one node refuses the write, when a supertable ``changes`` would make is named like a table of
    its database (on the node of its name's vgroup: tables live in their vnodes, not in the cluster's catalog)."""
    made = [(new.db, new.name) for old, new in changes if old is None]
    for (db, name), exists in zip(made, await _exist(request, shared, made) if made else [], strict=True):
        if exists:
            raise not_a_supertable(db, name)


async def _exist(request: web.Request, shared: SharedCatalog, tables: list[tuple[str, str]]) -> list[bool]:
    """Whether each ``(database, table)`` of ``tables`` exists, asked of the node of its vgroup, every node at once
    (this one on the storage lane, the others through :func:`~.sql_forward.tables_exist`: StorageUnavailable when one
    cannot be asked)."""
    app = request.app
    engine, storage = app[_ENGINE], app[_STORAGE]
    local = engine.catalog.node_id

    def owners() -> dict[int, list[int]]:  # node -> positions in tables
        by_node: dict[int, list[int]] = {}
        for i, (db, name) in enumerate(tables):
            dbdef = _led(app, engine.catalog.database(db))
            by_node.setdefault(dbdef.node_of(vnode_of(db, name, dbdef.vgroups), local), []).append(i)
        return by_node

    by_node = await storage.call(owners)
    urls = {info.node_id: info.http for info in shared.member.view.nodes}
    caller = _caller(request, shared)

    async def ask(node: int, positions: list[int]) -> list[bool]:
        asked = [tables[i] for i in positions]
        if node == local:
            return await storage.call(engine.store.tables_exist, asked)
        return await tables_exist(node, urls.get(node), asked, local, caller)

    exist = [False] * len(tables)
    answers = await asyncio.gather(*(ask(node, positions) for node, positions in by_node.items()))
    for positions, answered in zip(by_node.values(), answers, strict=True):
        for i, exists in zip(positions, answered, strict=True):
            exist[i] = exists
    return exist


async def _tables(request: web.Request) -> web.Response:
    """Another node's question which tables exist here (:data:`~.sql_forward.TABLES_PATH`), each in a vgroup placed
    here: ``{"code": 0, "exist": [bool, ...]}``. Answered only to a request signed by a node of the cluster
    (:func:`_authenticate` verified it, and this node applied the catalog up to the sender's record first); it tells
    that node whether the tables exist, for a statement whose caller's ACLs it checked."""
    if FORWARDED not in request.headers:
        return _error(403, NotPermitted.code, f"Insufficient privilege: {TABLES_PATH} is for the cluster's nodes")
    _forwarded_as(request, TABLES)
    tables = parse_tables(await request.read())
    exist = await request.app[_STORAGE].call(request.app[_ENGINE].store.tables_exist, tables)
    return _json(200, {"code": 0, "exist": exist})


async def _here(part: Part, local: int, write: Awaitable[Outcome]) -> Outcome:
    """The outcome of ``part`` written on this node (``local``) by ``write``, never an exception, so that the client
    learns what became of every other part: an error the error middleware answers with "nothing written" (a
    StorageError, an OSError) makes it not written; one that may have been done all the same
    (:class:`StorageUnavailable` ``maybe_applied``: a change the cluster's catalog may still apply, a write appended
    that the in-sync replicas did not acknowledge) and anything else (damaged data, a bug: logged) unknown."""
    try:
        return await write
    except StorageUnavailable as e:
        return Outcome(part, "unknown" if e.maybe_applied else "not_written", status=503, code=e.code,
                       desc=f"node {local}: {e.message}")
    except StorageError as e:
        status = 413 if isinstance(e, RequestTooLarge) else 503 if isinstance(e, NotLedNow) \
            else 403 if isinstance(e, NotPermitted) else 400
        return Outcome(part, "not_written", status=status, code=e.code, desc=f"node {local}: {e.message}")
    except OSError as e:
        return Outcome(part, "not_written", status=503, code=StorageUnavailable.code,
                       desc=f"node {local}: storage error: {e}")
    except Exception as e:
        log.exception("unexpected error writing this node's part of a write spanning nodes")
        return Outcome(part, "unknown", status=500, code=INTERNAL_ERROR,
                       desc=f"node {local}: internal error: {type(e).__name__}: {e}")


def _gone(request: web.Request) -> bool:
    """Whether the client of ``request`` closed its connection."""
    return request.transport is None or request.transport.is_closing()


def _prepared(engine: Engine, authorizer: Authorizer | None, principal: str, host: str, stmt: ast.Select,
              db: str | None, here: SelectPart | None) -> PreparedSelect:
    """``stmt`` prepared if ``principal`` may run it (storage thread; no ``authorizer``: no check; ``here``: this
    node's part of a merged SELECT, None for the whole of it); NotPermitted otherwise."""
    if authorizer is not None:
        check(authorizer, principal, host, stmt, db)
    if here is None:
        return engine.prepare_select(stmt, db)
    return engine.prepare_select(stmt, db, True, here.scan, here.now_ns, here.vgroups)


def _snapshot(app: web.Application) -> Callable[[list[tuple[str, str]]], Awaitable[WriteSnapshot]]:
    """What a worker plans a write against, taken on the storage thread (with the tables it must know)."""
    return lambda keys: app[_STORAGE].call(app[_ENGINE].write_snapshot, keys)


async def _planned_write(request: web.Request, write: LinesRequest | CsvRequest, size: int) -> int:
    """``write`` (``size`` bytes of ``request``) planned in an ingest worker, then applied on the storage lane: its
    schema changes first, alone, then the rest holding the vnodes of the databases it writes
    (:func:`~walgate.storage.ingest.write_keys`); rows written."""
    app = request.app
    planned = await app[_INGEST].plan(write, _snapshot(app))
    assert isinstance(planned, Prepared)  # only an SQL body may turn out to be no write
    _still_there(request, size)
    prepared = planned.write
    if prepared.changes:  # new or wider supertables: made first, alone, so that the rows hold only their vnodes
        changed = await app[_STORAGE].call(app[_ENGINE].apply_schema_changes, prepared)
        if changed is None:  # what it read changed: planned again and written whole, with the whole lane
            return await app[_STORAGE].call(app[_ENGINE].apply_write, prepared, write)
        prepared = changed
    return await app[_STORAGE].call_on(write_keys(prepared, prepared.databases),
                                       functools.partial(app[_ENGINE].apply_write, prepared, write))


def _still_there(request: web.Request, size: int) -> None:
    """StorageUnavailable, so that nothing is written, when the client of a planned write went away: it has no
    answer, and may well send the write again."""
    if _gone(request):
        log.info("a write of %d bytes from %s was planned after its client went away: not written", size,
                 request.remote)
        raise StorageUnavailable("the client went away before the write was applied: nothing was written")


def _apply_insert(engine: Engine, authorizer: Authorizer | None, principal: str, host: str, planned: Prepared,
                  write: InsertRequest, db: str | None) -> int:
    """The INSERT ``planned`` written if ``principal`` may run it (storage thread; checked on the statement without
    its rows); NotPermitted otherwise."""
    if authorizer is not None:
        check(authorizer, principal, host, planned.insert, db)
    return engine.apply_write(planned.write, write)


def _is_stable(engine: Engine, db: str, name: str) -> bool:
    return (db, name) in engine.catalog.stables


def _name_here(engine: Engine, name: ast.Name, db: str | None) -> None:
    """:class:`NotHere` when ``name`` is not a supertable of its (cluster) database and its name's vgroup is on
    another node (storage thread): that node alone sees a normal table of that name, so a CREATE STABLE of it is
    sent there and refused the same through every node. An unknown database is left to the statement to answer."""
    try:
        dbdef = engine.store.resolve_db(name.db, db)
    except StorageError:
        return
    if (dbdef.name, name.name) not in engine.catalog.stables:
        engine.store.vnode(dbdef.name, name.name)


def _run_here(engine: Engine, authorizer: Authorizer | None, principal: str, host: str, stmt: ast.Show,
              db: str | None, vgroups: Collection[int] | None) -> Result:
    """``SHOW TABLES`` over this node's vgroups (its part of a database spread over nodes; ``vgroups``: those the
    node asked assigned here), as :func:`_run` runs a statement: checked, and cut to what ``principal`` may see."""
    if authorizer is not None:
        check(authorizer, principal, host, stmt, db)
    result = engine.show_tables_here(stmt, db, vgroups)
    return result if authorizer is None else visible(authorizer, principal, host, stmt, result)


def _run(engine: Engine, authorizer: Authorizer | None, principal: str, host: str, stmt: ast.Statement,
         db: str | None) -> Result:
    """``stmt`` executed if ``principal`` may run it, listings cut to what it may see (storage thread; no
    ``authorizer``: no check); NotPermitted otherwise."""
    if authorizer is not None:
        check(authorizer, principal, host, stmt, db)
    result = engine.run(stmt, db)
    return result if authorizer is None else visible(authorizer, principal, host, stmt, result)


async def _influx_write(request: web.Request) -> web.Response:
    db = _query_param(request, "db")
    _forwarded_as(request, "")
    precision = request.query.get("precision", "ns")
    refused = _write_refused(request, db)
    if refused is not None:
        return refused
    body = await request.read()
    shared = request.app[_SHARED]() if _SHARED in request.app else None
    try:
        rows = await _write_lines(request, db, precision, body)
    except NotHere:  # lines for another node's vgroup: nothing written; each node's lines sent to it
        if shared is None or FORWARDED in request.headers:
            raise
        return await _forward_lines(request, shared, db, precision, body)
    return web.Response(status=204, headers={ROWS_HEADER: str(rows)})


async def _write_lines(request: web.Request, db: str, precision: str, body: bytes) -> int:
    """The line-protocol ``body`` into ``db`` written on this node, the supertables it needs made first (in a cluster
    through its catalog stream: :mod:`.schemaless`); rows written."""
    app = request.app
    make, write = app[_ENGINE].make_schemas, functools.partial(_write_lines_here, request, db, precision, body)
    with recording() as appended:
        if app[_ENGINE].catalog.cluster:
            shared = app[_SHARED]() if _SHARED in app else None
            rows = await with_schemas(shared, make, write, functools.partial(_no_table_named, request))
        else:
            rows = await with_schemas(LocalSchemas(app[_STORAGE]), make, write, no_other_node)
    await _acknowledged(app, appended)
    return rows


async def _write_lines_here(request: web.Request, db: str, precision: str, body: bytes) -> int:
    """The line-protocol ``body`` into ``db`` written on this node; rows written. Nothing is written when it needs a
    change of a cluster database's supertables (:class:`~walgate.storage.write_plan.SchemaChangeNeeded`)."""
    app = request.app
    ingest = app.get(_INGEST)
    if ingest is not None and ingest.takes(len(body)):  # parsed and planned in a worker, then applied
        return await _planned_write(request, LinesRequest(db, body, precision, app[_ENGINE].clock.time_ns()),
                                    len(body))
    # parsed off the storage thread (pure; the body is within max_request_bytes, the engine's limit), then written
    try:
        measurements = await asyncio.to_thread(parse_body, body, precision)
    except StorageError:  # an unknown database is the answer before a bad line, as the engine's write_lines gives
        await app[_STORAGE].call(app[_ENGINE].database, db)
        raise
    return await app[_STORAGE].call_on(_database_keys(app, {db}), functools.partial(  # (its schema changes apart:
        app[_ENGINE].write_measurements, db, measurements, schemas_apart=True))  # with_schemas)


def _database_keys(app: web.Application, names: Iterable[str | None]) -> frozenset[VnodeKey] | None:
    """Every vnode of the databases ``names`` as the storage lane last published them (read on the event loop,
    :mod:`walgate.storage.topics_snapshot`: a call on them checks when it runs that they are still all of its
    databases', :meth:`Ingest.write <walgate.storage.ingest.Ingest.write>`, :meth:`Selects.prepare
    <walgate.storage.select.Selects.prepare>`), so that a write below the ingest workers' size or a SELECT's
    preparation holds those databases alone, not the whole lane; None (the whole lane) for a database not there."""
    return database_keys(names, app[_ENGINE].topics().databases())


async def _forward_lines(request: web.Request, shared: SharedCatalog, db: str, precision: str,
                         body: bytes) -> web.Response:
    """The line-protocol ``body``, which has lines for vgroups on other nodes, written as one part per owning node
    (:func:`_forward_body`); 204 with the rows written when every part was."""
    dbdef = _led(request.app, await request.app[_STORAGE].call(request.app[_ENGINE].database, db))
    local = request.app[_ENGINE].catalog.node_id
    parts = await asyncio.to_thread(split_lines, body, precision, dbdef, local)

    def written(rows: int) -> web.Response:
        return web.Response(status=204, headers={ROWS_HEADER: str(rows)})

    if all(part.node == local for part in parts):  # placed here after all: answered as any body here
        return written(await _write_lines(request, db, precision, body))
    return await _forward(request, shared, body, parts, "/influxdb/v1/write", {"db": db, "precision": precision},
                          lambda part: _write_lines(request, db, precision, part.body), written)


async def _csv_write(request: web.Request) -> web.Response:
    db = _query_param(request, "db")
    _forwarded_as(request, "")
    table, stable = request.query.get("table"), request.query.get("stable")
    refused = _write_refused(request, db)
    if refused is not None:
        return refused
    body = await request.read()
    shared = request.app[_SHARED]() if _SHARED in request.app else None
    try:
        rows = await _write_csv(request, db, table, stable, body)
    except NotHere:  # rows for another node's vgroup: nothing written; each node's records sent to it
        if shared is None or FORWARDED in request.headers:
            raise
        return await _forward_csv(request, shared, db, table, stable, body)
    return _json(200, {"code": 0, "rows": rows})


async def _write_csv(request: web.Request, db: str, table: str | None, stable: str | None, body: bytes) -> int:
    """The CSV ``body`` into ``table`` or subtables of ``stable`` of ``db`` written on this node; rows written."""
    app = request.app
    ingest = app.get(_INGEST)
    with recording() as appended:
        if ingest is not None and ingest.takes(len(body)):  # parsed and planned in a worker, then applied
            rows = await _planned_write(request, CsvRequest(db, body, table, stable, app[_ENGINE].clock.time_ns()),
                                        len(body))
        else:
            rows = await app[_STORAGE].call_on(_database_keys(app, {db}), functools.partial(
                app[_ENGINE].write_csv, db, body, table=table, stable=stable))
    await _acknowledged(app, appended)
    return rows


async def _forward_csv(request: web.Request, shared: SharedCatalog, db: str, table: str | None, stable: str | None,
                       body: bytes) -> web.Response:
    """The CSV ``body``, which has records for vgroups on other nodes, written as one part per owning node
    (:func:`_forward_body`); ``{"code": 0, "rows": n}`` when every part was."""
    dbdef = _led(request.app, await request.app[_STORAGE].call(request.app[_ENGINE].database, db))
    local = request.app[_ENGINE].catalog.node_id
    parts = await asyncio.to_thread(split_csv, body, dbdef, table, stable, local)
    if all(part.node == local for part in parts):  # placed here after all: answered as any body here
        return _json(200, {"code": 0, "rows": await _write_csv(request, db, table, stable, body)})
    params = {"db": db} | ({"table": table} if table is not None else {"stable": stable or ""})
    return await _forward(request, shared, body, parts, "/csv/v1/write", params,
                          lambda part: _write_csv(request, db, table, stable, part.body),
                          lambda rows: _json(200, {"code": 0, "rows": rows}))


async def _forward(request: web.Request, shared: SharedCatalog, body: bytes, parts: list[Part], path: str,
                   params: dict[str, str] | None, write: Callable[[Part], Awaitable[int]],
                   written: Callable[[int], web.Response], what: str = "INSERT") -> web.Response:
    """The ``parts`` of a write's ``body``: this node's written here by ``write`` (rows written), every other
    node's sent to its ``path`` with query ``params`` (:mod:`.sql_forward`: the part's own body, or ``body`` whole
    for a part of an INSERT, CREATE TABLE or DROP TABLE, which names its positions), all at once; ``written(rows)``
    when every part was written, else the answer of :func:`~.sql_forward.answer` for the statement ``what``."""
    local = request.app[_ENGINE].catalog.node_id

    async def write_here(part: Part) -> Outcome:
        return Outcome(part, "written", rows=await write(part))

    urls = {info.node_id: info.http for info in shared.member.view.nodes}
    caller = _caller(request, shared)
    outcomes = list(await asyncio.gather(*(
        _here(part, local, write_here(part)) if part.node == local else
        send(part, urls.get(part.node), path, part.body or body, local, caller, params)
        for part in parts)))
    if all(o.state == "written" for o in outcomes):
        return written(sum(o.rows for o in outcomes))
    status, answer_body = answer(outcomes, what)
    log.info("a write to %s from %s across nodes answered %d: %s", path, request[HOST], status,
             answer_body["desc"][:2000])
    return _json(status, answer_body)


def _write_refused(request: web.Request, db: str) -> web.Response | None:
    """403 when ACLs are on and the request's principal may not Write into database ``db`` (sql_access)."""
    authorizer = request.app.get(_AUTHORIZER)
    if authorizer is None:
        return None
    principal = request.get(PRINCIPAL, ANONYMOUS)
    try:
        if principal not in authorizer.super_users:
            check_needs(authorizer, principal, request[HOST],
                        [(Operation.WRITE, ResourceType.TOPIC, database_resource(db))])
    except NotPermitted as e:
        return _error(403, e.code, e.message)
    return None


async def _healthz(request: web.Request) -> web.Response:
    # answered on the event loop alone: a busy storage thread is not a dead process (readiness says whether it answers)
    return _json(200, {"status": "ok", "quarantined": [asdict(d) for d in list(request.app[_DAMAGE].records)]})


async def _within_health_timeout(call: Awaitable[object]) -> object:
    """``call``'s answer, or TimeoutError after ``HEALTH_TIMEOUT`` seconds."""
    async with asyncio.timeout(HEALTH_TIMEOUT):
        return await call


async def _readyz(request: web.Request) -> web.Response:
    app = request.app
    checks = {"storage_thread": "ok"}
    probes = [_within_health_timeout(app[_STORAGE].call(_probe_data_dir, app[_ENGINE]))]
    coordinator = app.get(_COORDINATOR)
    if coordinator is not None:
        checks["coordinator_lane"] = "ok"
        probes.append(_within_health_timeout(coordinator.call(_answer)))
    checks["data_dir_writable"] = "ok"
    answers = await asyncio.gather(*probes, return_exceptions=True)  # each lane its own HEALTH_TIMEOUT, at once
    storage = answers[0]
    if isinstance(storage, TimeoutError):
        checks["storage_thread"] = f"no answer within {HEALTH_TIMEOUT:.0f} s"
        checks["data_dir_writable"] = "unknown: the storage thread did not answer"
    elif isinstance(storage, OSError):
        checks["data_dir_writable"] = f"cannot write, fsync and remove {PROBE_NAME}: {storage}"
    elif isinstance(storage, BaseException):
        raise storage
    if coordinator is not None:
        if isinstance(answers[1], TimeoutError):
            checks["coordinator_lane"] = f"no answer within {HEALTH_TIMEOUT:.0f} s"
        elif isinstance(answers[1], BaseException):
            raise answers[1]
    for name, up in app[_LISTENERS]().items():
        checks[f"{name}_listener"] = "ok" if up else "not accepting connections"
    if _CLUSTER in app:
        checks["cluster"] = app[_CLUSTER]() or "ok"
        if _REPLICAS in app:
            checks["replicas"] = replicas_check(app[_REPLICAS]())
    failed = [name for name, check in checks.items() if check != "ok"]
    if failed:
        return _json(503, {"status": "not ready", "failed": failed, "checks": checks})
    return _json(200, {"status": "ready", "checks": checks})


def _answer() -> None:
    """The coordinator lane's readiness probe: it runs, so the lane answers."""


def _probe_data_dir(engine: Engine) -> None:
    """Write, fsync and remove ``PROBE_NAME`` in the data dir (storage thread); raises ``OSError``."""
    path = engine.data_dir / PROBE_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        fileio.write_all(fd, b"walgate readiness probe\n")
        fileio.fsync(fd, syncs=engine.syncs)
    finally:
        os.close(fd)
        os.unlink(path)


async def _metrics(request: web.Request) -> web.Response:
    try:
        body = await asyncio.to_thread(request.app[_METRICS].render)  # blocks on the storage thread: off the loop
    except TimeoutError as exc:
        return _error(503, StorageUnavailable.code, str(exc))
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


# ------------------------------------------------------------------- helpers


@web.middleware
async def _authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A request forwarded by another node (:data:`~.sql_forward.FORWARDED` or any header of
    :data:`~walgate.security.node_token.HEADERS`): ``request[PRINCIPAL]`` and ``request[HOST]`` its signed caller's,
    or 403 when its signature is not one of this cluster's nodes (:func:`_node_refusal`); else Basic auth when
    configured: ``request[PRINCIPAL]`` set, or 401 (never for the health probes), and ``request[HOST]`` the peer's
    address. With ACLs, the operator paths (:func:`_for_operators`) are for super users only (403)."""
    if any(name in request.headers for name in (FORWARDED, *HEADERS)):
        refused = await _node_refusal(request)
        if refused is not None:
            log.warning("refused %s %s from %s: %s", request.method, request.path, request.remote, refused)
            return _error(403, AUTH_FAILURE, f"Authentication failure: {refused}")
        return await _authorized(request, handler)
    request[HOST] = request.remote or ""
    basic_auth = request.app[_BASIC_AUTH]
    if basic_auth is None or request.path in UNAUTHENTICATED_PATHS:
        principal: str | None = ANONYMOUS
    else:
        principal = await basic_auth.principal(request)
    if principal is None:
        response = _error(401, AUTH_FAILURE, "Authentication failure: a walgate user and password are required "
                          "(HTTP Basic)")
        response.headers["WWW-Authenticate"] = 'Basic realm="walgate", charset="UTF-8"'
        return response
    request[PRINCIPAL] = principal
    return await _authorized(request, handler)


async def _authorized(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``handler``'s answer to the authenticated ``request``, or 403 for an operator path (:func:`_for_operators`)
    when ACLs are on and its principal is not a super user."""
    principal = request[PRINCIPAL]
    authorizer = request.app.get(_AUTHORIZER)
    if authorizer is not None and principal not in authorizer.super_users and _for_operators(request.path):
        return _error(403, NotPermitted.code, f"Insufficient privilege: {request.path} is for super users")
    return await handler(request)


async def _node_refusal(request: web.Request) -> str | None:
    """Why ``request``, which carries a header only nodes send, is not a request another node of this cluster
    signed (:mod:`walgate.security.node_token`: its head signature checked before the body is read); None when it
    is, once this node applied the cluster's catalog up to the record the sender had applied (ClusterUnavailable,
    nothing done, when not within CHANGE_TIMEOUT_S): ``request[PRINCIPAL]`` and ``request[HOST]`` are then the
    caller's it names."""
    shared = request.app[_SHARED]() if _SHARED in request.app else None
    if shared is None:
        return f"{FORWARDED} and {', '.join(HEADERS)} are accepted only from the nodes of a cluster"
    headers = request.headers
    if headers.get(VERSION_HEADER) != VERSION:
        return (f"a request forwarded between nodes signed in format {headers.get(VERSION_HEADER, '1')}, not this "
                f"node's {VERSION}: every node of a cluster must run the same walgate version (docs/security.md "
                '"Upgrading")')
    missing = [name for name in (FORWARDED, *HEADERS) if name not in headers]
    if missing:
        return f"a request forwarded between nodes needs {', '.join(missing)}, signed with the cluster's node token"
    twice = [name for name in (FORWARDED, *HEADERS) if len(headers.getall(name)) > 1]
    if twice:  # (read once, the first value: a second one, which the signature does not cover, would pass unseen)
        return f"a request forwarded between nodes has each of its headers once: {', '.join(twice)} came twice"
    query = dict(request.query)
    if len(query) != len(request.query):
        return "a request forwarded between nodes has no query parameter twice"
    now_ms = time.time_ns() // 1_000_000
    refused = header_refusal(headers[TIME], headers[SIGNATURE], headers[PRINCIPAL_HEADER], now_ms, headers[CATALOG_SEQ])
    if refused is not None:
        return f"a request forwarded between nodes must be signed by a node of this cluster: {refused}"
    head = Signed(request.app[_ENGINE].catalog.node_id, request.method, request.path, query, headers[FORWARDED],
                  headers[PRINCIPAL_HEADER], headers[CLIENT_HOST], int(headers[TIME]), b"", int(headers[CATALOG_SEQ]))
    why: list[str | None] = [None]

    def head_fits(tokens: tuple[str, ...]) -> bool:
        why[0] = head_refusal(tokens, headers[HEAD_SIGNATURE], head, now_ms)
        return why[0] is None

    if not await shared.member.tokens.verified(head_fits):  # before the body is read
        return f"a request forwarded between nodes must be signed by a node of this cluster: {why[0]}"
    signed = dataclasses.replace(head, body=await request.read())

    def fits(tokens: tuple[str, ...]) -> bool:
        why[0] = refusal(tokens, headers[SIGNATURE], signed, now_ms)
        return why[0] is None

    if not await shared.member.tokens.verified(fits):
        return f"a request forwarded between nodes must be signed by a node of this cluster: {why[0]}"
    await shared.applied(signed.catalog_seq)  # what the sender knew: its databases, supertables, users
    basic_auth = request.app[_BASIC_AUTH]
    if basic_auth is not None and not await basic_auth.is_user(signed.principal):
        return (f"{signed.principal} is not a user of this cluster, and this node authenticates every request: "
                "every node of a cluster must run the same http.auth")
    request[PRINCIPAL], request[HOST] = signed.principal, signed.host
    return None


def _caller(request: web.Request, shared: SharedCatalog) -> Caller:
    """Whom a part of ``request`` forwarded to another node is for: its principal and client address, signed with
    the cluster's node token; other nodes' HTTPS certificates verified with the node's truststore. Raises
    StorageUnavailable when the node knows no token (an operator deleted it)."""
    try:
        token = shared.member.tokens.signing()
    except ControlPlaneError as e:
        raise StorageUnavailable(f"nothing can be sent to another node: {e}") from None
    return Caller(request[PRINCIPAL], request[HOST], token, request.app[_NODE_TLS], shared.follower.cursor.seq)


async def _unless_gone(*parts: Awaitable[tuple[int, dict[str, Any] | bytes]], request: web.Request,
                       timeout: float | None) -> list[tuple[int, dict[str, Any] | bytes]]:
    """The answers of a SELECT's ``parts`` (run at once), or QueryCancelled, every part still running cancelled
    (a part asked of another node closes its connection: that node stops its query worker), once the client of
    ``request`` went away (checked every :data:`~.query_workers.POLL_S`) or after ``timeout`` seconds
    (``sql.timeout.ms``; None: none)."""
    tasks = [asyncio.ensure_future(part) for part in parts]
    deadline = None if timeout is None else time.monotonic() + timeout
    why = ""
    try:
        while not why:
            left = POLL_S if deadline is None else min(POLL_S, max(0.0, deadline - time.monotonic()))
            done, pending = await asyncio.wait(tasks, timeout=left)
            if not pending:
                return [task.result() for task in tasks]
            if _gone(request):
                why = "the client went away"
            elif deadline is not None and time.monotonic() >= deadline:
                why = f"it ran longer than sql.timeout.ms ({(timeout or 0) * 1000:.0f} ms)"
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    log.info("SELECT across nodes from %s stopped, the other nodes' parts too: %s", request[HOST], why)
    raise QueryCancelled(f"query cancelled: {why}")


def _for_operators(path: str) -> bool:
    """``/metrics`` and the web console's data (``/ui/api/...``) show every topic, group and record: with ACLs on,
    super users only (the console's SQL box goes through ``/rest/sql``, checked statement by statement)."""
    return path == "/metrics" or path.startswith("/ui/api/")


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map oversize bodies, engine errors and unexpected exceptions to JSON error answers."""
    limit = request.app[_MAX_REQUEST_BYTES]
    if request.content_length is not None and request.content_length > limit:
        return _too_large(request.content_length, limit)
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge:  # chunked body that grew past client_max_size
        return _too_large(None, limit)
    except RequestTooLarge as e:
        return _error(413, e.code, e.message)
    except StorageUnavailable as e:
        if e.maybe_applied:  # (sql_forward.py: the part's outcome unknown)
            return _json(503, {"code": e.code, "desc": e.message, "outcome": "unknown"})
        return _error(503, e.code, e.message)
    except NotLedNow as e:  # retriable: the vgroup's leadership is being elected or moved
        return _error(503, e.code, _not_led(request.app, e))
    except StorageError as e:
        return _error(400, e.code, e.message)
    except (web.HTTPException, ConnectionError):  # ConnectionError: the client went away, aiohttp's to handle
        raise
    except OSError as e:
        log.warning("storage error serving %s %s: %s", request.method, request.path_qs, e)
        return _error(503, StorageUnavailable.code, f"storage error: {e}")
    except CorruptEntry as e:
        log.warning("damaged data serving %s %s: %s", request.method, request.path_qs, e)
        return _error(500, WAL_FILE_CORRUPTED, f"WAL file is corrupted: {e}")
    except Exception as e:
        log.exception("unexpected error serving %s %s", request.method, request.path_qs)
        return _error(500, INTERNAL_ERROR, f"internal error: {type(e).__name__}: {e}")


def _not_led(app: web.Application, e: NotLedNow) -> str:
    """The answer to a write for a replicated vgroup nobody here could take (:class:`NotLedNow`): it has no leader
    now, or the node the partition state names has not taken over yet (mid-failover), as this node last read it."""
    replicas = app[_REPLICAS]() if _REPLICAS in app else None
    state = None if replicas is None else replicas.state_of(e.db_id, e.vgroup)
    now = "has no leader now" if state is None or state.leader == NO_LEADER else \
        f"is led by node {state.leader} now (its leadership is moving)"
    return f"Sync leader is unreachable: vgroup {e.vgroup} of database {e.db} {now}: nothing was written, retry it"


def _query_param(request: web.Request, name: str) -> str:
    value = request.query.get(name)
    if not value:
        raise InvalidValue(f"query parameter {name!r} is required")
    return value


def _too_large(size: int | None, limit: int) -> web.Response:
    actual = f" ({size} bytes)" if size is not None else ""
    return _error(413, RequestTooLarge.code, f"request body too large{actual}: the limit is {limit} bytes (max_request_bytes)")


def _error(status: int, code: int, desc: str) -> web.Response:
    return _json(status, {"code": code, "desc": desc})


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")
