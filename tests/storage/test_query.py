"""TDengine read queries (storage/query.py) through a real Engine, checked against values computed here in Python
from the inserted rows: aggregates, time ranges, grouping, INTERVAL windows with SLIDING and FILL, ORDER BY, LIMIT."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clocks import NOV_2023_NS, ManualClock

from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue, LimitExceeded, Unsupported
from walgate.storage.values import format_timestamp

BASE = 1_700_000_000_000  # ms, a multiple of 10 s
TABLES = [("t0", "sf", 1), ("t1", "la", 2), ("t2", "sf", 2), ("t3", "la", 1)]
GAP = range(4, 8)  # rows of t0 left out: windows without rows


def _rows() -> list[dict[str, Any]]:
    rows = []
    for i, (name, loc, gid) in enumerate(TABLES):
        for k in range(12):
            if name == "t0" and k in GAP:
                continue
            rows.append({
                "tbname": name, "loc": loc, "gid": gid, "ts": BASE + k * 2500 + i * 100,
                "c": ((i + k) % 8) * 0.25, "v": None if (k + i) % 5 == 0 else (i * 7 + k * 3) % 11 - 5,
                "p": k * 1.5 + i, "u": k * 1000 + i, "s": f"s{k}",
            })
    return rows


ROWS = _rows()


def _sql_value(value: Any) -> str:
    return "NULL" if value is None else f"'{value}'" if isinstance(value, str) else str(value)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    e = Engine.open(Path(tmp_path_factory.mktemp("query")))
    e.execute("CREATE DATABASE q VGROUPS 2")
    e.execute("CREATE STABLE q.m (ts TIMESTAMP, c FLOAT, v INT, p DOUBLE, u BIGINT UNSIGNED, s VARCHAR(10)) "
              "TAGS (loc VARCHAR(16), gid INT)")
    for name, loc, gid in TABLES:
        values = " ".join("(" + ", ".join(_sql_value(r[c]) for c in ("ts", "c", "v", "p", "u", "s")) + ")"
                          for r in ROWS if r["tbname"] == name)
        e.execute(f"INSERT INTO q.{name} USING q.m TAGS ('{loc}', {gid}) VALUES {values}")
    yield e
    e.close()


def ts(ticks: int) -> str:
    return format_timestamp(ticks, "ms")


def query(engine: Engine, sql: str) -> tuple[list[tuple[str, str, int]], list[list[Any]]]:
    result = engine.execute(sql)
    return result.columns, result.rows


def non_null(rows: Iterable[dict[str, Any]], column: str) -> list[dict[str, Any]]:
    return [r for r in rows if r[column] is not None]


def aggregates(rows: list[dict[str, Any]]) -> list[Any]:
    """count(*), count(v), avg(v), sum(v), sum(c), min(v), max(c), first(v), last(v), spread(p), stddev(p)."""
    vs = [r["v"] for r in non_null(rows, "v")]
    ps = [r["p"] for r in rows]
    by_ts = sorted(non_null(rows, "v"), key=lambda r: r["ts"])
    return [len(rows), len(vs), sum(vs) / len(vs) if vs else None, sum(vs) if vs else None,
            sum(r["c"] for r in rows) if rows else None, min(vs) if vs else None,
            max(r["c"] for r in rows) if rows else None, by_ts[0]["v"] if by_ts else None,
            by_ts[-1]["v"] if by_ts else None, max(ps) - min(ps) if ps else None,
            statistics.pstdev(ps) if ps else None]


AGGREGATES = "count(*), count(v), avg(v), sum(v), sum(c), min(v), max(c), first(v), last(v), spread(p), stddev(p)"
AGGREGATE_META = [("count(*)", "BIGINT", 8), ("count(v)", "BIGINT", 8), ("avg(v)", "DOUBLE", 8),
                  ("sum(v)", "BIGINT", 8), ("sum(c)", "DOUBLE", 8), ("min(v)", "INT", 4), ("max(c)", "FLOAT", 4),
                  ("first(v)", "INT", 4), ("last(v)", "INT", 4), ("spread(p)", "DOUBLE", 8),
                  ("stddev(p)", "DOUBLE", 8)]


def approx(row: list[Any]) -> list[Any]:
    return [pytest.approx(x) if isinstance(x, float) else x for x in row]


# ----------------------------------------------------------------- aggregates


def test_aggregates_over_a_supertable(engine: Engine) -> None:
    meta, rows = query(engine, f"SELECT {AGGREGATES} FROM q.m")
    assert meta == AGGREGATE_META
    assert rows == [approx(aggregates(ROWS))]


def test_aggregates_over_a_subtable_and_sum_of_unsigned(engine: Engine) -> None:
    t1 = [r for r in ROWS if r["tbname"] == "t1"]
    assert query(engine, f"SELECT {AGGREGATES} FROM q.t1")[1] == [approx(aggregates(t1))]
    meta, rows = query(engine, "SELECT sum(u) AS total, last_row(v), first(ts), last(ts) FROM q.m")
    assert meta == [("total", "BIGINT UNSIGNED", 8), ("last_row(v)", "INT", 4), ("first(ts)", "TIMESTAMP", 8),
                    ("last(ts)", "TIMESTAMP", 8)]
    last = max(ROWS, key=lambda r: r["ts"])
    assert rows == [[sum(r["u"] for r in ROWS), last["v"], ts(min(r["ts"] for r in ROWS)), ts(last["ts"])]]


def test_aggregates_of_no_rows_are_one_row_grouped_ones_none(engine: Engine) -> None:
    assert query(engine, "SELECT count(*), sum(v), first(v) FROM q.m WHERE v > 1000")[1] == [[0, None, None]]
    assert query(engine, "SELECT loc, count(*) FROM q.m WHERE v > 1000 GROUP BY loc")[1] == []
    assert query(engine, "SELECT _wstart, count(*) FROM q.m WHERE v > 1000 INTERVAL(10s) FILL(PREV)")[1] == []


def test_projections_with_expressions_over_aggregates(engine: Engine) -> None:
    meta, rows = query(engine, "SELECT max(v) - min(v) AS range_v, avg(p) * 2, count(*) + 1 FROM q.m")
    vs = [r["v"] for r in non_null(ROWS, "v")]
    assert meta == [("range_v", "BIGINT", 8), ("avg(p)*2", "DOUBLE", 8), ("count(*)+1", "BIGINT", 8)]
    assert rows == [[max(vs) - min(vs), pytest.approx(2 * statistics.mean(r["p"] for r in ROWS)), len(ROWS) + 1]]


# ----------------------------------------------------------------- time ranges


def test_time_range_where(engine: Engine) -> None:
    low, high = BASE + 5_000, BASE + 20_000
    inside = [r for r in ROWS if low <= r["ts"] < high]
    sql = f"SELECT {AGGREGATES} FROM q.m WHERE ts >= '{ts(low)}' AND ts < '{ts(high)}'"
    assert query(engine, sql)[1] == [approx(aggregates(inside))]
    between = [r for r in ROWS if low <= r["ts"] <= high]
    naive = [ts(t).replace("T", " ").removesuffix("Z") for t in (low, high)]  # '2023-11-14 22:13:25.000': UTC
    sql = f"SELECT count(*) FROM q.m WHERE ts BETWEEN '{naive[0]}' AND '{naive[1]}'"
    assert query(engine, sql)[1] == [[len(between)]]
    shifted = [r for r in ROWS if r["ts"] >= BASE + 10_000]
    sql = "SELECT count(*) FROM q.m WHERE ts >= '2023-11-14 22:13:20' + 10s"
    assert query(engine, sql)[1] == [[len(shifted)]]


def test_now_arithmetic(tmp_path: Path) -> None:
    clock = ManualClock(NOV_2023_NS + 90 * 60 * 10**9)  # 2023-11-14T23:43:20Z
    e = Engine.open(tmp_path, clock=clock)
    e.execute("CREATE DATABASE n VGROUPS 1 PRECISION 'us'")
    e.execute("CREATE TABLE n.t (ts TIMESTAMP, v INT)")
    e.execute("INSERT INTO n.t VALUES (now - 2h, 1) (now - 30m, 2) (now - 10s, 3)")
    assert e.execute("SELECT count(*), sum(v) FROM n.t WHERE ts > now - 1h").rows == [[2, 5]]
    assert e.execute("SELECT count(*) FROM n.t WHERE ts BETWEEN now() - 3h AND now - 1h").rows == [[1]]
    assert e.execute("SELECT v FROM n.t WHERE ts > now - 1h AND ts < now() - 1m").rows == [[2]]  # the plain path
    assert e.execute("SELECT count(*) FROM n.t WHERE ts >= today()").rows == [[3]]  # 21:43:20, 23:13:20, 23:43:10
    clock.advance(30 * 60)  # 00:13:20 the next day: no row is of today
    assert e.execute("SELECT count(*) FROM n.t WHERE ts >= today()").rows == [[0]]
    with pytest.raises(InvalidValue, match="a duration .* can only be added to or subtracted from now"):
        e.execute("SELECT count(*) FROM n.t WHERE v > 1h")
    e.close()


# ----------------------------------------------------------------- grouping


def groups(key: Callable[[dict[str, Any]], Any], rows: list[dict[str, Any]] = ROWS) -> dict[Any, list[dict[str, Any]]]:
    out: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[key(r)].append(r)
    return out


def test_group_by_tag(engine: Engine) -> None:
    meta, rows = query(engine, f"SELECT loc, {AGGREGATES} FROM q.m GROUP BY loc ORDER BY loc")
    assert meta == [("loc", "VARCHAR", 16)] + AGGREGATE_META
    assert rows == [approx([loc] + aggregates(rs)) for loc, rs in sorted(groups(lambda r: r["loc"]).items())]


def test_partition_by_tbname_keeps_tags_and_types(engine: Engine) -> None:
    meta, rows = query(engine, "SELECT tbname, loc, gid, count(*), max(v) FROM q.m PARTITION BY tbname")
    assert meta == [("tbname", "VARCHAR", 192), ("loc", "VARCHAR", 16), ("gid", "INT", 4), ("count(*)", "BIGINT", 8),
                    ("max(v)", "INT", 4)]
    expected = [[name, rs[0]["loc"], rs[0]["gid"], len(rs), max(r["v"] for r in non_null(rs, "v"))]
                for name, rs in sorted(groups(lambda r: r["tbname"]).items())]
    assert rows == expected


def test_group_by_two_keys_with_having(engine: Engine) -> None:
    sql = "SELECT gid, loc, sum(v) AS s FROM q.m GROUP BY gid, loc HAVING sum(v) > 0 ORDER BY s DESC"
    expected = [[gid, loc, sum(r["v"] for r in non_null(rs, "v"))]
                for (gid, loc), rs in groups(lambda r: (r["gid"], r["loc"])).items()]
    expected = sorted((e for e in expected if e[2] > 0), key=lambda e: -e[2])
    assert query(engine, sql)[1] == expected


# ----------------------------------------------------------------- windows


def windows(rows: list[dict[str, Any]], length: int, sliding: int, offset: int = 0) -> dict[int, list[dict[str, Any]]]:
    """Window start -> its rows: starts are offset + multiples of sliding, windows [start, start + length)."""
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        start = r["ts"] - (r["ts"] - offset) % sliding
        while start + length > r["ts"]:
            out[start].append(r)
            start -= sliding
    return out


@pytest.mark.parametrize(("clause", "length", "sliding", "offset"), [
    ("INTERVAL(10s)", 10_000, 10_000, 0),
    ("INTERVAL(10s, 2s)", 10_000, 10_000, 2_000),
    ("INTERVAL(10s) SLIDING(5s)", 10_000, 5_000, 0),
    ("INTERVAL(7s, 1500a) SLIDING(3s)", 7_000, 3_000, 1_500),
])
def test_interval_windows(engine: Engine, clause: str, length: int, sliding: int, offset: int) -> None:
    meta, rows = query(engine, f"SELECT _wstart, _wend, _wduration, {AGGREGATES} FROM q.m {clause}")
    assert meta[:3] == [("_wstart", "TIMESTAMP", 8), ("_wend", "TIMESTAMP", 8), ("_wduration", "BIGINT", 8)]
    assert meta[3:] == AGGREGATE_META
    expected = [approx([ts(start), ts(start + length), length] + aggregates(rs))
                for start, rs in sorted(windows(ROWS, length, sliding, offset).items())]
    assert rows == expected


def test_partition_by_tbname_interval_orders_by_partition_then_time(engine: Engine) -> None:
    sql = "SELECT tbname, _wstart, count(*), avg(c) FROM q.m PARTITION BY tbname INTERVAL(10s)"
    expected = [approx([name, ts(start), len(ws), statistics.mean(r["c"] for r in ws)])
                for name, rs in sorted(groups(lambda r: r["tbname"]).items())
                for start, ws in sorted(windows(rs, 10_000, 10_000).items())]
    assert query(engine, sql)[1] == expected
    limited = query(engine, sql + " LIMIT 1 OFFSET 1")[1]  # per partition
    assert limited == [expected[i] for i in range(len(expected))
                       if i > 0 and expected[i][0] == expected[i - 1][0]
                       and (i < 2 or expected[i - 2][0] != expected[i][0])]


FILL_LOW, FILL_HIGH = BASE - 10_000, BASE + 40_000


def filled(mode: str, value: float | None = None) -> list[list[Any]]:
    """t0's windows of 5 s over [FILL_LOW, FILL_HIGH): (start, avg(v), count(*)) with gaps filled per ``mode``."""
    t0 = [r for r in ROWS if r["tbname"] == "t0" and FILL_LOW <= r["ts"] < FILL_HIGH]
    have = {start: rs for start, rs in windows(t0, 5_000, 5_000).items()}
    starts = list(range(FILL_LOW, FILL_HIGH, 5_000))
    known: dict[int, tuple[float | None, int]] = {}
    for start in starts:
        if start in have:
            vs = [r["v"] for r in non_null(have[start], "v")]
            known[start] = (sum(vs) / len(vs) if vs else None, len(have[start]))
    out = []
    for start in starts:
        if start in known:
            out.append([ts(start), known[start][0], known[start][1]])
            continue
        before = [s for s in starts if s < start and s in known]
        after = [s for s in starts if s > start and s in known]
        prev_avg = next((known[s][0] for s in reversed(before) if known[s][0] is not None), None)
        prev_count = known[before[-1]][1] if before else None
        next_avg = next((known[s][0] for s in after if known[s][0] is not None), None)
        next_count = known[after[0]][1] if after else None
        if mode == "NULL":
            out.append([ts(start), None, None])
        elif mode == "VALUE":
            assert value is not None
            out.append([ts(start), float(value), int(value)])
        elif mode == "PREV":
            out.append([ts(start), prev_avg, prev_count])
        elif mode == "NEXT":
            out.append([ts(start), next_avg, next_count])
        else:  # LINEAR, between the nearest non-NULL values
            count = _line(start, before, after, {s: known[s][1] for s in known})
            average = _line(start, before, after, {s: known[s][0] for s in known})
            out.append([ts(start), average, None if count is None else math.trunc(count)])
    return [approx(row) for row in out]


