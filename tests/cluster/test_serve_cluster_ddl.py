"""DDL of a database spread over 2 nodes answered as one node answers it, through either node: real ``walgate serve
--cluster`` nodes over a real etcd and a single ``walgate serve`` beside them (all stopped by PID), SQL through their
HTTP APIs, line protocol too (issue 24, docs/cluster.md "SQL writes across nodes").

One module-scoped cluster serves every test (database ``f``, 2 vgroups: vgroup 0 on node 1, vgroup 1 on node 2), the
single node holds a database ``f`` of 2 vgroups too, so that each table is in the same vgroup on both:

- a TDengine topic of one table (normal or subtable) whose vgroup is on the other node is made through either node
  (forwarded to the table's node, which compiles it), known to both, and read by a consumer bootstrapped on the other;
  one of a table that does not exist is refused with the single node's code;
- a ``DROP TABLE`` list naming a table that does not exist, its tables on both nodes, answers what the single node
  answers and drops nothing, whichever name is missing and wherever it is;
- a line-protocol write whose measurement is a normal table on the other node is refused as the single node refuses
  it, through either node; a normal table named like a supertable too.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from etcd_cluster import etcd_cluster
from serve_support import eventually, no_traceback, sql, two_nodes
from test_serve_cluster_schemaless import influx, read
from test_serve_cluster_sql_forward import post, spread_database

from livewalgate import WalgateServer, running_walgate
from walgate.storage.vnode import vnode_of

TS = 1700000000000
Nodes = tuple[WalgateServer, WalgateServer, WalgateServer]


def names(prefix: str, vgroup: int, count: int) -> list[str]:
    """``count`` table names of database ``f`` (2 vgroups) beginning with ``prefix``, in ``vgroup``."""
    return [name for name in (f"{prefix}{i}" for i in range(200)) if vnode_of("f", name, 2) == vgroup][:count]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    """Nodes 1 and 2 of a cluster and a single node, each with database ``f`` of 2 vgroups and supertable
    ``f.st``; the cluster's ``f`` has vgroup 0 on node 1, vgroup 1 on node 2."""
    root = tmp_path_factory.mktemp("ddl")
    with (etcd_cluster(root / "etcd", 1) as etcd, running_walgate(root / "single") as single,
          two_nodes(etcd, root) as (n1, n2, _, _)):
        spread_database(n1, n2)
        sql(single, "CREATE DATABASE f VGROUPS 2")
        for server in (n1, single):
            sql(server, "CREATE STABLE f.st (ts TIMESTAMP, v INT, w INT) TAGS (site INT)")
        eventually("node 2 knows f.st", lambda: [r[0] for r in sql(n2, "SHOW f.STABLES")] == ["st"])
        yield n1, n2, single
        for server in (n1, n2, single):
            no_traceback(server)


def on_all(servers: tuple[WalgateServer, ...], statement: str) -> None:
    for server in servers:
        status, answer = post(server, statement)
        assert (status, answer.get("data")) == (200, [[0]]), (server.http_url, statement, answer)


def topics(server: WalgateServer) -> list[str]:
    return [r[0] for r in sql(server, "SHOW TOPICS")]


def test_a_topic_of_one_table_on_the_other_node_is_made_through_either_node(nodes: Nodes) -> None:
    n1, n2, single = nodes
    (normal, sub), (other,) = names("tp", 1, 2), names("tp", 0, 1)  # node 2's vgroup; node 1's
    on_all((n1, single), f"CREATE TABLE f.{normal} (ts TIMESTAMP, v INT)")  # through node 1: made on node 2
    on_all((n1, single), f"CREATE TABLE f.{sub} USING f.st TAGS (7)")
    on_all((n2,), f"CREATE TABLE f.{other} (ts TIMESTAMP, v INT)")  # made on node 1 through node 2
    for server, topic, statement in ((n1, "tp_normal", f"SELECT v FROM f.{normal}"),
                                     (n1, "tp_sub", f"SELECT ts, v, site FROM f.{sub}"),
                                     (n2, "tp_other", f"SELECT v FROM f.{other}")):
        status, answer = post(server, f"CREATE TOPIC {topic} AS {statement}")
        assert (status, answer.get("data")) == (200, [[0]]), (topic, answer)
        # known to the node asked once answered, to the other once its stream delivers it
        assert topic in topics(server)
        eventually(f"both nodes know {topic}", lambda: topic in topics(n1) and topic in topics(n2))
    # the subtable's supertable is in the topic's record: an ALTER breaking the topic is refused through either node
    for server in (n1, n2):
        status, answer = post(server, "ALTER STABLE f.st DROP COLUMN v")
        assert status == 400 and "topic tp_sub depends on it" in answer["desc"], answer
    status, answer = post(n1, f"INSERT INTO f.{normal} VALUES ({TS + 1}, 1) ({TS + 2}, 2)")  # written on node 2
    assert (status, answer.get("data")) == (200, [[2]]), answer
    got = read(n1, "tp_normal", {0: 0, 1: 2})  # bootstrapped on node 1: node 2's partition read from node 2
    assert (got[0], sorted(r["v"] for r in got[1])) == ([], [1, 2]), got
    # a topic of a table that does not exist: refused as one node refuses it, through either node
    (missing,) = names("tp_missing", 1, 1)
    expected = post(single, f"CREATE TOPIC tp_none AS SELECT v FROM f.{missing}")
    for server in (n1, n2):
        status, answer = post(server, f"CREATE TOPIC tp_none AS SELECT v FROM f.{missing}")
        assert (status, answer["code"]) == (expected[0], expected[1]["code"]) and missing in answer["desc"], answer
        assert "tp_none" not in topics(server)


