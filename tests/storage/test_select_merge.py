"""A SELECT merged from parts of its vnodes' scanned rows (walgate.storage.select_merge), as the node asked merges
the parts of a database spread over nodes: the answer equals the one over every vnode at once, to the last bit of a
floating-point sum and whatever order the parts arrive in, both when the parts are rows and when they are partial
aggregates (walgate.storage.select_partial: a row per group and window, for COUNT/MIN/MAX, integer SUM/AVG, SPREAD
and FIRST/LAST/LAST_ROW with their timestamps, whose internal forms no statement may call);
a part of a query of rows with ORDER BY ... LIMIT keeps only OFFSET + LIMIT rows; a part or the merge past
``max_bytes`` is refused; bytes that are not a part, or parts of the other kind, are refused; parts whose columns
differ (nodes between two schema versions) are refused as retriable. 64-bit integer sums and averages, and an output
named as a grouping key in ORDER BY, answer as on one node. Parts prepared at clocks 3 s apart, given the node
asked's ``now``, answer a ``now``-relative WHERE as one node does.
(The same across real nodes: tests/cluster/test_serve_cluster_select_merge.py.)
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from walgate.replication.partition import NO_LEADER
from walgate.storage.catalog import DatabaseDef
from walgate.storage.engine import Engine, PreparedSelect
from walgate.storage.errors import InvalidValue, LimitExceeded, NoLeader, StorageUnavailable, Unsupported
from walgate.storage.select_merge import check_led, decode, encode
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse
from walgate.storage.vnode import vnode_of

sys.path.insert(0, str(Path(__file__).parent))
from clocks import NOV_2023_NS, ManualClock  # noqa: E402

VGROUP = "__wg_vgroup"  # a part's column of each row's vnode index (select_merge.py)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """One engine for every test here (they only read): 9 subtables over 3 vgroups, 9 rows each, and a normal table."""
    engine = Engine.open(tmp_path_factory.mktemp("merge") / "data")
    engine.execute("CREATE DATABASE s VGROUPS 3")
    engine.execute("CREATE STABLE s.m (ts TIMESTAMP, v DOUBLE, n INT) TAGS (t INT)")
    for i in range(9):
        rows = " ".join(f"({1700000000000 + j * 700 + i}, {0.1 * (i + 1) * (j + 3)}, {(i * j) % 7})" for j in range(9))
        engine.execute(f"INSERT INTO s.d{i} USING s.m TAGS ({i % 3}) VALUES {rows}")
    engine.execute("CREATE STABLE s.w (ts TIMESTAMP, b BIGINT, u BIGINT UNSIGNED, k INT) TAGS (t INT)")
    for i in range(6):  # 64-bit sums: a vnode's passes 2^63 (2^64 unsigned) where the whole one does not
        rows = " ".join(f"({1700000000000 + j * 700 + i}, {(-1) ** i * 4 * 10 ** 18}, {18 * 10 ** 18 if j < 1 else 1},"
                        f" {(i * j) % 3})" for j in range(3))
        engine.execute(f"INSERT INTO s.w{i} USING s.w TAGS ({i % 2}) VALUES {rows}")
    engine.execute("CREATE STABLE s.z (ts TIMESTAMP, x INT, y DOUBLE, c VARCHAR(8)) TAGS (t INT)")
    for i in range(6):  # NULLs: each value's first and last non-NULL rows differ from the first and last rows
        rows = " ".join(f"({1700000000000 + j * 300 + i}, {'NULL' if (i + j) % 3 == 0 else i * 10 + j}, "
                        f"{'NULL' if (i * j) % 4 == 1 else 0.1 * (i + 1) * (j + 7)}, "
                        f"{'NULL' if j > 6 else repr(f'c{i}{j}')})" for j in range(9))
        engine.execute(f"INSERT INTO s.z{i} USING s.z TAGS ({i % 2}) VALUES {rows}")
    engine.execute("CREATE TABLE s.nt (ts TIMESTAMP, n INT)")  # a normal table: in one vgroup
    engine.execute("INSERT INTO s.nt VALUES " + " ".join(f"({1700000000000 + j * 10}, {j % 4})" for j in range(20)))
    yield engine
    engine.close()


def _parts(engine: Engine, sql: str, max_bytes: int | None = None) -> tuple[PreparedSelect, list[bytes]]:
    """The query of ``sql`` prepared, and each of its vnodes' part (scanned rows) in reverse vnode order."""
    stmt = parse(sql)
    assert isinstance(stmt, ast.Select)
    prepared = engine.prepare_select(stmt, here_only=True, scan=True)
    assert prepared.scan and len(prepared.vgroups) == 3
    parts = [dataclasses.replace(prepared, sources=prepared.sources[i:i + 1], vgroups=prepared.vgroups[i:i + 1])
             .scan_rows(max_bytes=max_bytes) for i in reversed(range(3))]
    return prepared, parts