def _line(start: int, before: list[int], after: list[int], values: dict[int, Any]) -> float | None:
    """The value at ``start`` on the line between the nearest non-NULL values before and after it (None at ends)."""
    b = next((s for s in reversed(before) if values[s] is not None), None)
    a = next((s for s in after if values[s] is not None), None)
    if a is None or b is None:
        return None
    return float(values[b] + (values[a] - values[b]) * (start - b) / (a - b))


@pytest.mark.parametrize(("fill", "mode", "value"), [
    ("FILL(NULL)", "NULL", None), ("FILL(VALUE, 7.9)", "VALUE", 7.9), ("FILL(PREV)", "PREV", None),
    ("FILL(NEXT)", "NEXT", None), ("FILL(LINEAR)", "LINEAR", None),
])
def test_fill(engine: Engine, fill: str, mode: str, value: float | None) -> None:
    sql = (f"SELECT _wstart, avg(v), count(*) FROM q.t0 WHERE ts >= {FILL_LOW} AND ts < '{ts(FILL_HIGH)}' "
           f"INTERVAL(5s) {fill}")
    meta, rows = query(engine, sql)
    assert meta == [("_wstart", "TIMESTAMP", 8), ("avg(v)", "DOUBLE", 8), ("count(*)", "BIGINT", 8)]
    assert rows == filled(mode, value)
    unfilled = query(engine, sql.replace(fill, "FILL(NONE)"))[1]
    assert unfilled == [row for row in filled("NULL") if row[2] is not None]


