"""Hostile SQL and out-of-range values at the engine (issue 13, items 2, 3 and 10).

The rule: an answered error means nothing was written (the catalog and every WAL are as before, and the data dir
opens again), an answered success means everything was; no statement reaches Python's recursion limit or the C
stack, and no topic's expression can make a later write fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue, LimitExceeded, LineProtocolError, StorageError
from walgate.storage.render import json_objects

ROOT = Path(__file__).absolute().parents[2]


def rows(engine: Engine, sql: str) -> list[list[Any]]:
    return engine.execute(sql).rows


def state(engine: Engine) -> tuple[Any, ...]:
    return (rows(engine, "SHOW DATABASES"), rows(engine, "SHOW x.STABLES"), rows(engine, "SHOW TOPICS"),
            rows(engine, "SELECT * FROM x.m"))


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE x VGROUPS 2")
    e.execute("CREATE STABLE x.m (ts TIMESTAMP, v INT, s VARCHAR(16), i TINYINT) TAGS (t INT, loc VARCHAR(16))")
    e.execute("INSERT INTO x.a USING x.m TAGS (1, 'sf') VALUES (1700000000000, 1, '5', 100) (1700000000001, -2, 'abc', 7)")
    return e


# ------------------------------------------------------------------ item 2

_SCENARIO = r"""
import json, sys, tempfile, threading
from pathlib import Path
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError

def outcome(engine, sql):
    try:
        result = engine.execute(sql)
    except StorageError as exc:
        return {"error": type(exc).__name__, "message": exc.message[:200]}
    return {"rows": len(result.rows)}

def run():
    data = Path(tempfile.mkdtemp())
    engine = Engine.open(data)
    engine.execute("CREATE DATABASE x")
    engine.execute("CREATE STABLE x.m (ts TIMESTAMP, v INT) TAGS (t INT)")
    engine.execute("INSERT INTO x.a USING x.m TAGS (1) VALUES (1700000000000, 1)")
    conditions = {
        "not490": "NOT " * 490 + "v > 0",
        "not5000": "NOT " * 5000 + "v > 0",
        "and10000": " AND ".join(["v > 0"] * 10_000),
        "or1mb": " OR ".join(["v > 0"] * 125_000),  # 1.1 MB
    }
    out = {}
    for name, condition in conditions.items():
        out[name] = (outcome(engine, f"CREATE TOPIC {name} AS SELECT ts, v FROM x.m WHERE {condition}"),
                     outcome(engine, f"SELECT ts, v FROM x.m WHERE {condition}"))
    out["insert"] = outcome(engine, "INSERT INTO x.a VALUES (1700000000001, 2)")
    out["topics"] = [r[0] for r in engine.execute("SHOW TOPICS").rows]
    engine.close()
    engine = Engine.open(data)
    out["reopened"] = [r[0] for r in engine.execute("SHOW TOPICS").rows]
    out["select"] = outcome(engine, "SELECT * FROM x.m")
    print(json.dumps(out))