def _merged(prepared: PreparedSelect, parts: list[bytes], max_bytes: int | None = None) -> tuple[object, object]:
    result = dataclasses.replace(prepared, scan=False, sources=(), vgroups=(), remote=tuple(parts)).run(
        max_bytes=max_bytes)
    return result.columns, result.rows


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*), SUM(v), AVG(v), STDDEV(v), MIN(n), MAX(n), SPREAD(v), FIRST(v), LAST(v) FROM s.m",
    "SELECT t, SUM(v), AVG(v) FROM s.m GROUP BY t HAVING COUNT(*) > 1 ORDER BY t DESC",
    "SELECT _wstart, SUM(v), LAST_ROW(n) FROM s.m WHERE ts < 1700000004000 INTERVAL(900a) FILL(LINEAR)",
    "SELECT tbname, SUM(v) FROM s.m GROUP BY tbname ORDER BY tbname LIMIT 4 OFFSET 2",
    "SELECT ts, v, n FROM s.m ORDER BY v DESC, ts LIMIT 4 OFFSET 3",
    # partial aggregates (select_partial.split)
    "SELECT COUNT(*), COUNT(v), SUM(n), AVG(n), MIN(v), MAX(ts), MAX(n) - MIN(n) AS r FROM s.m WHERE n > 1",
    "SELECT t, COUNT(v), SUM(n) AS total FROM s.m GROUP BY t HAVING MAX(v) > 1 ORDER BY total DESC, t LIMIT 2",
    "SELECT tbname, _wstart, _wend, _wduration, COUNT(*), AVG(n) FROM s.m PARTITION BY tbname INTERVAL(2s) SLIDING(1s)"
    " LIMIT 3",
    "SELECT _wstart, SUM(n) * 2, MIN(v) FROM s.m WHERE ts < 1700000004000 INTERVAL(900a) ORDER BY 2 DESC, 1",
    "SELECT n % 3 AS k, COUNT(*) FROM s.m GROUP BY n % 3 ORDER BY k",
    "SELECT COUNT(*), SUM(n) FROM s.m WHERE n > 100",
    "SELECT t, SPREAD(v), SPREAD(n), SPREAD(n) * 2 AS s2 FROM s.m GROUP BY t ORDER BY s2 DESC, t",
    "SELECT _wstart, SPREAD(v) FROM s.m WHERE n > 5 INTERVAL(2s)",  # windows some vnodes have no row in
    "SELECT SPREAD(b), SPREAD(u) FROM s.w",
    "SELECT n, COUNT(*), AVG(n) FROM s.nt GROUP BY n ORDER BY n DESC",
    "SELECT ts, n FROM s.nt ORDER BY n, ts DESC LIMIT 3 OFFSET 2",
    "SELECT tbname, ts, v * n AS w FROM s.m WHERE n > 2 ORDER BY w, ts DESC LIMIT 5",
    # 64-bit integers: a node's partial sum would overflow where one node's sum and average do not
    "SELECT AVG(b), SUM(b), COUNT(*) FROM s.w",
    "SELECT t, AVG(u), AVG(b), SUM(k) FROM s.w GROUP BY t ORDER BY t",
    # FIRST / LAST / LAST_ROW: each node's with its timestamp, the least / greatest taken
    "SELECT FIRST(v), LAST(v), LAST_ROW(n), FIRST(ts), LAST(tbname), COUNT(*) FROM s.m WHERE n > 1",
    "SELECT FIRST(x), LAST(x), LAST_ROW(x), FIRST(y), LAST(y), LAST_ROW(y), FIRST(c), LAST(c), LAST_ROW(c) FROM s.z",
    "SELECT t, FIRST(x) + LAST(x) AS fl, LAST_ROW(y), LAST(c) FROM s.z GROUP BY t HAVING FIRST(y) > 0 ORDER BY fl DESC",
    "SELECT tbname, _wstart, FIRST(x), LAST(y), LAST_ROW(c) FROM s.z PARTITION BY tbname INTERVAL(1s) SLIDING(500a)",
    "SELECT _wstart, LAST(x), LAST_ROW(x), FIRST(c) FROM s.z WHERE x > 3 OR x IS NULL INTERVAL(700a) ORDER BY 2, 1",
    "SELECT LAST(x), FIRST(y) FROM s.z WHERE ts < 0",  # no row anywhere: NULLs, as on one node
    "SELECT n, FIRST(ts), LAST_ROW(ts) FROM s.nt GROUP BY n ORDER BY n",
    # an output named as a grouping key: ORDER BY means the output, as on one node
    "SELECT SUM(n) AS t FROM s.m GROUP BY t ORDER BY t",
    "SELECT t AS x, MAX(n) - t AS t FROM s.m GROUP BY t ORDER BY t DESC, x",
])
def test_parts_merged_in_any_order_answer_as_every_vnode_at_once(engine: Engine, sql: str) -> None:
    whole = engine.execute(sql)
    prepared, parts = _parts(engine, sql)
    assert _merged(prepared, parts) == (whole.columns, whole.rows) and whole.rows