def test_a_drop_table_list_naming_a_missing_table_answers_as_one_node_and_drops_nothing(nodes: Nodes) -> None:
    n1, n2, single = nodes
    (a, gone_a), (b, gone_b) = names("dr", 0, 2), names("dr", 1, 2)  # node 1's vgroup; node 2's
    for table in (a, b):
        on_all((n1, single), f"CREATE TABLE f.{table} (ts TIMESTAMP, v INT)")
    for statement in (f"DROP TABLE f.{a}, f.{b}, f.{gone_b}", f"DROP TABLE f.{b}, f.{gone_a}, f.{a}",
                      f"DROP TABLE f.{a}, f.{gone_b}, f.{b}, f.{gone_a}", f"DROP TABLE f.{gone_a}, f.{b}"):
        expected = post(single, statement)
        assert expected[0] == 400 and expected[1]["code"] == 0x2662, expected
        for server in (n1, n2):
            assert post(server, statement) == expected, (server.http_url, statement)
            listed = [r[0] for r in sql(server, "SHOW f.TABLES")]
            assert a in listed and b in listed, f"nothing dropped by {statement}: {listed}"
    # the question which tables exist (asked by the node that got the list) is answered to the cluster's nodes only
    for headers in ({}, {"X-Walgate-Forwarded": "1;tables"}):
        request = urllib.request.Request(n2.http_url + "/cluster/v1/tables", method="POST", headers=headers,
                                         data=json.dumps({"tables": [["f", b]]}).encode())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 403, refused.value.read()
    for server in (n1, single):
        statement = f"DROP TABLE IF EXISTS f.{a}, f.{gone_a}, f.{b}, f.{gone_b}"
        assert post(server, statement) == (200, {"code": 0, "column_meta": [["affected_rows", "INT", 4]],
                                                 "data": [[0]], "rows": 1}), statement
        listed = [r[0] for r in sql(server, "SHOW f.TABLES")]
        assert a not in listed and b not in listed, listed


def test_a_schemaless_supertable_is_refused_where_a_normal_table_has_its_name(nodes: Nodes) -> None:
    n1, n2, single = nodes
    (m0,), (m1,) = names("ms", 0, 1), names("ms", 1, 1)  # a normal table on node 1; one on node 2
    for table in (m0, m1):
        on_all((n1, single), f"CREATE TABLE f.{table} (ts TIMESTAMP, v INT)")
    for table in (m1, m0):
        body = f"{table},site=s1 v=1 {TS}"
        expected = influx(single, body)
        assert expected[0] == 400 and "is a normal table" in expected[1]["desc"], expected
        for server in (n1, n2):  # the table's node and the other one
            assert influx(server, body) == expected, (server.http_url, body)
            assert table not in [r[0] for r in sql(server, "SHOW f.STABLES")]
    # the reverse: a normal table named like a supertable (made by line protocol through node 1) is refused too
    (fresh,) = names("mt", 1, 1)
    for server in (n1, single):
        assert influx(server, f"{fresh},site=s1 v=1 {TS}")[0] == 204
    expected = post(single, f"CREATE TABLE f.{fresh} (ts TIMESTAMP, v INT)")
    assert expected[0] == 400 and expected[1]["code"] == 0x0602, expected
    for server in (n1, n2):
        status, answer = post(server, f"CREATE TABLE f.{fresh} (ts TIMESTAMP, v INT)")
        assert (status, answer["code"]) == (400, 0x0602), answer
