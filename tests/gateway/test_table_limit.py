"""``--max-tables-per-database`` (issue 23): a write that would create more tables than a database may hold is
refused whole, with a clear error, over HTTP (line protocol, SQL) and to a real Kafka client producing JSON rows
into a supertable's topic; nothing of it is written, and the server stays up. The count holds across a restart
and a DROP TABLE frees a place."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from urllib.parse import urlsplit

from confluent_kafka import KafkaError, Producer

from livewalgate import running_walgate


def post(url: str, path: str, body: str) -> tuple[int, str]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.request("POST", path, body=body.encode())
    resp = conn.getresponse()
    data = resp.read().decode()
    conn.close()
    return resp.status, data


def sql(url: str, statement: str) -> list[list[object]]:
    status, data = post(url, "/rest/sql", statement)
    assert status == 200, data
    return json.loads(data).get("data") or []


def lp(first: int, n: int) -> str:
    return "\n".join(f"m,dev=d{k} v={k}i {1_700_000_000_000 + k}" for k in range(first, first + n))


def test_a_database_holds_at_most_max_tables(tmp_path: Path):
    data_dir = tmp_path / "data"
    with running_walgate(tmp_path / "run0", "--max-tables-per-database", "6", data_dir=data_dir) as server:
        url = server.http_url
        sql(url, "CREATE DATABASE lim VGROUPS 2")
        status, _ = post(url, "/influxdb/v1/write?db=lim&precision=ms", lp(0, 4))
        assert status == 204
        status, body = post(url, "/influxdb/v1/write?db=lim&precision=ms", lp(4, 3))  # 7 > 6: refused whole
        assert status >= 400 and "Too many tables in database lim" in body and "over the limit of 6" in body, body
        assert len(sql(url, "SHOW lim.TABLES")) == 4 and sql(url, "SELECT COUNT(*) FROM lim.m") == [[4]]
        sql(url, "CREATE TABLE lim.plain (ts TIMESTAMP, v INT)")
        status, body = post(url, "/rest/sql", "INSERT INTO lim.x1 USING lim.m TAGS ('x1') VALUES (now, 1) "
                                              "lim.x2 USING lim.m TAGS ('x2') VALUES (now, 2)")
        assert status >= 400 and "Too many tables" in body, body
        sql(url, "CREATE TOPIC lim_rows AS STABLE lim.m")
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "message.timeout.ms": 10000,
                             "retries": 0})
        errors: list[KafkaError | None] = []
        for name in ("k1", "k2"):  # the 6th table is taken by one; the second record's batch creates a 7th
            producer.produce("lim_rows", key=name, value=json.dumps({"v": 7, "dev": name}), partition=0,
                             on_delivery=lambda err, _msg: errors.append(err))
            producer.flush(15)
        assert errors[0] is None, errors
        assert errors[1] is not None and errors[1].code() == KafkaError.POLICY_VIOLATION, errors
        assert len(sql(url, "SHOW lim.TABLES")) == 6
        assert "Traceback" not in server.log()
    with running_walgate(tmp_path / "run1", "--max-tables-per-database", "6", data_dir=data_dir) as server:
        url = server.http_url
        status, body = post(url, "/influxdb/v1/write?db=lim&precision=ms", lp(10, 1))
        assert status >= 400 and "Too many tables" in body, body
        sql(url, "DROP TABLE lim.plain")
        status, _ = post(url, "/influxdb/v1/write?db=lim&precision=ms", lp(10, 1))
        assert status == 204 and len(sql(url, "SHOW lim.TABLES")) == 6
        assert "Traceback" not in server.log()