def test_a_part_of_a_query_of_rows_with_a_limit_keeps_offset_plus_limit_rows(engine: Engine) -> None:
    _, parts = _parts(engine, "SELECT ts, v FROM s.m ORDER BY v DESC LIMIT 2 OFFSET 1")
    assert [decode(p).num_rows for p in parts] == [3, 3, 3]
    _, parts = _parts(engine, "SELECT STDDEV(v) FROM s.m ORDER BY 1 LIMIT 1")  # an aggregate needs every row
    assert sum(decode(p).num_rows for p in parts) == 81


@pytest.mark.parametrize(("sql", "groups"), [
    ("SELECT COUNT(*), SUM(n), AVG(n), MIN(v), MAX(v) FROM s.m", 1),  # one row per node, even over none
    ("SELECT COUNT(*) FROM s.m WHERE n > 100", 1),
    ("SELECT t, COUNT(*), SUM(n) FROM s.m GROUP BY t", 3),  # at most a row per group
    ("SELECT SUM(v) FROM s.m", None),  # a sum of floating-point values depends on the order: rows shipped
    ("SELECT FIRST(n), LAST(v), LAST_ROW(ts), COUNT(*) FROM s.m", 1),  # each with its timestamp
    ("SELECT t, FIRST(x), LAST(c), LAST_ROW(y) FROM s.z PARTITION BY t INTERVAL(1s)", 2 * 3),
    ("SELECT FIRST(n), STDDEV(n) FROM s.m", None),  # STDDEV: rows shipped
    ("SELECT t, SPREAD(v) FROM s.m GROUP BY t", 3),
    ("SELECT SPREAD(ts) FROM s.m", None),  # of a TIMESTAMP: rows shipped
    ("SELECT COUNT(*) FROM s.m INTERVAL(1s) FILL(NULL)", None),  # FILL: rows shipped
    ("SELECT t, ts, COUNT(*) FROM s.m GROUP BY t", None),  # ts is not a key: rows shipped
])
def test_a_part_of_an_exactly_mergeable_aggregate_is_its_partial_aggregates(engine: Engine, sql: str,
                                                                            groups: int | None) -> None:
    _, parts = _parts(engine, sql)
    shipped = [decode(p).num_rows for p in parts]
    if groups is None:
        assert sum(shipped) == 81, shipped
    else:
        assert all(1 <= n <= groups for n in shipped), shipped


