"""The HTTP API against a real Engine in tmp_path (aiohttp test server on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.storage.faults import Faults
from walgate.gateway.config import Config
from walgate.gateway.http_api import INTERNAL_ERROR, ROWS_HEADER, WAL_FILE_CORRUPTED, make_app
from walgate.gateway.query_workers import QueryWorkers
from walgate.gateway.server import Gateway
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine
from walgate.storage.errors import (
    AlreadyExists,
    InvalidValue,
    LimitExceeded,
    LineProtocolError,
    NotFound,
    RequestTooLarge,
    SqlSyntaxError,
    StorageUnavailable,
)
from walgate.storage.wal import CorruptEntry

LIMIT = 64 << 10  # max_request_bytes of the test app

SCHEMA = (
    "CREATE DATABASE power VGROUPS 2",
    "CREATE STABLE power.meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT)"
    " TAGS (location VARCHAR(64), groupid INT)",
    "CREATE TABLE power.d1001 USING power.meters TAGS ('California.SanFrancisco', 2)",
)


class Api(NamedTuple):
    client: TestClient[Any, Any]
    engine: Engine


@contextlib.asynccontextmanager
async def serving(data_dir: Path, **engine_options: int) -> AsyncIterator[Api]:
    storage = StorageThread()
    engine = await storage.call(Engine.open, data_dir, max_request_bytes=LIMIT, **engine_options)
    queries = QueryWorkers(1, 0, 1 << 30)
    try:
        async with TestClient(TestServer(make_app(engine, storage, queries, engine.damage_log, max_request_bytes=LIMIT),
                                         host="127.0.0.1")) as client:
            yield Api(client, engine)
    finally:
        await queries.close()
        await storage.call(engine.close)
        storage.shutdown()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with serving(tmp_path / "data") as api:
        yield api


async def sql(api: Api, statement: str, db: str | None = None) -> tuple[int, dict[str, Any]]:
    response = await api.client.post(f"/rest/sql/{db}" if db else "/rest/sql", data=statement.encode())
    assert response.content_type == "application/json"
    return response.status, await response.json()


async def ok(api: Api, statement: str, db: str | None = None) -> dict[str, Any]:
    status, body = await sql(api, statement, db)
    assert status == 200, body
    assert body["code"] == 0
    return body


async def count(api: Api, source: str = "power.meters") -> int:
    return (await ok(api, f"SELECT * FROM {source}"))["rows"]


async def create_schema(api: Api) -> None:
    for statement in SCHEMA:
        await ok(api, statement)


def assert_error(status: int, body: dict[str, Any], expected_status: int, code: int) -> None:
    assert status == expected_status, body
    assert body["code"] == code
    assert isinstance(body["desc"], str) and body["desc"]


# ----------------------------------------------------------------------- SQL


async def test_healthz(api: Api) -> None:
    response = await api.client.get("/healthz")
    assert response.status == 200
    assert await response.json() == {"status": "ok", "quarantined": []}


async def test_write_answers_affected_rows(api: Api) -> None:
    await create_schema(api)
    body = await ok(api, "INSERT INTO power.d1001 VALUES ('2018-10-03 14:38:05', 10.3, 219, 0.31) ('2018-10-03 14:38:15', 12.6, 218, 0.33)")
    assert body == {"code": 0, "column_meta": [["affected_rows", "INT", 4]], "data": [[2]], "rows": 1}


async def test_select_answers_columns_and_rows(api: Api) -> None:
    await create_schema(api)
    await ok(api, "INSERT INTO power.d1001 VALUES ('2018-10-03 14:38:05.000', 10.5, 219, 0.25)")
    body = await ok(api, "SELECT ts, voltage, location FROM power.meters")
    assert [name for name, _, _ in body["column_meta"]] == ["ts", "voltage", "location"]
    assert [type_ for _, type_, _ in body["column_meta"]] == ["TIMESTAMP", "INT", "VARCHAR"]
    assert all(isinstance(length, int) for _, _, length in body["column_meta"])
    assert body["rows"] == 1
    [[ts, voltage, location]] = body["data"]
    assert ts.startswith("2018-10-03T14:38:05")
    assert (voltage, location) == (219, "California.SanFrancisco")


async def test_db_in_path_is_the_current_database(api: Api) -> None:
    await create_schema(api)
    await ok(api, "INSERT INTO d1001 VALUES ('2018-10-03 14:38:05', 10.3, 219, 0.31)", db="power")
    assert (await ok(api, "SELECT * FROM meters", db="power"))["rows"] == 1


async def test_use_reports_the_database(api: Api) -> None:
    await create_schema(api)
    assert (await ok(api, "USE power"))["database"] == "power"


@pytest.mark.parametrize(
    ("statement", "code"),
    [
        ("CREATE DATABSE oops", SqlSyntaxError.code),
        ("SELECT * FROM power.nosuch", NotFound.code),
        ("CREATE DATABASE power", AlreadyExists.code),
        ("INSERT INTO power.d1001 VALUES ('2018-10-03 14:38:05', 'x', 219, 0.31)", InvalidValue.code),
    ],
)
async def test_sql_errors_answer_400_with_code_and_desc(api: Api, statement: str, code: int) -> None:
    await create_schema(api)
    status, body = await sql(api, statement)
    assert_error(status, body, 400, code)
    assert set(body) == {"code", "desc"}


async def test_sql_that_is_not_utf8_is_refused(api: Api) -> None:
    response = await api.client.post("/rest/sql", data=b"SHOW \xff DATABASES")
    assert_error(response.status, await response.json(), 400, SqlSyntaxError.code)


async def test_unexpected_exception_answers_500(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(stmt: object, db: str | None = None) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(api.engine, "run", broken)
    status, body = await sql(api, "SHOW DATABASES")
    assert_error(status, body, 500, INTERNAL_ERROR)
    assert "simulated bug" in body["desc"]


async def test_a_write_the_disk_refuses_answers_503_and_service_resumes(api: Api) -> None:
    await create_schema(api)
    insert = "INSERT INTO power.d1001 VALUES ('2018-10-03 14:38:05', 10.3, 219, 0.31)"
    faults = Faults()
    with faults.active():
        for statement in ("CREATE DATABASE full_disk", insert):  # the catalog, then the WAL, refuse the write
            faults.fail("write", at=1, times=3)
            status, body = await sql(api, statement)
            assert_error(status, body, 503, StorageUnavailable.code)
            assert "OSError" not in body["desc"] and "ENOSPC" in body["desc"], body
            faults.clear()
    assert await count(api) == 0
    await ok(api, insert)  # room again: the same request succeeds, no restart
    assert await count(api) == 1


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [(OSError(errno.EIO, "Input/output error"), 503, StorageUnavailable.code),
     (CorruptEntry("wal/0.log: body checksum mismatch at byte 806"), 500, WAL_FILE_CORRUPTED)],
)
async def test_storage_failures_that_reach_the_edge_are_clear_answers_without_traceback(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, exc: Exception, status: int, code: int,
) -> None:
    def failing(stmt: object, db: str | None = None) -> None:
        raise exc

    monkeypatch.setattr(api.engine, "run", failing)
    status_, body = await sql(api, "SHOW DATABASES")
    assert_error(status_, body, status, code)
    assert str(exc) in body["desc"]
    assert not any(r.exc_info for r in caplog.records)


async def test_a_limit_answers_400_with_its_message(tmp_path: Path) -> None:
    async with serving(tmp_path / "data", max_partitions=4) as api:
        await ok(api, "CREATE DATABASE a VGROUPS 3")
        status, body = await sql(api, "CREATE DATABASE b VGROUPS 2")
        assert_error(status, body, 400, LimitExceeded.code)
        assert "4" in body["desc"], body


async def test_healthz_lists_quarantined_damage_and_stays_200(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as api:
        await create_schema(api)
        for k in range(3):
            await ok(api, f"INSERT INTO power.d1001 VALUES ({1538548685000 + k}, 10.{k}, {210 + k}, 0.3)")
    hits = [(p, p.read_bytes().find(b"California.SanFrancisco")) for p in (tmp_path / "data").rglob("*.log")]
    [(log, at)] = [(p, at) for p, at in hits if at >= 0]  # the subtable's meta entry
    data = bytearray(log.read_bytes())
    data[at] ^= 0xFF
    log.write_bytes(bytes(data))
    async with serving(tmp_path / "data") as api:
        response = await api.client.get("/healthz")
        assert response.status == 200
        body = await response.json()
        assert body["status"] == "ok"
        [damage] = body["quarantined"]
        assert damage["file"] == str(log.relative_to(tmp_path / "data")) and damage["action"] == "quarantined"
        assert {"start", "end", "reason", "kept", "first_version", "end_version"} <= set(damage)


# ------------------------------------------------------------- line protocol

LINES = (  # schemaless: creates supertable power.weather and one subtable per tag set
    b"weather,location=California.SanFrancisco temperature=18.5,humidity=61i32 1538548685000\n"
    b"weather,location=California.LosAngeles temperature=24.1,humidity=43i32 1538548685000\n"
)


async def write_lines(api: Api, body: bytes, **params: str) -> aiohttp.ClientResponse:
    return await api.client.post("/influxdb/v1/write", params={"db": "power", "precision": "ms"} | params, data=body)


async def test_line_protocol_answers_204_with_row_count(api: Api) -> None:
    await create_schema(api)
    response = await write_lines(api, LINES)
    assert response.status == 204, await response.text()
    assert response.headers[ROWS_HEADER] == "2"
    assert await response.read() == b""
    assert await count(api, "power.weather") == 2


@pytest.mark.parametrize(
    ("bad_line", "code"),
    [
        (b"weather,location=x temperature=\n", LineProtocolError.code),
        (b"weather,location=x temperature=1.0,humidity=1.5 1538548686000\n", InvalidValue.code),  # humidity is INT
        (b"meters,location=x,groupid=3 current=1.0f32,voltage=1i32,phase=0.1f32 1538548686000\n", InvalidValue.code),  # INT tag
    ],
)
async def test_bad_line_protocol_answers_400_and_writes_nothing(api: Api, bad_line: bytes, code: int) -> None:
    await create_schema(api)
    assert (await write_lines(api, LINES)).status == 204
    more = b"weather,location=California.SanJose temperature=20.0,humidity=50i32 1538548690000\n"
    response = await write_lines(api, more + bad_line)
    assert_error(response.status, await response.json(), 400, code)
    assert await count(api, "power.weather") == 2
    assert await count(api, "power.meters") == 0
    assert "sanjose" not in str((await ok(api, "SHOW power.TABLES"))["data"]).lower()


@pytest.mark.parametrize("params", [{"db": ""}, {"precision": "fortnight"}, {"db": "nosuch"}])
async def test_line_protocol_bad_parameters_answer_400(api: Api, params: dict[str, str]) -> None:
    await create_schema(api)
    response = await write_lines(api, LINES, **params)
    assert response.status == 400
    body = await response.json()
    assert isinstance(body["code"], int) and body["desc"]
    status, _ = await sql(api, "SELECT * FROM power.weather")
    assert status == 400  # the supertable was not even created


async def test_line_protocol_without_db_answers_400(api: Api) -> None:
    response = await api.client.post("/influxdb/v1/write", data=LINES)
    assert_error(response.status, await response.json(), 400, InvalidValue.code)


# ----------------------------------------------------------------------- CSV

CSV = b"ts,current,voltage,phase\n2018-10-03 14:38:05.000,10.3,219,0.31\n2018-10-03 14:38:15.000,12.6,218,0.33\n"


async def test_csv_into_a_table(api: Api) -> None:
    await create_schema(api)
    response = await api.client.post("/csv/v1/write", params={"db": "power", "table": "d1001"}, data=CSV)
    assert response.status == 200, await response.text()
    assert await response.json() == {"code": 0, "rows": 2}
    assert await count(api, "power.d1001") == 2


async def test_csv_into_a_supertable_creates_subtables(api: Api) -> None:
    await create_schema(api)
    body = (
        b"tbname,location,groupid,ts,current,voltage,phase\n"
        b"d2001,California.SanDiego,5,2018-10-03 14:38:05.000,10.3,219,0.31\n"
        b"d2001,California.SanDiego,5,2018-10-03 14:38:15.000,12.6,218,0.33\n"
        b"d2002,California.SanJose,6,2018-10-03 14:38:05.000,9.1,220,0.30\n"
    )
    response = await api.client.post("/csv/v1/write", params={"db": "power", "stable": "meters"}, data=body)
    assert response.status == 200, await response.text()
    assert await response.json() == {"code": 0, "rows": 3}
    rows = (await ok(api, "SELECT location, groupid FROM power.meters WHERE voltage >= 220"))["data"]
    assert rows == [["California.SanJose", 6]]


async def test_bad_csv_answers_400_and_writes_nothing(api: Api) -> None:
    await create_schema(api)
    bad = CSV + b"2018-10-03 14:38:16.000,1.0,not-a-number,0.5\n"
    response = await api.client.post("/csv/v1/write", params={"db": "power", "table": "d1001"}, data=bad)
    assert response.status == 400
    body = await response.json()
    assert isinstance(body["code"], int) and body["desc"]
    assert await count(api) == 0


# ------------------------------------------------------------------ oversize


def oversize_lines() -> bytes:
    line = b"weather,location=California.LosAngeles temperature=24.1,humidity=43i32 %d\n"
    body = b"".join(line % (1538548685000 + i) for i in range(LIMIT // len(line) + 10))
    assert len(body) > LIMIT
    return body


async def test_oversize_request_answers_413_and_writes_nothing(api: Api) -> None:
    await create_schema(api)
    response = await write_lines(api, oversize_lines())
    assert_error(response.status, await response.json(), 413, RequestTooLarge.code)
    assert str(LIMIT) in (await response.json())["desc"]
    status, _ = await sql(api, "SELECT * FROM power.weather")
    assert status == 400  # nothing written: the supertable does not exist


async def test_oversize_chunked_request_answers_413_and_writes_nothing(api: Api) -> None:
    await create_schema(api)
    body = oversize_lines()

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit is hit while reading
        for i in range(0, len(body), 4096):
            yield body[i : i + 4096]

    response = await write_lines(api, chunks())  # type: ignore[arg-type]
    assert_error(response.status, await response.json(), 413, RequestTooLarge.code)
    status, _ = await sql(api, "SELECT * FROM power.weather")
    assert status == 400


async def test_oversize_sql_answers_413(api: Api) -> None:
    status, body = await sql(api, "SHOW DATABASES" + " " * LIMIT)
    assert_error(status, body, 413, RequestTooLarge.code)


# --------------------------------------------------------- the whole gateway


async def test_gateway_serves_on_an_ephemeral_port_and_persists_across_restart(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data", http_port=0)
    for round_ in range(2):
        async with Gateway(config) as gateway, aiohttp.ClientSession() as session:
            host, port = gateway.http_address
            assert host == "127.0.0.1" and port != 0
            url = f"http://{host}:{port}"
            async with session.get(f"{url}/healthz") as response:
                assert response.status == 200
            if round_ == 0:
                for statement in (*SCHEMA, "INSERT INTO power.d1001 VALUES ('2018-10-03 14:38:05', 10.3, 219, 0.31)"):
                    async with session.post(f"{url}/rest/sql", data=statement) as response:
                        assert response.status == 200, await response.text()
            async with session.post(f"{url}/rest/sql", data="SELECT * FROM power.meters") as response:
                assert (await response.json())["rows"] == 1


async def test_line_protocol_to_an_unknown_database_is_refused_as_such_whatever_the_body(api: Api) -> None:
    for body in (LINES, b"not line protocol at all"):  # the database before the body, as the engine refuses them
        response = await api.client.post("/influxdb/v1/write?db=nosuch", data=body)
        assert_error(response.status, await response.json(), 400, NotFound.code)
