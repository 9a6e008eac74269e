"""TDengine's own REST client, ``taosrest`` (from taospy), against a live walgate's ``/rest/sql``.

DDL, INSERT and the read queries a TDengine user runs — aggregates, time ranges (including ``now - 1h``),
PARTITION BY / GROUP BY, INTERVAL windows with SLIDING and FILL, ORDER BY, LIMIT / OFFSET — through the DB-API
cursor (``taosrest.connect``) and ``RestClient.sql``, asserting the values (computed here from the inserted rows)
and the ``column_meta`` types the client sees.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from compat_brokers import Walgate

from livewalgate import running_walgate, walgate_env

taosrest = pytest.importorskip("taosrest", reason="taospy is not installed: pip install -e '.[test]'")

UTC = datetime.UTC
# TDengine's documentation example: (table, location, groupid) -> rows (ts, current, voltage, phase)
METERS: dict[tuple[str, str, int], list[tuple[str, float, int, float]]] = {
    ("d1001", "California.SanFrancisco", 2): [("2018-10-03 14:38:05.000", 10.3, 219, 0.31),
                                              ("2018-10-03 14:38:15.000", 12.6, 218, 0.33),
                                              ("2018-10-03 14:38:16.800", 12.3, 221, 0.31)],
    ("d1002", "California.SanFrancisco", 3): [("2018-10-03 14:38:16.650", 10.3, 218, 0.25)],
    ("d1003", "California.LosAngeles", 2): [("2018-10-03 14:38:05.500", 11.8, 221, 0.28),
                                            ("2018-10-03 14:38:16.600", 13.4, 223, 0.29)],
    ("d1004", "California.LosAngeles", 3): [("2018-10-03 14:38:05.000", 10.8, 223, 0.29),
                                            ("2018-10-03 14:38:06.500", 11.5, 221, 0.35)],
}
ROWS = [{"tbname": t, "location": loc, "groupid": g, "ts": datetime.datetime.fromisoformat(ts).replace(tzinfo=UTC),
         "current": c, "voltage": v, "phase": p} for (t, loc, g), rows in METERS.items() for ts, c, v, p in rows]


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture(scope="module")
def cursor(walgate: Walgate) -> Iterator[Any]:
    conn = taosrest.connect(url=walgate.http_url, user="root", password="taosdata", timezone=UTC)
    cur = conn.cursor()
    cur.execute("CREATE DATABASE power VGROUPS 4 PRECISION 'ms'")
    cur.execute("CREATE STABLE power.meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) "
                "TAGS (location VARCHAR(64), groupid INT)")
    inserted = 0
    for (table, location, groupid), rows in METERS.items():
        values = " ".join(f"('{ts}', {c}, {v}, {p})" for ts, c, v, p in rows)
        inserted += cur.execute(f"INSERT INTO power.{table} USING power.meters TAGS ('{location}', {groupid}) "
                                f"VALUES {values}")
    assert inserted == len(ROWS)
    yield cur
    conn.close()


@pytest.fixture(scope="module")
def client(walgate: Walgate, cursor: Any) -> Any:
    return taosrest.RestClient(walgate.http_url, user="root", password="taosdata", timezone=UTC)


def types(cur: Any) -> list[tuple[str, str]]:
    return [(name, type_) for name, type_, _ in cur.description]


def test_select_star_still_works(cursor: Any) -> None:
    cursor.execute("SELECT * FROM power.meters")
    assert types(cursor) == [("ts", "TIMESTAMP"), ("current", "FLOAT"), ("voltage", "INT"), ("phase", "FLOAT"),
                             ("location", "VARCHAR"), ("groupid", "INT")]
    assert sorted(row[0] for row in cursor.fetchall()) == sorted(r["ts"] for r in ROWS)


def test_count_is_no_longer_refused(cursor: Any) -> None:
    cursor.execute("SELECT COUNT(*) FROM power.meters")
    assert types(cursor) == [("count(*)", "BIGINT")]
    assert cursor.fetchall() == [[len(ROWS)]]


def test_aggregates_and_their_types(cursor: Any) -> None:
    cursor.execute("SELECT avg(current), sum(voltage), sum(current), min(voltage), max(current), first(voltage), "
                   "last(current), spread(voltage) FROM power.meters")
    assert types(cursor) == [("avg(current)", "DOUBLE"), ("sum(voltage)", "BIGINT"), ("sum(current)", "DOUBLE"),
                             ("min(voltage)", "INT"), ("max(current)", "FLOAT"), ("first(voltage)", "INT"),
                             ("last(current)", "FLOAT"), ("spread(voltage)", "DOUBLE")]
    voltages = [r["voltage"] for r in ROWS]
    first = min(ROWS, key=lambda r: (r["ts"], r["tbname"]))
    last = max(ROWS, key=lambda r: r["ts"])
    [row] = cursor.fetchall()
    assert row[0] == pytest.approx(statistics.mean(r["current"] for r in ROWS), rel=1e-6)
    assert row[1:] == [sum(voltages), pytest.approx(sum(r["current"] for r in ROWS), rel=1e-6), min(voltages),
                       max(r["current"] for r in ROWS), first["voltage"], last["current"],
                       float(max(voltages) - min(voltages))]
    assert min(r["ts"] for r in ROWS if r["voltage"] == row[5]) == first["ts"]  # ties at the first ts: either


def test_time_range_where(cursor: Any) -> None:
    cursor.execute("SELECT count(*), max(voltage) FROM power.meters WHERE ts >= '2018-10-03 14:38:05.500' "
                   "AND ts < '2018-10-03 14:38:16.700'")
    inside = [r for r in ROWS if at("2018-10-03 14:38:05.500") <= r["ts"] < at("2018-10-03 14:38:16.700")]
    assert cursor.fetchall() == [[len(inside), max(r["voltage"] for r in inside)]]
    cursor.execute("SELECT count(*) FROM power.meters WHERE ts BETWEEN '2018-10-03 14:38:05' AND "
                   "'2018-10-03 14:38:06'")
    assert cursor.fetchall() == [[sum(1 for r in ROWS if at("2018-10-03 14:38:05") <= r["ts"] <= at("2018-10-03 14:38:06"))]]
    cursor.execute("SELECT count(*) FROM power.meters WHERE ts > now - 1h")
    assert cursor.fetchall() == [[0]]  # every row is from 2018


def test_group_by_and_partition_by(cursor: Any, client: Any) -> None:
    answer = client.sql("SELECT location, count(*), avg(voltage) FROM power.meters GROUP BY location "
                        "ORDER BY location")
    assert answer["column_meta"] == [["location", "VARCHAR", 64], ["count(*)", "BIGINT", 8],
                                     ["avg(voltage)", "DOUBLE", 8]]
    by_location: dict[str, list[int]] = {}
    for r in ROWS:
        by_location.setdefault(r["location"], []).append(r["voltage"])
    assert answer["data"] == [[loc, len(vs), pytest.approx(statistics.mean(vs))] for loc, vs in sorted(by_location.items())]
    cursor.execute("SELECT tbname, groupid, last(ts), max(current) FROM power.meters PARTITION BY tbname ORDER BY tbname")
    assert types(cursor) == [("tbname", "VARCHAR"), ("groupid", "INT"), ("last(ts)", "TIMESTAMP"),
                             ("max(current)", "FLOAT")]
    assert cursor.fetchall() == [[t, g, max(r["ts"] for r in ROWS if r["tbname"] == t),
                                  max(r["current"] for r in ROWS if r["tbname"] == t)] for t, _, g in METERS]


def test_interval_windows(client: Any) -> None:
    answer = client.sql("SELECT _wstart, _wend, count(*), max(voltage) FROM power.meters INTERVAL(10s)")
    assert [m[:2] for m in answer["column_meta"]] == [["_wstart", "TIMESTAMP"], ["_wend", "TIMESTAMP"],
                                                      ["count(*)", "BIGINT"], ["max(voltage)", "INT"]]
    starts = [at("2018-10-03 14:38:00"), at("2018-10-03 14:38:10")]
    ten = datetime.timedelta(seconds=10)
    expected = []
    for start in starts:
        rows = [r for r in ROWS if start <= r["ts"] < start + ten]
        expected.append([start, start + ten, len(rows), max(r["voltage"] for r in rows)])
    assert answer["data"] == expected


def test_interval_sliding_and_fill(client: Any) -> None:
    answer = client.sql("SELECT _wstart, count(*) FROM power.meters INTERVAL(10s) SLIDING(5s)")
    five, ten = datetime.timedelta(seconds=5), datetime.timedelta(seconds=10)
    starts = [at("2018-10-03 14:37:55") + i * five for i in range(6)]
    expected = [[s, sum(1 for r in ROWS if s <= r["ts"] < s + ten)] for s in starts]
    assert answer["data"] == [e for e in expected if e[1]]
    sql = ("SELECT _wstart, avg(voltage) FROM power.meters WHERE ts >= '2018-10-03 14:38:00' "
           "AND ts < '2018-10-03 14:38:25' INTERVAL(5s) FILL({})")
    windows = [at("2018-10-03 14:38:00") + i * five for i in range(5)]
    averages = [statistics.mean(vs) if (vs := [r["voltage"] for r in ROWS if w <= r["ts"] < w + five]) else None
                for w in windows]
    assert averages[0] is None and averages[2] is None and averages[4] is None  # the gaps FILL fills
    fills = {
        "NULL": averages,
        "VALUE, 0": [0.0 if a is None else a for a in averages],
        "PREV": [None, averages[1], averages[1], averages[3], averages[3]],
        "NEXT": [averages[1], averages[1], averages[3], averages[3], None],
        "LINEAR": [None, averages[1], (averages[1] + averages[3]) / 2, averages[3], None],
    }
    for mode, values in fills.items():
        data = client.sql(sql.format(mode))["data"]
        assert data == [[w, pytest.approx(v) if v is not None else None] for w, v in zip(windows, values)], mode


def test_order_by_limit_offset_and_expressions(cursor: Any) -> None:
    cursor.execute("SELECT ts, voltage * 2 AS v2, current + phase FROM power.meters "
                   "ORDER BY voltage DESC, ts LIMIT 3 OFFSET 1")
    assert types(cursor) == [("ts", "TIMESTAMP"), ("v2", "BIGINT"), ("current+phase", "DOUBLE")]
    ordered = sorted(ROWS, key=lambda r: (-r["voltage"], r["ts"]))[1:4]
    assert cursor.fetchall() == [[r["ts"], 2 * r["voltage"], pytest.approx(r["current"] + r["phase"], rel=1e-6)]
                                 for r in ordered]


def test_errors_reach_the_client_as_errors(walgate: Walgate, client: Any) -> None:
    bad = "SELECT voltage, count(*) FROM power.meters GROUP BY location"
    with pytest.raises(taosrest.HTTPError, match="400"):  # taosrest reads no body from a 400: the message is below
        client.sql(bad)
    with pytest.raises(AssertionError, match="column voltage must be in GROUP BY / PARTITION BY"):
        walgate.sql(bad)


def test_with_basic_auth_a_user_and_password_are_required(tmp_path: Path) -> None:
    """HTTP Basic auth on (``http_auth = basic``): taosrest's user and password log in, as with taosAdapter; a wrong
    password is HTTP 401 to taosrest; users made with SQL log in too."""
    env = {**walgate_env(), "WALGATE_HTTP_AUTH": "basic", "WALGATE_ROOT_PASSWORD": "taos-r00t"}
    with running_walgate(tmp_path, env=env) as server:
        root = taosrest.connect(url=server.http_url, user="root", password="taos-r00t", timezone=UTC).cursor()
        root.execute("CREATE USER reader PASS 'read3r'")
        root.execute("SHOW USERS")
        assert [row[:2] for row in root.fetchall()] == [["reader", 0], ["root", 1]]
        reader = taosrest.RestClient(server.http_url, user="reader", password="read3r")
        assert reader.sql("SHOW DATABASES")["code"] == 0
        for user, password in (("root", "taosdata"), ("reader", "wrong"), ("nobody", "read3r")):
            with pytest.raises(taosrest.HTTPError, match="401"):
                taosrest.RestClient(server.http_url, user=user, password=password).sql("SHOW DATABASES")
        assert "taos-r00t" not in server.log() and "read3r" not in server.log()