@pytest.mark.parametrize("sql", [
    "SELECT _first_ts(v) FROM s.m",
    "SELECT t, _last_of(v, ts) FROM s.m GROUP BY t",
    "SELECT _wstart, _last_row_of(n, ts), COUNT(*) FROM s.m INTERVAL(1s)",
    "SELECT COUNT(*) FROM s.m HAVING _last_ts(n) > 0",
    "SELECT COUNT(*), _last_row_ts(1) FROM s.m",  # arguments that reach no column (rv7 R7-3)
    "SELECT t, _last_of(t, t), COUNT(*) FROM s.m GROUP BY t",
])
def test_the_partial_forms_of_first_and_last_are_no_statements(engine: Engine, sql: str) -> None:
    """The aggregates only select_partial's queries run (query.py's PARTIAL_AGGREGATES) are refused in a statement,
    on one node and merged across nodes, as any function walgate does not support."""
    with pytest.raises(Unsupported, match=r"function _\w+\(\) is not supported in queries"):
        engine.execute(sql)
    prepared, parts = _parts(engine, sql)
    with pytest.raises(Unsupported, match=r"function _\w+\(\) is not supported in queries"):
        _merged(prepared, parts)


def test_a_part_or_a_merge_past_max_bytes_is_refused(engine: Engine) -> None:
    sql = "SELECT SUM(v) FROM s.m"
    with pytest.raises(LimitExceeded, match="more than 100 bytes"):
        _parts(engine, sql, max_bytes=100)
    prepared, parts = _parts(engine, sql, max_bytes=1 << 20)
    with pytest.raises(LimitExceeded, match="more than 1000 bytes"):
        _merged(prepared, parts, max_bytes=1000)


def test_bytes_that_are_not_a_part_are_refused(engine: Engine) -> None:
    prepared, parts = _parts(engine, "SELECT SUM(v) FROM s.m")
    with pytest.raises(InvalidValue, match="not an Arrow stream"):
        _merged(prepared, [parts[0], b"not arrow"])
    counted, partials = _parts(engine, "SELECT COUNT(*) FROM s.m")  # partial aggregates where rows are expected
    with pytest.raises(InvalidValue, match="partial aggregates where rows were expected"):
        _merged(prepared, partials)
    with pytest.raises(InvalidValue, match="rows where partial aggregates were expected"):
        _merged(counted, parts)


def test_parts_of_nodes_that_disagree_on_the_columns_are_refused_as_retriable(engine: Engine) -> None:
    """One node's part with a column the others lack (an ALTER STABLE reaching the nodes): a clear, retriable
    error (the HTTP API's 503), not an Arrow exception (a 500 and a traceback)."""
    prepared, parts = _parts(engine, "SELECT ts, v, n FROM s.m ORDER BY v DESC LIMIT 4")
    rows = decode(parts[0])
    altered = encode(rows.drop_columns([VGROUP]).append_column("x", pa.nulls(rows.num_rows, pa.int32())),
                     rows.column(VGROUP).combine_chunks())
    with pytest.raises(StorageUnavailable, match="different columns .* retry the statement"):
        _merged(prepared, [altered, *parts[1:]])


def test_a_replicated_vgroup_with_no_leader_refuses_the_merge_as_retriable() -> None:
    """A merge reads each vgroup on the node leading it: a replicated vgroup with no leader (no state yet, or
    NO_LEADER) refuses the statement with TDengine's "Sync leader is unreachable" (NoLeader, a StorageUnavailable:
    HTTP 503) naming the first such vgroup, rather than an answer without its rows; one copy is never refused."""
    replicated = DatabaseDef("r", {"VGROUPS": 3, "PRECISION": "ms"}, 0, "rid", ((1, 2, 3), (2, 3, 1), (3, 1, 2)))
    check_led(replicated, {0: 1, 1: 2, 2: 3}.get)
    for leaders, vgroup in (({0: 1, 2: 3}, 1), ({0: 1, 1: NO_LEADER, 2: NO_LEADER}, 1), ({1: 2, 2: 3}, 0)):
        with pytest.raises(NoLeader, match=f"^Sync leader is unreachable: vgroup {vgroup} of database r has no leader"):
            check_led(replicated, leaders.get)
    assert issubclass(NoLeader, StorageUnavailable)
    check_led(DatabaseDef("o", {"VGROUPS": 2, "PRECISION": "ms"}, 0, "oid", ((1,), (2,))), {}.get)


