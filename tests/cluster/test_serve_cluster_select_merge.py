"""SELECTs of a database spread over nodes answer what one node holding every row answers: real ``walgate serve
--cluster`` nodes over a real etcd and a single ``walgate serve`` (the reference), stopped by PID, asked through
TDengine's own REST client (taospy's ``taosrest``) and plain HTTP.

Database ``f`` of 3 vgroups is placed over both nodes; the same rows are written through node 1 (each forwarded to its
owner) and into the reference. Every statement of :data:`STATEMENTS` (aggregates, INTERVAL windows with FILL, GROUP BY
tag / tbname, PARTITION BY, HAVING, ORDER BY ... DESC, LIMIT / OFFSET, nested expressions, ``now``) answers through
either node exactly as the reference does: the same column_meta and the same rows in the same order (floating-point
aggregates to the last bit). ``SHOW f.TABLES`` lists the tables of both nodes. A part signed with another ``now`` (the
node asked's, years behind this machine's clock) answers the rows a node at that instant keeps. (A node down:
test_serve_cluster_sql_forward.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from etcd_cluster import EtcdCluster
from serve_support import eventually, no_traceback, sql, two_nodes
from test_serve_cluster_sql_forward import post, signed_part

from livewalgate import WalgateServer, running_walgate
from walgate.storage.vnode import vnode_of

taosrest = pytest.importorskip("taosrest", reason="taospy is not installed: pip install -e '.[test]'")

TS = 1700000000000
TABLES = sorted(name for vgroup in range(3)  # three subtables in each of the 3 vgroups
                for name in [f"d{i}" for i in range(100) if vnode_of("f", f"d{i}", 3) == vgroup][:3])
ROWS_PER_TABLE = 12

STATEMENTS = [
    "SELECT COUNT(*), COUNT(x), SUM(v), MIN(v), MAX(v), AVG(v), AVG(x), SPREAD(v) FROM f.st",
    "SELECT FIRST(v), LAST(v), LAST_ROW(x), FIRST(ts), LAST(ts) FROM f.st",
    "SELECT STDDEV(v), SUM(x) FROM f.st WHERE v > 3",
    "SELECT site, COUNT(*), SUM(v), MAX(x) FROM f.st GROUP BY site ORDER BY site",
    "SELECT region, COUNT(*), AVG(v) FROM f.st GROUP BY region ORDER BY region DESC",
    "SELECT tbname, site, COUNT(*), LAST(v) FROM f.st PARTITION BY tbname ORDER BY tbname",
    "SELECT site, SUM(v) AS total FROM f.st GROUP BY site HAVING SUM(v) > 120 ORDER BY total DESC",
    "SELECT _wstart, COUNT(*), SUM(v), MIN(x) FROM f.st INTERVAL(3s)",
    "SELECT _wstart, _wend, AVG(v) FROM f.st WHERE ts >= 1700000000000 AND ts < 1700000030000 INTERVAL(2s) FILL(PREV)",
    "SELECT _wstart, COUNT(*) FROM f.st WHERE ts >= 1699999990000 AND ts <= 1700000020000 INTERVAL(5s) FILL(VALUE, 0)",
    "SELECT _wstart, MAX(v) FROM f.st INTERVAL(4s) SLIDING(2s) FILL(LINEAR)",
    "SELECT tbname, _wstart, COUNT(*), SUM(v) FROM f.st PARTITION BY tbname INTERVAL(5s) ORDER BY tbname, _wstart",
    "SELECT ts, tbname, v FROM f.st ORDER BY ts DESC LIMIT 7",
    "SELECT ts, tbname, v, x FROM f.st ORDER BY v DESC, ts LIMIT 5 OFFSET 4",
    "SELECT ts, v * 2 + 1 AS w FROM f.st WHERE site = 1 ORDER BY ts LIMIT 6 OFFSET 3",
    "SELECT tbname, ts, v FROM f.st PARTITION BY tbname ORDER BY ts DESC LIMIT 2",
    "SELECT COUNT(*) * 2, SUM(v) / COUNT(v), MAX(v) - MIN(v), ABS(MIN(v) - 100) FROM f.st WHERE x IS NOT NULL",
    "SELECT site, region, COUNT(*) FROM f.st GROUP BY site, region ORDER BY 3 DESC, site, region LIMIT 3 OFFSET 1",
    "SELECT COUNT(*), SUM(v) FROM f.st WHERE v > 1000",
    "SELECT * FROM f.st ORDER BY ts LIMIT 3",
    # ``now``: read once by the node asked, sent with every part (the rows are years before it)
    "SELECT site, FIRST(x), LAST_ROW(v) FROM f.st WHERE ts < now - 1d GROUP BY site ORDER BY site",
    "SELECT ts, v FROM f.st WHERE ts < now() AND ts >= today() - 36500d AND site = 2 ORDER BY ts",
]


def values(table: int) -> str:
    """The INSERT clause of the ``table``-th of :data:`TABLES`: distinct timestamps over all tables (so FIRST / LAST / ORDER BY ts
    have no ties), some NULL ``x``, values whose sums are exact in binary floating point."""
    site, region = table % 3, "east" if table % 2 else "west"
    rows = []
    for i in range(ROWS_PER_TABLE):
        ts = TS + i * 1700 + table * 13
        v = (i * 7 + table * 3) % 23
        x = "NULL" if (i + table) % 5 == 0 else f"{(v * 0.25):.2f}"
        rows.append(f"({ts}, {v}, {x})")
    return f"f.{TABLES[table]} USING f.st TAGS ({site}, '{region}') VALUES " + " ".join(rows)


def setup(server: WalgateServer, create: str) -> None:
    """``create`` (the database), the supertable and every table's rows, through ``server``."""
    sql(server, create)
    sql(server, "CREATE STABLE f.st (ts TIMESTAMP, v INT, x DOUBLE) TAGS (site INT, region VARCHAR(8))")
    sql(server, "INSERT INTO " + " ".join(values(t) for t in range(len(TABLES))))


