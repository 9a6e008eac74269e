"""kill -9 while line-protocol bodies create many subtables (issue 23): the vnodes' meta stores (``meta.db``) are
written during such bodies (every FLUSH_TABLES tables) and may be cut anywhere; after each restart every
acknowledged body's subtables and rows are there, every table served has its row and every row its table (the store
agrees with the WAL), and the server starts again with nothing in its log but what it says."""

from __future__ import annotations

import http.client
import json
import random
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from livewalgate import running_walgate

BODY = 12_000  # lines, each a new subtable: more than FLUSH_TABLES in each of the 2 vnodes every other body
CYCLES = 2


class Writer(threading.Thread):
    """Posts bodies of new devices until the server dies; ``acked``: the bodies' first device numbers."""

    def __init__(self, url: str, first: int) -> None:
        super().__init__(daemon=True)
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        self.next = first
        self.acked: list[int] = []

    def run(self) -> None:
        try:
            for _ in range(50):  # bounded; the kill ends it sooner
                first, self.next = self.next, self.next + BODY
                body = "\n".join(f"m,dev=d{k} v={k}i {1_700_000_000_000 + k}" for k in range(first, first + BODY))
                self.conn.request("POST", "/influxdb/v1/write?db=sc&precision=ms", body=body.encode())
                resp = self.conn.getresponse()
                resp.read()
                if resp.status != 204:
                    raise AssertionError(f"line protocol refused: {resp.status}")
                self.acked.append(first)
        except (OSError, http.client.HTTPException):
            return  # the server was killed


def sql(url: str, statement: str) -> list[list[object]]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    conn.request("POST", "/rest/sql", body=statement.encode())
    resp = conn.getresponse()
    data = resp.read()
    assert resp.status == 200, data
    return json.loads(data).get("data") or []


def check(url: str, acked: list[int]) -> None:
    tables = {r[0] for r in sql(url, "SHOW sc.TABLES")}
    rows = sql(url, "SELECT tbname, dev, v FROM sc.m")
    assert sorted(r[0] for r in rows) == sorted(tables), "tables and rows disagree"
    assert all(f"d{v}" == dev for _, dev, v in rows)
    devices = {v for _, _, v in rows}
    for first in acked:
        missing = [k for k in range(first, first + BODY) if k not in devices]
        assert not missing, f"acknowledged body {first}: {len(missing)} subtables lost, e.g. {missing[:3]}"


@pytest.mark.slow
def test_kill_9_while_bodies_create_subtables_loses_no_acknowledged_one(tmp_path: Path) -> None:
    rng = random.Random(20261128)
    data_dir = tmp_path / "data"
    acked: list[int] = []
    first = 0
    with running_walgate(tmp_path / "run0", data_dir=data_dir) as server:
        sql(server.http_url, "CREATE DATABASE sc VGROUPS 2 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0")
    for cycle in range(CYCLES):
        with running_walgate(tmp_path / f"run{cycle + 1}", data_dir=data_dir) as server:
            if acked:
                check(server.http_url, acked)
            writer = Writer(server.http_url, first)
            writer.start()
            writer.join(timeout=rng.uniform(2.0, 6.0))
            server.proc.kill()  # SIGKILL, most likely inside a body
            server.proc.wait(10)
            writer.join(timeout=30)
            assert not writer.is_alive()
            acked += writer.acked
            first = writer.next
            assert "Traceback" not in server.log()
    assert acked, "no body was acknowledged: the test proves nothing"
    with running_walgate(tmp_path / "final", data_dir=data_dir) as server:
        check(server.http_url, acked)
        assert "Traceback" not in server.log()
        assert "damage" not in server.log()