threading.stack_size(128 * 1024)  # the 490-deep statement crashed the old code at this size (SIGSEGV, exit 139)
thread = threading.Thread(target=run)
thread.start()
thread.join()
"""


def test_deep_wide_and_huge_statements_answer_clear_errors_or_work() -> None:
    """Issue 13, item 2: a 490-deep NOT chain segfaulted CPython, deeper ones and long AND chains answered 500
    RecursionError, and the topic was in the catalog already (every restart crashed again). Run in a subprocess so
    that a crash is this test's failure, not pytest's."""
    done = subprocess.run([sys.executable, "-c", _SCENARIO], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    for name in ("not490", "not5000"):
        for answer in out[name]:
            assert answer["error"] == "LimitExceeded" and "nested" in answer["message"] and "limit is 64" in answer["message"]
    assert out["and10000"] == [{"rows": 1}, {"rows": 1}]  # a chain is folded: 14 levels deep, not 10,000
    for answer in out["or1mb"]:
        assert answer["error"] == "LimitExceeded" and "characters: the limit is 1048576" in answer["message"]
    assert out["insert"] == {"rows": 1}
    assert out["topics"] == out["reopened"] == ["and10000"]
    assert out["select"] == {"rows": 2}


def test_many_tokens_are_refused_before_parsing(engine: Engine) -> None:
    before = state(engine)
    with pytest.raises(LimitExceeded, match="more than 65536 tokens"):
        engine.execute("SELECT * FROM x.m WHERE v IN (" + ",".join(["1"] * 70_000) + ")")
    assert state(engine) == before


# ------------------------------------------------------------------ item 3


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("CREATE TOPIC tz AS SELECT ts, v FROM x.m WHERE v", "condition must be boolean, got int32"),
        ("CREATE TOPIC tz AS SELECT ts, v FROM x.m WHERE s", "condition must be boolean, got string"),
        ("CREATE TOPIC tz AS SELECT ts, v + 'abc' FROM x.m", "does not fit|cannot evaluate"),
        ("CREATE TOPIC tz AS SELECT ts, sqrt(s) FROM x.m", "expected a number, got string"),
        ("CREATE TOPIC tz AS SELECT ts, s / 2 FROM x.m", "expected a number, got string"),
        ("CREATE TOPIC tz AS SELECT ts, v FROM x.m WHERE ts > 'yesterday'", "invalid value for TIMESTAMP"),
        ("CREATE TOPIC tz AS STABLE x.m WHERE t", "condition must be boolean, got int32"),
    ],
)
def test_create_topic_that_does_not_typecheck_is_refused_and_not_kept(engine: Engine, tmp_path: Path, sql: str,
                                                                       message: str) -> None:
    """Issue 13, item 3: `WHERE v` answered 400 but the topic was kept; every later INSERT then failed while writing
    the row (clients retried: duplicates) and the next start failed."""
    before = state(engine)
    with pytest.raises(StorageError, match=message):
        engine.execute(sql)
    assert state(engine) == before
    assert engine.execute("INSERT INTO x.a VALUES (1700000000002, 3, 'x', 1)").affected_rows == 1
    engine.close()
    assert rows(Engine.open(tmp_path), "SHOW TOPICS") == []


def test_a_topic_never_fails_a_write_on_its_values(engine: Engine) -> None:
    """Expressions that fail on some values (not on types) give NULL for those rows: the write stands, the topic
    skips (WHERE) or nulls (select list) exactly those rows, and re-reading yields the same records."""
    engine.execute("CREATE TOPIC casts AS SELECT ts, CAST(s AS INT) AS n, ROUND(i, -1) AS r, "
                   "CAST(v * 1000000000000 AS TIMESTAMP) AS far FROM x.m WHERE CAST(s AS INT) >= 0")
    inserted = engine.execute("INSERT INTO x.a VALUES (1700000000002, 3, '99999999999', 120) "
                              "(1700000000003, 4, '7', 125) (1700000000004, 300000, '8', -100)")
    assert inserted.affected_rows == 3
    assert [json.loads(v) for p in range(2) for v in _topic_values(engine, "casts", p)] == [
        {"ts": "2023-11-14T22:13:20.000Z", "n": 5, "r": 100, "far": "2001-09-09T01:46:40.000Z"},
        # 'abc' and 99999999999 are no INT: NULL, filtered out; ROUND(125, -1) overflows a TINYINT: NULL
        {"ts": "2023-11-14T22:13:20.003Z", "n": 7, "r": None, "far": "2096-10-02T07:06:40.000Z"},
        {"ts": "2023-11-14T22:13:20.004Z", "n": 8, "r": -100, "far": None},  # year 9508 million: NULL
    ]


def _topic_values(engine: Engine, topic: str, partition: int) -> list[bytes]:
    lo, hi = engine.watermarks(topic, partition)
    out: list[bytes] = []
    for _base, version, _count in engine.index_entries(topic, partition, lo):
        out += engine.kafka_rows(topic, partition, version).values
    return out


def test_create_topic_is_undone_when_opening_it_fails(engine: Engine, tmp_path: Path) -> None:
    """The catalog write succeeded but opening the topic's offset index on the second vnode failed (a file stands
    where its directory goes, as a real file-system error would): the error is answered and nothing is kept."""
    blocker = engine.vnodes["x"][1].dir / "topics"
    blocker.write_bytes(b"")
    before = state(engine)
    with pytest.raises(OSError):
        engine.execute("CREATE TOPIC tp AS SELECT ts, v FROM x.m")
    assert state(engine) == before
    assert not any((engine.vnodes["x"][0].dir / "topics").iterdir())  # the first vnode's index went too
    engine.close()
    blocker.unlink()
    engine = Engine.open(tmp_path)
    assert state(engine) == before
    engine.execute("CREATE TOPIC tp AS SELECT ts, v FROM x.m")  # and it can be created once the disk is sound
    assert [r[0] for r in rows(engine, "SHOW TOPICS")] == ["tp"]


@pytest.mark.parametrize("source", ["`My m`", "m"])
def test_stored_topic_sql_is_qualified_exactly(tmp_path: Path, source: str) -> None:
    """The stored SQL names its database so it does not depend on USE. It was rewritten with a regex: a back-quoted
    source lost its quotes (the data dir then failed to start) and a string that looked like `from m` was
    rewritten instead of the real FROM."""
    engine = Engine.open(tmp_path)
    engine.execute("CREATE DATABASE x")
    engine.execute(f"CREATE STABLE x.{source} (ts TIMESTAMP, v INT) TAGS (t INT)")
    engine.execute(f"INSERT INTO x.a USING x.{source} TAGS (1) VALUES (1700000000000, 1)")
    name = source.strip("`")
    engine.execute(f"CREATE TOPIC q AS SELECT ts, 'from {name} too' AS s FROM {source}", "x")
    stored = rows(engine, "SHOW TOPICS")[0][3]
    assert stored.endswith(f"FROM x.{source}" if source == "m" else f"FROM `x`.{source}")
    engine.close()
    engine = Engine.open(tmp_path)
    assert [json.loads(v) for p in range(2) for v in _topic_values(engine, "q", p)] == [
        {"ts": "2023-11-14T22:13:20.000Z", "s": f"from {name} too"}
    ]


# ------------------------------------------------------------------ item 10


def test_timestamps_outside_years_1_to_9999_are_refused_on_every_path(engine: Engine) -> None:
    """Issue 13, item 10: year 10000 was accepted, then SELECT answered 500 forever and topics served
    '<value out of range>'."""
    engine.execute("CREATE TOPIC all_rows AS SELECT * FROM x.m")
    before = state(engine)
    for sql in [
        "INSERT INTO x.a VALUES (253402300800000, 1, 'x', 1)",
        "INSERT INTO x.a VALUES ('9999-12-31T23:59:59-00:01', 1, 'x', 1)",
        "INSERT INTO x.a VALUES (now + 10000000d, 1, 'x', 1)",
        "INSERT INTO x.a VALUES (-62135596800001, 1, 'x', 1)",
        "INSERT INTO x.a VALUES (1700000000000, 1, 'x', 300)",
        "INSERT INTO x.b USING x.m TAGS (2147483648, 'la') VALUES (1700000000000, 1, 'x', 1)",
    ]:
        with pytest.raises(InvalidValue, match="out of range"):
            engine.execute(sql)
    with pytest.raises(InvalidValue, match="CSV line 3, column ts: .*out of range"):
        engine.write_csv("x", b"ts,v\n1700000000000,1\n253402300800000,2\n", table="a")
    with pytest.raises(InvalidValue, match=r"record 1 \(b\), ts: .*out of range"):
        engine.write_json_rows("x", "m", [("a", {"v": 1}, 1700000000000), ("b", {"v": 2}, 253402300800000)])
    with pytest.raises(InvalidValue, match=r"record 0 \(a\), ts: .*out of range"):
        engine.write_json_rows("x", "m", [("a", {"ts": "0001-01-01T00:00:00+00:01"}, 0)])
    with pytest.raises(InvalidValue, match="record 0: the subtable name must be a string, not int"):
        engine.write_json_rows("x", "m", [(7, {"v": 1}, 1700000000000)])  # type: ignore[list-item]
    for precision, ts in [("s", "9300000000"), ("ms", "9300000000000"), ("us", "-9300000000000000"), ("ns", "9" * 19)]:
        with pytest.raises(LineProtocolError, match="out of the int64 nanosecond range"):
            engine.write_lines("x", f"m,t=1 v=1i32 {ts}".encode(), precision)
    assert state(engine) == before


def test_timestamps_written_before_the_rule_still_render(engine: Engine) -> None:
    """A data dir written by an older release may hold year-10000 timestamps: SELECT and topics show them."""
    table = pa.table({"ts": pa.array([253402300800000, None], pa.timestamp("ms")),
                      "u": pa.array([2**62, 0], pa.timestamp("us"))})
    assert json_objects(table) == [b'{"ts":"10000-01-01T00:00:00.000Z","u":"148108-07-06T14:00:27.387904Z"}',
                                   b'{"ts":null,"u":"1970-01-01T00:00:00.000000Z"}']


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"lp,t=1 tbname=1i32 1700000000000", "tbname is a reserved column name"),
        (b"lp,tbname=d1 v=1i32 1700000000000", "tbname is a reserved column name"),
        (b"lp,t=1 _ts=1i32 1700000000000", "field _ts is INT but the column is TIMESTAMP"),
        (b"lp,_ts=1 v=1i32 1700000000000", "Duplicated column names: _ts"),
        (b"m,v=1 f=1.5 1700000000000", "Duplicated column names: v"),  # a tag named like a column of x.m
        (b"lp2,g=1 f=1.5 1700000000000\nlp2,h=2 g=2.5 1700000000001", "Duplicated column names: g"),  # tag, field
    ],
)
def test_schemaless_names_that_collide_are_refused_before_anything_is_written(engine: Engine, body: bytes,
                                                                               message: str) -> None:
    """Found by fuzzing line protocol: such a key made a supertable with two columns of one name (or one named
    tbname); the schema was committed, then writing the rows failed, and every later write to it failed too."""
    before = state(engine)
    with pytest.raises(InvalidValue, match=message):
        engine.write_lines("x", body, "ms")
    assert state(engine) == before
    assert engine.write_lines("x", b"lp,t=1 v=1i32 1700000000000", "ms") == 1


def test_line_protocol_refused_for_a_bad_name_commits_no_schema_change(engine: Engine) -> None:
    """Found by fuzzing: a body whose first line created or widened a supertable and whose second named a
    supertable or column the naming rules refuse committed the first change, then answered the error."""
    before = state(engine)
    for body in (b"lp3 f=1 1700000000000\na.b f=1 1700000000000",
                 b"m,loc=sf newfield=1.5 1700000000000\nlp4 bad\x01key=1 1700000000000"):
        with pytest.raises(InvalidValue, match="Invalid (table|column) name"):
            engine.write_lines("x", body, "ms")
        assert state(engine) == before


def test_json_rows_refuse_bad_subtable_names_before_writing(engine: Engine) -> None:
    before = state(engine)
    for name, message in [("", "record 1 \\(\\): Invalid table name"), ("a.b", "Invalid table name 'a.b'"),
                          ("\ud800", "record 1: the subtable name '\\\\ud800' is not valid Unicode text")]:
        with pytest.raises(InvalidValue, match=message):
            engine.write_json_rows("x", "m", [("a", {"v": 1}, 1700000000005), (name, {"v": 2}, 1700000000006)])
    with pytest.raises(InvalidValue, match="record 0 \\(a\\): the value must be a JSON object, not list"):
        engine.write_json_rows("x", "m", [("a", [1], 1700000000005)])  # type: ignore[list-item]
    assert state(engine) == before


def test_alter_stable_that_would_break_a_topic_is_refused_before_it_is_written(tmp_path: Path) -> None:
    """Issue 13, item 3: ALTER STABLE recompiled the topics after writing the change; one that broke a topic
    answered an error with the change kept, and the next start failed compiling the topic."""
    engine = Engine.open(tmp_path)
    engine.execute("CREATE DATABASE x")
    engine.execute("CREATE STABLE x.m (ts TIMESTAMP, v INT, w INT) TAGS (t INT, g INT)")
    engine.execute("CREATE TOPIC tv AS SELECT ts, v FROM x.m WHERE t > 0")
    before = engine.execute("DESCRIBE x.m").rows
    for action in ("DROP COLUMN v", "DROP TAG t"):
        with pytest.raises(InvalidValue, match="topic tv depends on it"):
            engine.execute(f"ALTER STABLE x.m {action}")
        assert engine.execute("DESCRIBE x.m").rows == before
    engine.execute("ALTER STABLE x.m DROP COLUMN w")  # one no topic reads goes
    engine.execute("ALTER STABLE x.m DROP TAG g")
    engine.close()
    assert [r[0] for r in Engine.open(tmp_path).execute("SHOW TOPICS").rows] == ["tv"]