def answer(client: Any, statement: str) -> tuple[list[Any], list[Any]]:
    """The column_meta and rows taosrest's client gets for ``statement``."""
    body = client.sql(statement)
    return body["column_meta"], body["data"]


def test_each_select_through_either_node_answers_as_one_node_holding_every_row(etcd1: EtcdCluster,
                                                                               tmp_path: Path) -> None:
    with running_walgate(tmp_path / "single") as single, two_nodes(etcd1, tmp_path) as (n1, n2, _, _):
        setup(single, "CREATE DATABASE f VGROUPS 3")
        eventually("node 1 sees node 2", lambda: [r[2] for r in sql(n1, "SHOW DNODES")] == ["ready"] * 2)
        setup(n1, "CREATE DATABASE f VGROUPS 3")
        assert {r[3] for r in sql(n1, "SHOW f.VGROUPS")} == {1, 2}, "vgroups on both nodes"
        reference = taosrest.RestClient(single.http_url, convert_timestamp=False, timeout=60)
        clients = [taosrest.RestClient(n.http_url, convert_timestamp=False, timeout=60) for n in (n1, n2)]
        eventually("node 2 knows f.st", lambda: [r[0] for r in sql(n2, "SHOW f.STABLES")] == ["st"])
        for statement in STATEMENTS:
            expected = answer(reference, statement)
            assert expected[1], f"{statement}: the reference answers rows"
            for client in clients:
                assert answer(client, statement) == expected, statement
        # the same with the database named by the request, through node 2
        unqualified = taosrest.RestClient(n2.http_url, database="f", convert_timestamp=False, timeout=60)
        statement = "SELECT site, COUNT(*), SUM(v) FROM st GROUP BY site ORDER BY site"
        assert answer(unqualified, statement) == answer(reference, statement.replace("FROM st", "FROM f.st"))

        listed = answer(reference, "SHOW f.TABLES")
        assert sorted(r[0] for r in listed[1]) == TABLES
        for client in clients:
            got = answer(client, "SHOW f.TABLES")
            assert [r[0] for r in got[1]] == TABLES and got[0] == listed[0], got
            assert [(r[0], r[5]) for r in got[1]] == [(t, vnode_of("f", t, 3)) for t in TABLES], "each table's vgroup"
        # node 2's part asked by a node whose clock reads TS + 10 s (years behind this machine's): its now is that
        # instant, its rows those of its own vgroups that one node with that clock keeps
        statement = "SELECT tbname, ts, v FROM f.st WHERE ts > now - 4s AND ts <= now()"
        forwarded = f"1;here;{(TS + 10_000) * 10**6}"
        status, part = post(n2, statement, headers=signed_part(etcd1, 2, "User:ANONYMOUS", statement, 0, forwarded))
        on_node_2 = {i for i, r in enumerate(sql(n1, "SHOW f.VGROUPS")) if r[3] == 2}
        expected = [r for r in answer(reference, f"SELECT tbname, ts, v FROM f.st WHERE ts > {TS + 6_000} AND "
                                                 f"ts <= {TS + 10_000}")[1] if vnode_of("f", r[0], 3) in on_node_2]
        assert status == 200 and sorted(part["data"]) == sorted(expected) and expected, part
        for server in (n1, n2, single):
            no_traceback(server)