def test_a_table_read_alone_needs_only_its_own_vgroups_leader() -> None:
    """rv4 R6: a SELECT of one table (not a supertable) reads its vgroup only, as TDengine routes it: answered while
    another vgroup has no leader, refused (NoLeader) only when its own has none."""
    replicated = DatabaseDef("r", {"VGROUPS": 3, "PRECISION": "ms"}, 0, "rid", ((1, 2, 3), (2, 3, 1), (3, 1, 2)))
    names = {vnode_of("r", f"t{k}", 3): f"t{k}" for k in range(50)}
    assert sorted(names) == [0, 1, 2]
    for vgroup, name in names.items():
        check_led(replicated, {vgroup: 1}.get, name)  # (the others: no state, or none led)
        check_led(replicated, {v: 1 if v == vgroup else NO_LEADER for v in range(3)}.get, name)
        with pytest.raises(NoLeader, match=f"vgroup {vgroup} of database r has no leader"):
            check_led(replicated, {v: v + 1 for v in range(3) if v != vgroup}.get, name)
        with pytest.raises(NoLeader, match="has no leader"):
            check_led(replicated, {vgroup: 1}.get)  # (the whole database read: every vgroup needed)


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*), MIN(ts), MAX(v) FROM c.m WHERE ts > now - 5s",  # partial aggregates
    "SELECT ts, v FROM c.m WHERE ts >= now - 4s AND ts < today() + 1d ORDER BY ts LIMIT 100",  # scanned rows
    "SELECT ts, v FROM c.m WHERE ts > now() - 5s",  # a plain query: each node's rows
])
def test_every_nodes_part_reads_now_at_the_instant_the_node_asked_fixed(tmp_path: Path, sql: str) -> None:
    """Issue 24: nodes whose clocks differ by 3 s each read ``now`` at their own clock, so a ``now``-relative WHERE
    cuts at different instants and the merged answer is none a single node gives; given the node asked's instant
    (``now_ns``, which the gateway sends with each part: sql_forward.select_part), every part cuts at it and the
    merge equals one node's answer at that instant."""
    clock = ManualClock()
    engine = Engine.open(tmp_path / "data", clock=clock)
    try:
        engine.execute("CREATE DATABASE c VGROUPS 3")
        engine.execute("CREATE STABLE c.m (ts TIMESTAMP, v INT) TAGS (t INT)")
        start = NOV_2023_NS // 10**6 - 10_000  # a row every 250 ms over the 10 s before the clock's now
        for i in range(6):
            rows = " ".join(f"({start + j * 250 + i}, {i * 40 + j})" for j in range(40))
            engine.execute(f"INSERT INTO c.d{i} USING c.m TAGS ({i}) VALUES {rows}")
        stmt = parse(sql)
        assert isinstance(stmt, ast.Select)
        whole = engine.execute(sql)
        asked = clock.time_ns()

        def merged(now_ns: int | None) -> object:
            prepared = engine.prepare_select(stmt, here_only=True, scan=True, now_ns=now_ns)
            parts = []
            for i in range(3):  # vgroup i is "node i", whose clock is i * 3 s ahead of the node asked's
                clock.advance(3.0 * i)
                node = engine.prepare_select(stmt, here_only=True, scan=True, now_ns=now_ns)
                clock.advance(-3.0 * i)
                parts.append(dataclasses.replace(node, sources=node.sources[i:i + 1], vgroups=node.vgroups[i:i + 1]))
            if not prepared.scan:  # a plain query: the node asked puts the nodes' rows one after the other
                return whole.columns, sorted(row for p in parts for row in p.run().rows)
            return _merged(prepared, [p.scan_rows() for p in parts])

        single = (whole.columns, sorted(whole.rows) if "ORDER BY" not in sql else whole.rows)
        assert merged(asked) == single and whole.rows
        assert merged(None) != single  # (each node at its own clock: the gap this closes)
    finally:
        engine.close()
