"""Fuzzing the SQL surface: generated statements and mutated valid ones, fed to ``Engine.execute`` (see fuzzing.py).

Generated statements follow the grammar loosely: deep and wide expressions (NOT chains, parentheses, signs, long
AND / OR chains, nested calls and CASTs), odd identifiers (back-quoted with ``/``, ``..``, NUL, unicode, very long),
huge and odd literals (numbers past every type's range, timestamps past year 9999, ``now`` with huge offsets,
strings with escapes and quotes), and every statement kind (DDL, INSERT, topics, queries).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fuzzing import Attack, fuzz_settings, mutated, seeded_engine
from hypothesis import given
from hypothesis import strategies as st

COLUMNS = ["ts", "v", "f", "s", "b", "n", "u", "ti", "fl", "t", "loc", "tbname", "V", "`v`", "nosuch", "`odd/../x`",
           "`a\x00b`", "`ü`", "`" + "c" * 300 + "`", "value", "`select`"]
FUNCTIONS = ["abs", "ceil", "floor", "round", "sqrt", "pow", "log", "ln", "log10", "sin", "acos", "lower", "upper",
             "length", "char_length", "ltrim", "rtrim", "concat", "concat_ws", "substr", "count", "now", "nosuch",
             "LOWER", "`abs`", "avg", "sum", "min", "max", "first", "last", "last_row", "spread", "stddev", "today",
             "percentile"]
TYPES = ["INT", "INTEGER", "BIGINT UNSIGNED", "TINYINT", "SMALLINT UNSIGNED", "DOUBLE", "FLOAT", "BOOL", "TIMESTAMP",
         "VARCHAR(4)", "NCHAR(2)", "BINARY(1)", "BINARY(99999)", "JSON", "STRING", "INT(3)", "VARCHAR", "DOUBLE UNSIGNED"]
OPERATORS = ["+", "-", "*", "/", "%", "=", "==", "!=", "<>", "<", "<=", ">", ">=", "AND", "OR", "and", "Or"]
NAMES = ["t1", "t2", "t-3", "`bad/name`", "`..`", "`a\x00b`", "ü", "`ü`", "x" * 300, "`" + "y" * 250 + "`", "seeded",
         "select", "`t 1`", "T1"]
NODE_IDS = st.sampled_from(["0", "1", "3", "1023", "65536", "99999999999999999999999", "-1", "x"])
DATABASES = ["z1", "z2", "Z1", "`../../etc`", "`/abs`", "`a b`", "`z\x00`", "x" * 70, "_z", "1z", "`x`"]
SOURCES = ["x.m", "m", "x.nt", "x.a", "x.b", "y.m", "y.d", "x.nosuch", "`x`.`m`", "nosuch.m", "z1.s1", "x.`m`",
           "`x.m`", "x.`a\x00`"]
TIMESTAMPS = ["1700000000000", "253402300799999", "253402300800000", "-62135596800000", "-62135596800001",
              "9223372036854775807", "9223372036854775808", "-9223372036854775809", "99999999999999999999999",
              "'2024-01-01 00:00:00'", "'9999-12-31T23:59:59.999Z'", "'10000-01-01 00:00:00'", "'0000-01-01T00:00:00Z'",
              "'2024-02-30 00:00:00'", "'2024-01-01T00:00:00+25:00'", "'1700000000000'", "now", "now()",
              "now + 1000000d", "now - 100000000w", "now + 99999999999999999999d", "now() - 1h + 5s", "NOW+1b"]


def _string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


literals = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["0", "-0", "127", "128", "-129", "255", "65536", "2147483648", "18446744073709551616",
                     "1" + "0" * 400, "1e308", "1e309", "-1e309", ".5", "5.", "1e", "0x10", "3.4e38", "3.5e38"]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(max_size=12).map(_string),
    st.sampled_from(["TRUE", "false", "NULL", "'\\'", "'\\n\\0\\%'", '"dq""x"', "''", "'{\"a\":1}'", "'[1]'"]),
    st.sampled_from(TIMESTAMPS),
    st.sampled_from(["1s", "1h", "0a", "99999999999999w", "_wstart", "_wend", "_wduration", "now - 1h"]),
)


def _extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    pairs = st.tuples(children, st.sampled_from(OPERATORS), children)
    return st.one_of(
        pairs.map(lambda p: f"{p[0]} {p[1]} {p[2]}"),
        st.tuples(st.sampled_from(["NOT ", "-", "+", "- ", "(", "NOT NOT "]), children).map(
            lambda p: f"{p[0]}{p[1]})" if p[0] == "(" else p[0] + p[1]
        ),
        st.tuples(st.sampled_from(FUNCTIONS), st.lists(children, max_size=4)).map(lambda p: f"{p[0]}({', '.join(p[1])})"),
        st.tuples(children, st.sampled_from(TYPES)).map(lambda p: f"CAST({p[0]} AS {p[1]})"),
        st.tuples(children, st.booleans(), st.lists(st.one_of(literals, children), min_size=1, max_size=5)).map(
            lambda p: f"{p[0]} {'NOT ' if p[1] else ''}IN ({', '.join(p[2])})"
        ),
        st.tuples(children, st.booleans(), children, children).map(
            lambda p: f"{p[0]} {'NOT ' if p[1] else ''}BETWEEN {p[2]} AND {p[3]}"
        ),
        st.tuples(children, st.booleans(), st.sampled_from(["'%'", "'s_'", "'\\%'", "'['", "'(?'", "'\\'"])).map(
            lambda p: f"{p[0]} {'NOT ' if p[1] else ''}LIKE {p[2]}"
        ),
        st.tuples(children, st.booleans()).map(lambda p: f"{p[0]} IS {'NOT ' if p[1] else ''}NULL"),
        # deep and wide: chains far past the limits, and just under them
        st.tuples(st.sampled_from(["NOT ", "(", "- ", "abs(", "CAST("]), st.integers(1, 150), children).map(_deep),
        st.tuples(children, st.sampled_from([" AND ", " OR "]), st.integers(2, 400)).map(lambda p: p[1].join([p[0]] * p[2])),
    )


def _deep(p: tuple[str, int, str]) -> str:
    opening, n, inner = p
    closing = {"(": ")", "abs(": ")", "CAST(": " AS INT)"}.get(opening, "")
    return opening * n + inner + closing * n


expressions = st.recursive(st.one_of(st.sampled_from(COLUMNS), literals), _extend, max_leaves=12)
items = st.one_of(
    st.just("*"),
    st.lists(st.tuples(expressions, st.one_of(st.none(), st.sampled_from(NAMES))), min_size=1, max_size=4).map(
        lambda xs: ", ".join(e if a is None else f"{e} AS {a}" for e, a in xs)
    ),
)
where = st.one_of(st.just(""), expressions.map(lambda e: f" WHERE {e}"))
column_defs = st.lists(
    st.tuples(st.sampled_from(COLUMNS[:12] + ["c1", "c2", "`c/3`", "tbname", "`c\x00`"]), st.sampled_from(TYPES)),
    min_size=1, max_size=5,
).map(lambda cs: "(" + ", ".join(f"{n} {t}" for n, t in cs) + ")")
rows = st.lists(st.lists(st.one_of(literals, st.sampled_from(TIMESTAMPS)), min_size=1, max_size=5), min_size=1,
                max_size=4).map(lambda rs: " ".join("(" + ", ".join(r) + ")" for r in rs))


DURATIONS = ["1a", "10s", "1m", "1h", "1d", "1w", "1b", "1u", "0s", "99999999999999w", "3s"]
keys = st.lists(expressions, min_size=1, max_size=3).map(", ".join)
interval = st.tuples(
    st.sampled_from(DURATIONS), st.one_of(st.none(), st.sampled_from(DURATIONS)),
    st.one_of(st.none(), st.sampled_from(DURATIONS)),
    st.sampled_from(["", " FILL(NONE)", " FILL(NULL)", " FILL(PREV)", " FILL(NEXT)", " FILL(LINEAR)", " FILL(VALUE, 1)",
                     " FILL(VALUE, 1.5, -2, 'x', NULL)"]),
).map(lambda p: f" INTERVAL({p[0]}{f', {p[1]}' if p[1] else ''})" + (f" SLIDING({p[2]})" if p[2] else "") + p[3])
clauses = st.tuples(
    st.one_of(st.just(""), keys.map(lambda k: f" PARTITION BY {k}")),
    st.one_of(st.just(""), interval),
    st.one_of(st.just(""), keys.map(lambda k: f" GROUP BY {k}")),
    st.one_of(st.just(""), expressions.map(lambda e: f" HAVING {e}")),
    st.one_of(st.just(""), st.lists(st.tuples(expressions, st.sampled_from(["", " ASC", " DESC"])), min_size=1,
                                    max_size=3).map(lambda os: " ORDER BY " + ", ".join(e + d for e, d in os))),
).map("".join)


def _statement(kind: str, draw: Any) -> str:
    if kind == "select":
        limit = draw(st.one_of(st.just(""), st.integers(0, 2**70).map(lambda n: f" LIMIT {n}"),
                               st.tuples(st.integers(0, 5), st.integers(0, 2**64)).map(lambda p: f" LIMIT {p[0]} OFFSET {p[1]}"),
                               st.tuples(st.integers(0, 5), st.integers(0, 5)).map(lambda p: f" LIMIT {p[0]}, {p[1]}")))
        more = draw(st.one_of(st.just(""), clauses))
        return f"SELECT {draw(items)} FROM {draw(st.sampled_from(SOURCES))}{draw(where)}{more}{limit}"
    if kind == "topic_select":
        return (f"CREATE TOPIC {draw(st.sampled_from(['', 'IF NOT EXISTS ']))}{draw(st.sampled_from(NAMES))} AS "
                f"SELECT {draw(items)} FROM {draw(st.sampled_from(SOURCES))}{draw(where)}")
    if kind == "topic_other":
        return draw(st.sampled_from([
            f"CREATE TOPIC {draw(st.sampled_from(NAMES))} AS STABLE {draw(st.sampled_from(SOURCES))}{draw(where)}",
            f"CREATE TOPIC {draw(st.sampled_from(NAMES))} WITH META AS DATABASE {draw(st.sampled_from(DATABASES))}",
            f"DROP TOPIC {draw(st.sampled_from(['', 'IF EXISTS ']))}{draw(st.sampled_from(NAMES))}",
            f"DROP CONSUMER GROUP {draw(st.sampled_from(['g', '`g/..`', _string('g-1')]))} ON {draw(st.sampled_from(NAMES))}",
            f"REDISTRIBUTE VGROUP {draw(st.sampled_from(['', 'x.', 'nosuch.', '`../..`.']))}{draw(NODE_IDS)}"
            f"{''.join(f' DNODE {n}' for n in draw(st.lists(NODE_IDS, min_size=1, max_size=4)))}",
            f"BALANCE VGROUP{draw(st.sampled_from(['', ' LEADER', ' leader']))}",
            f"DROP DNODE {draw(NODE_IDS)}",
        ]))
    if kind == "insert":
        using = ""
        if draw(st.booleans()):
            using = f" USING {draw(st.sampled_from(SOURCES))} TAGS ({', '.join(draw(st.lists(literals, min_size=1, max_size=3)))})"
        columns = draw(st.one_of(st.just(""), st.lists(st.sampled_from(COLUMNS), min_size=1, max_size=4).map(
            lambda cs: f" ({', '.join(cs)})")))
        table = draw(st.sampled_from(["x.a", "x.b", "x.nt", "x.new1", "x.`odd/..`", "x.`n\x00`", "y.d", "x.m", "a",
                                      "z1.t", "x.`" + "t" * 200 + "`"]))
        return f"INSERT INTO {table}{using}{columns} VALUES {draw(rows)}"
    if kind == "database":
        option = draw(st.sampled_from(["", " VGROUPS 1", " VGROUPS 3", " VGROUPS 0", " VGROUPS 1025", " VGROUPS 99999999999999999999",
                                       " PRECISION 'ns'", " PRECISION 'us'", " PRECISION 's'", " PRECISION 5",
                                       " WAL_LEVEL 2", " WAL_LEVEL 3", " KEEP 10", " VGROUPS 1 VGROUPS 2"]))
        return draw(st.sampled_from([
            f"CREATE DATABASE {draw(st.sampled_from(['', 'IF NOT EXISTS ']))}{draw(st.sampled_from(DATABASES))}{option}",
            f"DROP DATABASE {draw(st.sampled_from(['', 'IF EXISTS ']))}{draw(st.sampled_from(['z1', 'z2', '`../../etc`', '`/abs`', 'nosuch']))}",
            f"USE {draw(st.sampled_from(DATABASES))}",
            f"SHOW {draw(st.sampled_from(DATABASES + ['x', 'y']))}.{draw(st.sampled_from(['STABLES', 'TABLES']))}",
            draw(st.sampled_from(["SHOW DATABASES", "SHOW TOPICS", "SHOW CONSUMERS", "SHOW SUBSCRIPTIONS", "SHOW TABLES",
                                        "SHOW QUARANTINE"])),
        ]))
    table = draw(st.sampled_from(["z1.s1", "x.s2", "x.`s/3`", "x.`s\x00`", "x.alt", "y.s4", "x.nt", "x.m", "s5"]))
    return draw(st.sampled_from([
        f"CREATE STABLE {draw(st.sampled_from(['', 'IF NOT EXISTS ']))}{table} {draw(column_defs)} TAGS {draw(column_defs)}",
        f"CREATE TABLE {table} {draw(column_defs)}",
        f"CREATE TABLE {draw(st.sampled_from(['x.sub1', 'x.`sub/2`', 'y.sub3']))} USING {table} TAGS ({', '.join(draw(st.lists(literals, min_size=1, max_size=3)))})",
        # columns of x.alt and of tables no topic reads may be dropped; x.m only grows (a topic depends on it)
        f"ALTER STABLE {draw(st.sampled_from(['x.alt', 'z1.s1', 'x.s2']))} {draw(st.sampled_from(['DROP COLUMN', 'DROP TAG']))} "
        f"{draw(st.sampled_from(COLUMNS[:12] + ['g', 'c1']))}",
        f"ALTER STABLE {draw(st.sampled_from(['x.alt', 'x.m', 'z1.s1']))} {draw(st.sampled_from(['ADD COLUMN', 'ADD TAG', 'MODIFY COLUMN', 'MODIFY TAG']))} "
        f"{draw(st.sampled_from(COLUMNS[:12] + ['c9', '`c 9`']))} {draw(st.sampled_from(TYPES))}",
        f"DROP TABLE {draw(st.sampled_from(['', 'IF EXISTS ']))}{draw(st.sampled_from(['x.b', 'x.sub1', 'x.s2', 'x.nosuch', 'x.nt']))}",
        f"DROP STABLE {draw(st.sampled_from(['z1.s1', 'x.s2', 'x.m', 'x.nosuch']))}",
        f"DESCRIBE {table}",
    ]))


@st.composite
def statements(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["select", "select", "topic_select", "topic_other", "insert", "insert", "database", "table"]))
    sql = _statement(kind, draw)
    return sql + draw(st.sampled_from(["", ";", " ;", " -- comment", ";;", "\n"]))


_VALUE_OR_NAME = re.compile(r"'[^']*'|`[^`]*`|\b(?![A-Z_]+\b)[\w.]+")  # not a keyword: corpus keywords are upper-case
CORPUS = [
    "SELECT ts, v, s FROM x.m WHERE v > 0 AND s LIKE 'a%' LIMIT 10",
    "SELECT *, tbname FROM x.m WHERE t IN (1, 2, NULL) OR loc IS NOT NULL",
    "SELECT abs(v) + round(f, 2) AS r, CAST(s AS BIGINT) FROM x.m WHERE NOT (v BETWEEN -1 AND 10)",
    "SELECT ts FROM x.nt WHERE ts > '2023-01-01T00:00:00Z' AND ts < now",
    "SELECT count(*), avg(v), sum(f), min(ti), max(fl), first(s), last(u), spread(v) FROM x.m WHERE ts >= now - 1h",
    "SELECT _wstart, _wend, tbname, loc, count(v) FROM x.m WHERE ts BETWEEN 1699999990000 AND 1700000010000 "
    "PARTITION BY tbname INTERVAL(10s, 1s) SLIDING(5s) FILL(LINEAR) ORDER BY _wstart DESC LIMIT 2 OFFSET 1",
    "SELECT loc, max(v) AS m FROM x.m GROUP BY loc HAVING max(v) > 0 ORDER BY m DESC LIMIT 1, 2",
    "SELECT _wstart, sum(v) FROM x.m WHERE ts >= '2023-11-10' INTERVAL(1d) FILL(VALUE, 0)",
    "SELECT ts, v * 2 FROM x.nt ORDER BY ts DESC",
    "CREATE TOPIC t1 AS SELECT ts, v, concat(s, loc) FROM x.m WHERE v % 2 = 0",
    "CREATE TOPIC IF NOT EXISTS t2 AS STABLE x.m WHERE t = 1 AND loc = 'sf'",
    "CREATE TOPIC t3 WITH META AS DATABASE x",
    "DROP TOPIC IF EXISTS t1",
    "INSERT INTO x.a VALUES (1700000000005, 5, 2.5, 'q', true, 'n', 5, 5, 5.5)",
    "INSERT INTO x.e USING x.m (t, loc) TAGS (5, 'la') (ts, v) VALUES (now, 1) (now + 1s, 2) x.nt VALUES (now, 3, 'z')",
    "INSERT INTO y.d VALUES ('2262-04-11T23:47:16.854775807Z', 9223372036854775807, '漢字')",
    "CREATE DATABASE IF NOT EXISTS z1 VGROUPS 1 PRECISION 'us' WAL_LEVEL 2",
    "CREATE STABLE IF NOT EXISTS z1.s1 (ts TIMESTAMP, a INT, b VARCHAR(8)) TAGS (g NCHAR(4))",
    "ALTER STABLE x.alt ADD COLUMN c1 DOUBLE",
    "ALTER STABLE x.alt DROP TAG g",
    "CREATE TABLE x.sub1 USING x.alt TAGS (1, 'q')",
    "DROP TABLE IF EXISTS x.sub1, x.b",
    "DESCRIBE x.m",
    "SHOW x.STABLES",
    "SHOW TOPICS",
]


def test_generated_statements(tmp_path: Path, caplog: Any) -> None:
    attack = Attack("sql generated", seeded_engine(tmp_path), caplog)

    @fuzz_settings(1500)
    @given(sql=statements())
    def run(sql: str) -> None:
        attack.feed(lambda engine: engine.execute(sql, "x"))

    run()
    attack.reopen(tmp_path)


def test_mutated_statements(tmp_path: Path, caplog: Any) -> None:
    attack = Attack("sql mutated", seeded_engine(tmp_path), caplog)

    @fuzz_settings(1500)
    @given(sql=mutated(CORPUS, _VALUE_OR_NAME, TIMESTAMPS + COLUMNS + NAMES + DATABASES + SOURCES + TYPES + FUNCTIONS + [
        "0", "-1", "300", "1e309", "18446744073709551616", "NULL", "TRUE", "''", "'\\'", "'%'", "1s", "99999999999w"]))
    def run(sql: str) -> None:
        attack.feed(lambda engine: engine.execute(sql, "x"))

    run()
    attack.reopen(tmp_path)