def test_fill_per_partition_and_value_list(engine: Engine) -> None:
    sql = (f"SELECT _wstart, tbname, gid, max(v), count(*) FROM q.m WHERE ts >= {BASE} AND ts < {BASE + 30_000} "
           "PARTITION BY tbname INTERVAL(10s) FILL(VALUE, -1, 0)")
    rows = query(engine, sql)[1]
    assert [r[:3] for r in rows] == [[ts(start), name, gid] for name, _, gid in TABLES
                                     for start in (BASE, BASE + 10_000, BASE + 20_000)]
    t0 = [r for r in rows if r[1] == "t0"]
    assert t0[1][3:] == [-1, 0]  # t0 has no rows in [BASE + 10 s, BASE + 20 s)
    with pytest.raises(InvalidValue, match="FILL\\(VALUE, ...\\) needs one value or one per aggregate column \\(2\\)"):
        engine.execute(sql.replace("FILL(VALUE, -1, 0)", "FILL(VALUE, 1, 2, 3)"))


# ----------------------------------------------------------------- order, limit


def test_order_by_limit_offset(engine: Engine) -> None:
    meta, rows = query(engine, "SELECT ts, v, v * 2 AS w, tbname FROM q.m ORDER BY v DESC, ts LIMIT 5 OFFSET 3")
    assert meta == [("ts", "TIMESTAMP", 8), ("v", "INT", 4), ("w", "BIGINT", 8), ("tbname", "VARCHAR", 192)]
    ordered = sorted(ROWS, key=lambda r: (r["v"] is not None, -(r["v"] or 0), r["ts"]))  # NULLs first descending
    assert rows == [[ts(r["ts"]), r["v"], None if r["v"] is None else 2 * r["v"], r["tbname"]] for r in ordered[3:8]]
    ascending = query(engine, "SELECT v FROM q.m WHERE tbname = 't1' ORDER BY 1 LIMIT 2, 20")[1]
    t1 = sorted((r["v"] for r in ROWS if r["tbname"] == "t1"), key=lambda v: (v is None, v or 0))  # NULLs last
    assert ascending == [[v] for v in t1[2:22]]


