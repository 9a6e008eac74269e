"""The HTTP API (aiohttp): TDengine-REST SQL, InfluxDB line protocol, CSV, health.

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
- ``GET /healthz``: ``{"status": "ok", "quarantined": [...]}``, always 200
  while the server serves: damage found in the data dir (``engine.damage()``:
  file, byte range, reason, action, the copy kept, WAL versions lost) was
  quarantined and everything intact is served, so a liveness probe must not
  restart the server over it; the list tells operators what was lost.

Errors are JSON ``{"code": <int>, "desc": "<message>"}``, TDengine-REST style:
400 for bad input or a configured limit (a :class:`StorageError`, e.g.
:class:`LimitExceeded` with its message; the engine guarantees nothing was
written), 413 for a body above ``max_request_bytes`` (refused from
``Content-Length`` before it is read, or as soon as reading passes the limit;
nothing written), 503 when the disk refused a write
(:class:`StorageUnavailable`, or an ``OSError`` the storage layer let through;
nothing kept, retry later), 500 with TDengine's "WAL file is corrupted" code
for stored data that fails its checksum, 500 for anything unexpected (logged
with its traceback). Handlers stay thin: every engine call goes through the
:class:`StorageThread`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine, Result
from walgate.storage.errors import InvalidValue, RequestTooLarge, SqlSyntaxError, StorageError, StorageUnavailable
from walgate.storage.wal import CorruptEntry

__all__ = ["make_app", "result_body", "INTERNAL_ERROR", "WAL_FILE_CORRUPTED", "ROWS_HEADER"]

log = logging.getLogger(__name__)

INTERNAL_ERROR = 0xFFFF  # "code" of a 500 answer: a walgate bug, not bad input
WAL_FILE_CORRUPTED = 0x1001  # TDengine's TSDB_CODE_WAL_FILE_CORRUPTED
ROWS_HEADER = "X-Walgate-Rows"

_ENGINE = web.AppKey("engine", Engine)
_STORAGE = web.AppKey("storage", StorageThread)
_MAX_REQUEST_BYTES = web.AppKey("max_request_bytes", int)


def make_app(engine: Engine, storage: StorageThread, *, max_request_bytes: int) -> web.Application:
    """The aiohttp application serving ``engine`` through ``storage``."""
    app = web.Application(client_max_size=max_request_bytes, middlewares=[_errors])
    app[_ENGINE] = engine
    app[_STORAGE] = storage
    app[_MAX_REQUEST_BYTES] = max_request_bytes
    app.router.add_post("/rest/sql", _sql)
    app.router.add_post("/rest/sql/{db}", _sql)
    app.router.add_post("/influxdb/v1/write", _influx_write)
    app.router.add_post("/csv/v1/write", _csv_write)
    app.router.add_get("/healthz", _healthz)
    return app


def result_body(result: Result) -> dict[str, Any]:
    """The TDengine-REST JSON body of a successful statement."""
    if result.affected_rows is not None:
        body: dict[str, Any] = {
            "code": 0,
            "column_meta": [["affected_rows", "INT", 4]],
            "data": [[result.affected_rows]],
            "rows": 1,
        }
    else:
        body = {
            "code": 0,
            "column_meta": [list(c) for c in result.columns],
            "data": result.rows,
            "rows": len(result.rows),
        }
    if result.database is not None:
        body["database"] = result.database
    return body


# ------------------------------------------------------------------ handlers


async def _sql(request: web.Request) -> web.Response:
    body = await request.read()
    try:
        sql = body.decode("utf-8")
    except UnicodeDecodeError:
        raise SqlSyntaxError("the SQL in the request body is not valid UTF-8") from None
    app = request.app
    result = await app[_STORAGE].call(app[_ENGINE].execute, sql, request.match_info.get("db"))
    return _json(200, result_body(result))


async def _influx_write(request: web.Request) -> web.Response:
    db = _query_param(request, "db")
    precision = request.query.get("precision", "ns")
    body = await request.read()
    app = request.app
    rows = await app[_STORAGE].call(app[_ENGINE].write_lines, db, body, precision)
    return web.Response(status=204, headers={ROWS_HEADER: str(rows)})


async def _csv_write(request: web.Request) -> web.Response:
    db = _query_param(request, "db")
    table, stable = request.query.get("table"), request.query.get("stable")
    body = await request.read()
    app = request.app
    rows = await app[_STORAGE].call(app[_ENGINE].write_csv, db, body, table=table, stable=stable)
    return _json(200, {"code": 0, "rows": rows})


async def _healthz(request: web.Request) -> web.Response:
    app = request.app
    damage = await app[_STORAGE].call(app[_ENGINE].damage)
    return _json(200, {"status": "ok", "quarantined": [asdict(d) for d in damage]})


# ------------------------------------------------------------------- helpers


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
        return _error(503, e.code, e.message)
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