def test_order_by_window_start_descending(engine: Engine) -> None:
    rows = query(engine, "SELECT _wstart, count(*) FROM q.m INTERVAL(10s) ORDER BY _wstart DESC LIMIT 2")[1]
    expected = sorted(windows(ROWS, 10_000, 10_000).items(), reverse=True)[:2]
    assert rows == [[ts(start), len(rs)] for start, rs in expected]


# ----------------------------------------------------------------- errors


@pytest.mark.parametrize(("sql", "error", "message"), [
    ("SELECT count(*) FROM q.m GROUP BY loc INTERVAL(1s)", Exception, "syntax error"),
    ("SELECT count(*) FROM q.m PARTITION BY loc INTERVAL(10s) GROUP BY gid", InvalidValue,
     "INTERVAL cannot be combined with GROUP BY"),
    ("SELECT _wstart, v FROM q.m", InvalidValue, "_wstart is only valid in the select list of a query with INTERVAL"),
    ("SELECT v, count(*) FROM q.m GROUP BY loc", InvalidValue, "column v must be in GROUP BY / PARTITION BY"),
    ("SELECT count(*) FROM q.m INTERVAL(10s) SLIDING(20s)", InvalidValue, "SLIDING must not be larger than INTERVAL"),
    ("SELECT count(*) FROM q.m INTERVAL(10s) SLIDING(10a)", InvalidValue, "SLIDING must be at least 1/100"),
    ("SELECT count(*) FROM q.m INTERVAL(10s, 10s)", InvalidValue, "offset must be smaller"),
    ("SELECT count(*) FROM q.m INTERVAL(1u)", InvalidValue, "finer than the database precision"),
    ("SELECT max(count(*)) FROM q.m", InvalidValue, "not allowed inside another aggregate"),
    ("SELECT avg(s) FROM q.m", InvalidValue, "avg\\(\\) needs a number"),
    ("SELECT percentile(v, 50) FROM q.m", Unsupported, "function percentile\\(\\) is not supported in queries"),
    ("SELECT nosuch, count(*) FROM q.m", InvalidValue, "Invalid column name: nosuch"),
    ("SELECT count(*) FROM q.m HAVING v > 1", InvalidValue, "column v must be in GROUP BY"),
    ("SELECT v FROM q.m HAVING v > 1", InvalidValue, "HAVING needs GROUP BY"),
    ("SELECT count(*) FROM q.m ORDER BY 3", InvalidValue, "ORDER BY position 3 is not in the select list"),
    ("SELECT sum(u * 10000000000000000) FROM q.m", InvalidValue, "query failed: .*"),
    (f"SELECT count(*) FROM q.m WHERE ts >= 0 AND ts <= {BASE} INTERVAL(1a) FILL(NULL)", LimitExceeded,
     "FILL would produce 1700000000001 rows: the limit is 1000000"),
    ((f"SELECT count(*) FROM q.m WHERE ts >= {BASE - 300_000} AND ts < {BASE} + 1m PARTITION BY tbname "
      "INTERVAL(1a) FILL(NULL)"), LimitExceeded, "FILL would produce 1440000 rows"),  # 4 partitions, 360,000 windows
])
def test_errors(engine: Engine, sql: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        engine.execute(sql)


def test_topics_still_refuse_aggregates_and_windows(engine: Engine) -> None:
    with pytest.raises(Unsupported, match="aggregate function count\\(\\) is not supported in CREATE TOPIC"):
        engine.execute("CREATE TOPIC agg AS SELECT count(*) FROM q.m")
    with pytest.raises(Exception, match="syntax error"):
        engine.execute("CREATE TOPIC win AS SELECT v FROM q.m INTERVAL(10s)")
    assert "agg" not in [r[0] for r in engine.execute("SHOW TOPICS").rows]


def test_offset_and_star_answer_as_the_plain_path_does(engine: Engine) -> None:
    plain = engine.execute("SELECT * FROM q.t1")
    offset = engine.execute("SELECT * FROM q.t1 LIMIT 3 OFFSET 2")  # OFFSET: run by DuckDB
    assert offset.columns == plain.columns
    assert offset.rows == plain.rows[2:5]
