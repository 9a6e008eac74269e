"""The SQL subset parser: every statement form, expressions, values and error messages."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.storage.errors import InvalidValue, LimitExceeded, SqlSyntaxError, StorageError, Unsupported
from walgate.storage.schema import Column, ColumnType
from walgate.storage.sql import ast
from walgate.storage.sql.ast import (
    AlterStable,
    Between,
    Binary,
    Call,
    Cast,
    Col,
    ColumnTypeRef,
    CreateDatabase,
    CreateStable,
    CreateSubtable,
    CreateTable,
    CreateTopic,
    Describe,
    DropDatabase,
    DropStable,
    DropTable,
    DropTopic,
    InList,
    Insert,
    InsertTarget,
    IsNull,
    Like,
    Lit,
    Name,
    Now,
    Select,
    SelectItem,
    Show,
    Unary,
    UseDatabase,
    Using,
)
from walgate.storage.sql.parser import MAX_EXPR_DEPTH, MAX_STATEMENT_CHARS, MAX_STATEMENT_TOKENS, parse

TS = Column("ts", ColumnType("TIMESTAMP"))


def col(name: str, type_: str, length: int | None = None) -> Column:
    return Column(name, ColumnType(type_, length))


def where(condition: str) -> ast.Expr:
    """The parsed WHERE clause of a SELECT over ``condition``."""
    statement = parse(f"SELECT * FROM t WHERE {condition}")
    assert isinstance(statement, Select) and statement.where is not None
    return statement.where


def values(row_text: str) -> tuple[ast.Value, ...]:
    statement = parse(f"INSERT INTO d1 VALUES {row_text}")
    assert isinstance(statement, Insert)
    (row,) = statement.targets[0].rows
    return row


# ------------------------------------------------------------------ databases


def test_create_database_minimal() -> None:
    assert parse("CREATE DATABASE power") == CreateDatabase("power")


def test_create_database_all_options_any_order_and_case() -> None:
    statement = parse(
        "create database if not exists Power wal_segment_size 64 PRECISION 'US' VGROUPS 4 "
        "wal_level 2 WAL_FSYNC_PERIOD 3000 WAL_RETENTION_PERIOD 3600 WAL_RETENTION_SIZE 1024;"
    )
    assert statement == CreateDatabase(
        "power",
        if_not_exists=True,
        options={
            "WAL_SEGMENT_SIZE": 64,
            "PRECISION": "us",
            "VGROUPS": 4,
            "WAL_LEVEL": 2,
            "WAL_FSYNC_PERIOD": 3000,
            "WAL_RETENTION_PERIOD": 3600,
            "WAL_RETENTION_SIZE": 1024,
        },
    )


def test_create_database_retention_minus_one_means_forever() -> None:
    statement = parse("CREATE DATABASE d WAL_RETENTION_PERIOD -1 WAL_RETENTION_SIZE -1")
    assert statement == CreateDatabase("d", options={"WAL_RETENTION_PERIOD": -1, "WAL_RETENTION_SIZE": -1})


def test_create_database_precision_double_quoted() -> None:
    assert parse('CREATE DATABASE d PRECISION "ns"') == CreateDatabase("d", options={"PRECISION": "ns"})


def test_create_database_replica_and_min_insync() -> None:
    assert parse("CREATE DATABASE d REPLICA 3 min_insync 2") == CreateDatabase(
        "d", options={"REPLICA": 3, "MIN_INSYNC": 2})
    assert parse("create database d replica 1") == CreateDatabase("d", options={"REPLICA": 1})


@pytest.mark.parametrize("option", ["KEEP 10", "DURATION 10", "BUFFER 96", "STRICT 1", "CACHEMODEL 'none'"])
def test_create_database_unsupported_option(option: str) -> None:
    name = option.split()[0]
    with pytest.raises(SqlSyntaxError, match=f"unsupported database option {name} "):
        parse(f"CREATE DATABASE d VGROUPS 2 {option}")


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("VGROUPS 0", "VGROUPS must be between 1 and 1024, got 0"),
        ("VGROUPS 1025", "VGROUPS must be between 1 and 1024"),
        ("WAL_LEVEL 3", "WAL_LEVEL must be between 1 and 2"),
        ("VGROUPS '2'", "VGROUPS expects an integer"),
        ("PRECISION 'xs'", "PRECISION must be 'ms', 'us' or 'ns', got 'xs'"),
        ("PRECISION 3", "PRECISION must be 'ms', 'us' or 'ns', got 3"),
        ("WAL_RETENTION_PERIOD -2", "WAL_RETENTION_PERIOD must be between -1"),
        ("REPLICA 0", "Invalid option replications: 0, only 1, 3 allowed"),  # TDengine 3.x community's words
        ("REPLICA -1", "Invalid option replications: -1, only 1, 3 allowed"),
        ("REPLICA 2", "Invalid option replications: 2, only 1, 3 allowed"),
        ("REPLICA 4", "Invalid option replications: 4, only 1, 3 allowed"),
        ("REPLICA 'three'", "REPLICA expects an integer"),
        ("MIN_INSYNC 0", "MIN_INSYNC must be between 1 and 1024, got 0"),
    ],
)
def test_create_database_bad_option_value(option: str, message: str) -> None:
    with pytest.raises(InvalidValue, match=message):
        parse(f"CREATE DATABASE d {option}")


def test_create_database_duplicate_option() -> None:
    with pytest.raises(SqlSyntaxError, match="VGROUPS given twice"):
        parse("CREATE DATABASE d VGROUPS 2 vgroups 3")


def test_drop_and_use_database() -> None:
    assert parse("DROP DATABASE power") == DropDatabase("power")
    assert parse("drop database if exists Power;") == DropDatabase("power", if_exists=True)
    assert parse("USE power") == UseDatabase("power")
    assert parse("use `Power`") == UseDatabase("Power")


# --------------------------------------------------------------------- tables


def test_create_stable_with_all_types() -> None:
    statement = parse(
        "CREATE STABLE IF NOT EXISTS power.meters (ts TIMESTAMP, b BOOL, i1 TINYINT, i2 SMALLINT, i4 INT, "
        "i5 INTEGER, i8 BIGINT, u1 TINYINT UNSIGNED, u2 SMALLINT UNSIGNED, u4 INT UNSIGNED, "
        "u5 integer unsigned, u8 BIGINT UNSIGNED, f FLOAT, d DOUBLE, v VARCHAR(16), bin BINARY(8), n NCHAR(4), "
        "ts2 timestamp) TAGS (location VARCHAR(24), groupid INT)"
    )
    assert statement == CreateStable(
        Name("meters", "power"),
        (
            TS,
            col("b", "BOOL"),
            col("i1", "TINYINT"),
            col("i2", "SMALLINT"),
            col("i4", "INT"),
            col("i5", "INT"),
            col("i8", "BIGINT"),
            col("u1", "TINYINT UNSIGNED"),
            col("u2", "SMALLINT UNSIGNED"),
            col("u4", "INT UNSIGNED"),
            col("u5", "INT UNSIGNED"),
            col("u8", "BIGINT UNSIGNED"),
            col("f", "FLOAT"),
            col("d", "DOUBLE"),
            col("v", "VARCHAR", 16),
            col("bin", "VARCHAR", 8),
            col("n", "NCHAR", 4),
            col("ts2", "TIMESTAMP"),
        ),
        (col("location", "VARCHAR", 24), col("groupid", "INT")),
        if_not_exists=True,
    )


def test_create_table_with_tags_is_a_stable() -> None:
    statement = parse("create table st (ts timestamp, v float) tags (t int)")
    assert statement == CreateStable(Name("st"), (TS, col("v", "FLOAT")), (col("t", "INT"),))


def test_json_tag() -> None:
    statement = parse("CREATE STABLE st (ts TIMESTAMP, v INT) TAGS (info JSON)")
    assert isinstance(statement, CreateStable)
    assert statement.tags == (col("info", "JSON", 4095),)


def test_json_must_be_the_only_tag() -> None:
    with pytest.raises(SqlSyntaxError, match="JSON tag must be the only tag"):
        parse("CREATE STABLE st (ts TIMESTAMP, v INT) TAGS (info JSON, t INT)")


def test_json_column_is_refused() -> None:
    with pytest.raises(SqlSyntaxError, match="JSON is only allowed as a tag type, not for column 'j'"):
        parse("CREATE STABLE st (ts TIMESTAMP, j JSON) TAGS (t INT)")
    with pytest.raises(SqlSyntaxError, match="JSON is only allowed as a tag type"):
        parse("CREATE TABLE t (ts TIMESTAMP, j JSON)")


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ("v VARCHAR", "VARCHAR needs a length, e.g. VARCHAR\\(64\\)"),
        ("v NCHAR", "NCHAR needs a length"),
        ("v VARCHAR(0)", "VARCHAR length must be between 1 and 65517, got 0"),
        ("v NCHAR(20000)", "NCHAR length must be between 1 and 16382"),
        ("v INT(4)", "type INT takes no length"),
        ("v FLOAT UNSIGNED", "only integer types can be UNSIGNED, not FLOAT"),
        ("v VARCHAR UNSIGNED (4)", "VARCHAR cannot be UNSIGNED"),
        ("v TEXT", "unknown type TEXT"),
        ("v geometry(10)", "unknown type geometry"),
    ],
)
def test_bad_types(definition: str, message: str) -> None:
    with pytest.raises(SqlSyntaxError, match=message):
        parse(f"CREATE TABLE t (ts TIMESTAMP, {definition})")


def test_first_column_must_be_timestamp() -> None:
    with pytest.raises(SqlSyntaxError, match="first column must be a TIMESTAMP, 'v' is INT"):
        parse("CREATE TABLE t (v INT, ts TIMESTAMP)")


def test_duplicate_names_between_columns_and_tags() -> None:
    with pytest.raises(SqlSyntaxError, match="duplicate column or tag name 'v'"):
        parse("CREATE STABLE st (ts TIMESTAMP, V INT) TAGS (v INT)")


def test_create_normal_table() -> None:
    statement = parse("CREATE TABLE IF NOT EXISTS db.t (ts TIMESTAMP, `Value` DOUBLE)")
    assert statement == CreateTable(Name("t", "db"), (TS, col("Value", "DOUBLE")), if_not_exists=True)


def test_create_subtable() -> None:
    assert parse("CREATE TABLE d1001 USING meters TAGS ('California.SanFrancisco', 2)") == CreateSubtable(
        Name("d1001"), Name("meters"), None, ("California.SanFrancisco", 2)
    )
    assert parse("create table if not exists db.d1 using db.st (groupid, location) tags (-3, NULL)") == (
        CreateSubtable(Name("d1", "db"), Name("st", "db"), ("groupid", "location"), (-3, None), if_not_exists=True)
    )


def test_subtable_tag_names_must_match_values() -> None:
    with pytest.raises(InvalidValue, match="2 tag names but 1 tag values"):
        parse("CREATE TABLE d1 USING st (a, b) TAGS (1)")


@pytest.mark.parametrize(
    ("clause", "expected"),
    [
        ("ADD COLUMN c2 BIGINT", AlterStable(Name("st", "db"), "ADD COLUMN", column=col("c2", "BIGINT"))),
        ("DROP COLUMN c2", AlterStable(Name("st", "db"), "DROP COLUMN", column_name="c2")),
        ("add tag t3 nchar(8)", AlterStable(Name("st", "db"), "ADD TAG", column=col("t3", "NCHAR", 8))),
        ("drop tag T3", AlterStable(Name("st", "db"), "DROP TAG", column_name="t3")),
        ("MODIFY COLUMN v VARCHAR(64)", AlterStable(Name("st", "db"), "MODIFY COLUMN", column=col("v", "VARCHAR", 64))),
        ("MODIFY TAG t BINARY(32)", AlterStable(Name("st", "db"), "MODIFY TAG", column=col("t", "VARCHAR", 32))),
        ("ADD TAG info JSON", AlterStable(Name("st", "db"), "ADD TAG", column=col("info", "JSON", 4095))),
    ],
)
def test_alter_stable(clause: str, expected: AlterStable) -> None:
    assert parse(f"ALTER STABLE db.st {clause}") == expected


def test_alter_stable_json_column_refused() -> None:
    with pytest.raises(SqlSyntaxError, match="JSON is only allowed as a tag type"):
        parse("ALTER STABLE st ADD COLUMN j JSON")


def test_drop_table_and_stable() -> None:
    assert parse("DROP TABLE d1") == DropTable((Name("d1"),))
    assert parse("drop table if exists d1, db.d2 ,`D3`") == DropTable(
        (Name("d1"), Name("d2", "db"), Name("D3")), if_exists=True
    )
    assert parse("DROP STABLE db.meters") == DropStable(Name("meters", "db"))
    assert parse("DROP STABLE IF EXISTS meters") == DropStable(Name("meters"), if_exists=True)


# --------------------------------------------------------------------- insert


def test_insert_single_row() -> None:
    statement = parse("INSERT INTO d1001 VALUES (1538548685000, 10.3, 219, 0.31)")
    assert statement == Insert(
        (InsertTarget(Name("d1001"), None, None, ((1538548685000, 10.3, 219, 0.31),)),)
    )


def test_insert_multi_table_with_using_and_columns() -> None:
    statement = parse(
        "insert into db.d1 values (now, 1)(now + 1s, 2) "
        "d2 using db.st (location, groupid) tags ('SF', 2) (ts, current) values ('2024-01-01 00:00:00.000', 1.5) "
        "`D3` USING st TAGS (3) VALUES (1, 2);"
    )
    assert statement == Insert(
        (
            InsertTarget(Name("d1", "db"), None, None, ((Now(), 1), (Now(1_000_000_000), 2))),
            InsertTarget(
                Name("d2"),
                Using(Name("st", "db"), ("location", "groupid"), ("SF", 2)),
                ("ts", "current"),
                (("2024-01-01 00:00:00.000", 1.5),),
            ),
            InsertTarget(Name("D3"), Using(Name("st"), None, (3,)), None, ((1, 2),)),
        )
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(0, -5, +7, 123456789012345678901234567890)", (0, -5, 7, 123456789012345678901234567890)),
        ("(1.5, -2e3, .5, 1., 2E-2, -0.0)", (1.5, -2000.0, 0.5, 1.0, 0.02, -0.0)),
        ("(true, FALSE, Null, NULL)", (True, False, None, None)),
        ("('it''s', \"say \"\"hi\"\"\", 'a\\'b', 'back\\\\slash')", ("it's", 'say "hi"', "a'b", "back\\slash")),
        ("('line\\nbreak\\ttab', 'keep \\% and \\_', '\\q', '(,)')", ("line\nbreak\ttab", "keep \\% and \\_", "q", "(,)")),
        ("('', \"\")", ("", "")),
        ("(now, NOW(), now ( ), Now)", (Now(), Now(), Now(), Now())),
        (
            "(now + 1s, now() - 2h, NOW()-1d, now + 1w, now - 5m, now + 3a, now + 4u, now + 5b)",
            (
                Now(10**9),
                Now(-2 * 3600 * 10**9),
                Now(-86_400 * 10**9),
                Now(7 * 86_400 * 10**9),
                Now(-300 * 10**9),
                Now(3_000_000),
                Now(4_000),
                Now(5),
            ),
        ),
        ("(now + 1h - 30m)", (Now(1800 * 10**9),)),
        ("(1700000000000, '2024-01-01T00:00:00Z')", (1700000000000, "2024-01-01T00:00:00Z")),
    ],
)
def test_insert_values(text: str, expected: tuple[ast.Value, ...]) -> None:
    assert values(text) == expected
    assert all(type(a) is type(b) for a, b in zip(values(text), expected))


def test_insert_values_whitespace_and_newlines() -> None:
    statement = parse("INSERT INTO d1\n VALUES\n(\n 1 ,\n'x'\n)\n\n( 2,'y' )  ;  ")
    assert isinstance(statement, Insert)
    assert statement.targets[0].rows == ((1, "x"), (2, "y"))


def test_tag_values_use_the_same_value_syntax() -> None:
    statement = parse("CREATE TABLE d1 USING st TAGS (now - 1h, 'a''b', -2.5, true, null, - 3)")
    assert isinstance(statement, CreateSubtable)
    assert statement.tag_values == (Now(-3600 * 10**9), "a'b", -2.5, True, None, -3)


def test_insert_row_arity_must_match_columns() -> None:
    with pytest.raises(InvalidValue, match="row 2 of table 'd1' has 1 values for 2 columns"):
        parse("INSERT INTO d1 (ts, v) VALUES (1, 2) (3)")


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("(1, 'abc", "unterminated string", 27),
        ("(1, 2", "expected ',' or ')' after a value", 28),
        ("(1, abc)", "expected a value (number, string, TRUE, FALSE, NULL or now), got 'abc'", 27),
        ("(1,, 2)", "expected a value (number, string, TRUE, FALSE, NULL or now), got ','", 26),
        ("()", "expected a value (number, string, TRUE, FALSE, NULL or now), got ')'", 24),
        ("(1s, 2)", "expected ',' or ')' after a value", 25),
        ("(1, 2) (3,", "unexpected end of statement inside a row", 33),
        ("((1))", "syntax error: a VALUES row cannot contain '(' except in now()", 23),
        ("1, 2", "syntax error: unexpected '1', expected '(' row values ')'", 23),
    ],
)
def test_insert_value_errors_say_where(text: str, message: str, column: int) -> None:
    sql = f"INSERT INTO d1 VALUES {text}"
    with pytest.raises(SqlSyntaxError) as info:
        parse(sql)
    assert info.value.message == f"{message} (line 1, column {column}); statement: {sql}"


def test_insert_error_on_later_line() -> None:
    with pytest.raises(SqlSyntaxError, match="got 'oops' \\(line 3, column 5\\)"):
        parse("INSERT INTO d1 VALUES\n(1, 2)\n(3, oops)")


def test_insert_error_in_long_statement_quotes_a_window() -> None:
    rows = " ".join(f"({i}, {i})" for i in range(1000))
    with pytest.raises(SqlSyntaxError) as info:
        parse(f"INSERT INTO d1 VALUES {rows} (1000, bad)")
    message = info.value.message
    assert "got 'bad'" in message
    assert "(1000, bad)" in message
    assert len(message) < 400


def sql_literal(value: ast.Value) -> str:
    """``value`` written as a SQL literal (strings with '' and backslash escaping)."""
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return repr(value)


values_strategy = st.one_of(
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(exclude_categories=["Cs"])),
    st.booleans(),
    st.none(),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(values_strategy, min_size=1, max_size=6), min_size=1, max_size=5))
def test_insert_values_round_trip(rows: list[list[ast.Value]]) -> None:
    text = " ".join("(" + ", ".join(sql_literal(v) for v in row) + ")" for row in rows)
    statement = parse(f"INSERT INTO d1 VALUES {text}")
    assert isinstance(statement, Insert)
    parsed = statement.targets[0].rows
    assert parsed == tuple(tuple(row) for row in rows)
    assert [[type(v) for v in row] for row in parsed] == [[type(v) for v in row] for row in rows]


def test_insert_many_rows() -> None:
    n = 10_000
    sql = "INSERT INTO d1 VALUES " + " ".join(f"({1700000000000 + i}, {i * 0.5}, {i}, 'loc{i}')" for i in range(n))
    statement = parse(sql)
    assert isinstance(statement, Insert)
    rows = statement.targets[0].rows
    assert len(rows) == n
    assert rows[-1] == (1700000000000 + n - 1, (n - 1) * 0.5, n - 1, f"loc{n - 1}")


# --------------------------------------------------------------------- topics


def test_topic_as_database() -> None:
    assert parse("CREATE TOPIC topic_db AS DATABASE power;") == CreateTopic(
        "topic_db", "database", Name("power"), sql="CREATE TOPIC topic_db AS DATABASE power"
    )


def test_topic_with_meta_as_stable_with_tag_condition() -> None:
    sql = "create topic if not exists tp with meta as stable Power.Meters where groupid = 2 and location like 'SF%'"
    assert parse(f"  {sql} ;\n") == CreateTopic(
        "tp",
        "stable",
        Name("meters", "power"),
        with_meta=True,
        if_not_exists=True,
        where=Binary("AND", Binary("=", Col("groupid"), Lit(2)), Like(Col("location"), "SF%")),
        sql=sql,
    )


def test_topic_as_stable_without_condition() -> None:
    statement = parse("CREATE TOPIC t WITH META AS STABLE st")
    assert statement == CreateTopic("t", "stable", Name("st"), with_meta=True, sql="CREATE TOPIC t WITH META AS STABLE st")


def test_topic_as_select() -> None:
    sql = "CREATE TOPIC tp AS SELECT ts, current AS c, voltage * 2 v2, tbname, * FROM db.meters WHERE voltage > 200"
    assert parse(sql) == CreateTopic(
        "tp",
        "select",
        Name("meters", "db"),
        select=(
            SelectItem(Col("ts")),
            SelectItem(Col("current"), "c"),
            SelectItem(Binary("*", Col("voltage"), Lit(2)), "v2"),
            SelectItem(Col("tbname")),
            SelectItem(None),
        ),
        where=Binary(">", Col("voltage"), Lit(200)),
        sql=sql,
    )


def test_topic_with_meta_and_select_is_a_syntax_error() -> None:
    with pytest.raises(SqlSyntaxError, match="unexpected 'SELECT', expected one of DATABASE, STABLE \\(line 1, column 29\\)"):
        parse("CREATE TOPIC t WITH META AS SELECT * FROM st")


@pytest.mark.parametrize("aggregate", ["count(*)", "COUNT(v)", "sum(v)", "avg(v)", "max(v) + 1", "spread(v)", "stddev(v)", "last(v)"])
def test_topic_select_refuses_aggregates(aggregate: str) -> None:
    name = aggregate.split("(")[0].lower()
    with pytest.raises(Unsupported, match=f"aggregate function {name}\\(\\) is not supported in CREATE TOPIC AS SELECT"):
        parse(f"CREATE TOPIC t AS SELECT {aggregate} FROM st")


def test_topic_select_refuses_aggregates_in_where() -> None:
    with pytest.raises(Unsupported, match="aggregate function min"):
        parse("CREATE TOPIC t AS SELECT v FROM st WHERE v > min(v)")


def test_drop_topic() -> None:
    assert parse("DROP TOPIC tp") == DropTopic("tp")
    assert parse("drop topic if exists `TP`") == DropTopic("TP", if_exists=True)


# ----------------------------------------------------------- show / describe


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SHOW DATABASES", Show("DATABASES")),
        ("show stables", Show("STABLES")),
        ("SHOW power.STABLES", Show("STABLES", "power")),
        ("show tables;", Show("TABLES")),
        ("SHOW `Power`.tables", Show("TABLES", "Power")),
        ("show topics", Show("TOPICS")),
        ("SHOW CONSUMERS", Show("CONSUMERS")),
        ("DROP CONSUMER GROUP IF EXISTS 'spark-x.1' ON tp", ast.DropConsumerGroup("spark-x.1", "tp", True)),
        ("drop consumer group `G-1` on tp", ast.DropConsumerGroup("G-1", "tp")),
        ("show subscriptions", Show("SUBSCRIPTIONS")),
        ("SHOW QUARANTINE", Show("QUARANTINE")),
    ],
)
def test_show(sql: str, expected: Show) -> None:
    assert parse(sql) == expected


def test_show_topics_is_not_per_database() -> None:
    with pytest.raises(SqlSyntaxError, match="unexpected 'topics', expected one of STABLES, TABLES"):
        parse("SHOW db.topics")


def test_describe() -> None:
    assert parse("DESCRIBE meters") == Describe(Name("meters"))
    assert parse("desc db.d1") == Describe(Name("d1", "db"))


# --------------------------------------------------------------------- select


def test_select_full() -> None:
    assert parse("SELECT * FROM power.meters WHERE current > 10 LIMIT 5") == Select(
        (SelectItem(None),), Name("meters", "power"), Binary(">", Col("current"), Lit(10)), 5
    )


def test_select_minimal_and_aliases() -> None:
    assert parse("select a, b as `B`, c d from t") == Select(
        (SelectItem(Col("a")), SelectItem(Col("b"), "B"), SelectItem(Col("c"), "d")), Name("t")
    )


def test_select_refuses_aggregates_in_where() -> None:
    with pytest.raises(Unsupported, match="aggregate function count\\(\\) is not allowed in WHERE"):
        parse("SELECT a FROM t WHERE count(*) > 1")


def test_select_time_series_clauses() -> None:
    statement = parse(
        "SELECT _wstart, count(*), avg(current) AS a FROM power.meters WHERE ts >= now - 1h PARTITION BY tbname "
        "INTERVAL(10s, 1s) SLIDING(5s) FILL(VALUE, 1, -2.5) ORDER BY a DESC, tbname LIMIT 5 OFFSET 2"
    )
    assert statement == Select(
        (SelectItem(Col("_wstart")), SelectItem(Call("count", ())), SelectItem(Call("avg", (Col("current"),)), "a")),
        Name("meters", "power"),
        Binary(">=", Col("ts"), Binary("-", Col("now"), ast.Duration(3_600 * 10**9))),
        limit=5, offset=2, partition_by=(Col("tbname"),),
        interval=ast.Interval(10 * 10**9, 10**9, 5 * 10**9), fill=ast.Fill("VALUE", (1, -2.5)),
        order_by=(ast.OrderItem(Col("a"), True), ast.OrderItem(Col("tbname"))),
    )


def test_select_group_by_having_and_mysql_limit() -> None:
    statement = parse("select location, max(v) from t group by location having max(v) > 1 limit 2, 3")
    assert isinstance(statement, Select)
    assert statement.group_by == (Col("location"),)
    assert statement.having == Binary(">", Call("max", (Col("v"),)), Lit(1))
    assert (statement.limit, statement.offset) == (3, 2)
    assert parse("SELECT a FROM t INTERVAL(1m) FILL(prev)") == Select(
        (SelectItem(Col("a")),), Name("t"), interval=ast.Interval(60 * 10**9), fill=ast.Fill("PREV"))


def test_topics_refuse_durations() -> None:
    with pytest.raises(Unsupported, match="durations .* are not supported in CREATE TOPIC AS SELECT"):
        parse("CREATE TOPIC t AS SELECT v FROM st WHERE ts > now - 1h")
    with pytest.raises(Unsupported, match="durations .* are not supported in CREATE TOPIC AS STABLE"):
        parse("CREATE TOPIC t AS STABLE st WHERE g > 1h")


def test_non_reserved_keywords_as_column_names() -> None:
    statement = parse("SELECT database, tags, value, topic, meta FROM t WHERE value > 1")
    assert isinstance(statement, Select)
    assert [i.expr for i in statement.items] == [Col("database"), Col("tags"), Col("value"), Col("topic"), Col("meta")]


# ---------------------------------------------------------------- expressions


def test_precedence_arithmetic() -> None:
    assert where("a + b * c - d / e % f = 1") == Binary(
        "=",
        Binary(
            "-",
            Binary("+", Col("a"), Binary("*", Col("b"), Col("c"))),
            Binary("%", Binary("/", Col("d"), Col("e")), Col("f")),
        ),
        Lit(1),
    )


def test_parentheses_override_precedence() -> None:
    assert where("(a + b) * c > 0") == Binary(">", Binary("*", Binary("+", Col("a"), Col("b")), Col("c")), Lit(0))


def test_precedence_boolean() -> None:
    assert where("a = 1 OR b = 2 AND NOT c = 3") == Binary(
        "OR",
        Binary("=", Col("a"), Lit(1)),
        Binary("AND", Binary("=", Col("b"), Lit(2)), Unary("NOT", Binary("=", Col("c"), Lit(3)))),
    )


def test_and_or_chains_fold_into_balanced_trees() -> None:
    assert where("a AND b AND c") == Binary("AND", Binary("AND", Col("a"), Col("b")), Col("c"))
    assert where("a OR b OR c") == Binary("OR", Binary("OR", Col("a"), Col("b")), Col("c"))
    assert where("a OR b OR c OR d OR e") == Binary(
        "OR", Binary("OR", Binary("OR", Col("a"), Col("b")), Binary("OR", Col("c"), Col("d"))), Col("e")
    )
    chain = where(" AND ".join(f"c{i} = {i}" for i in range(10_000)))  # issue 13, item 2: was 10,000 deep
    assert ast.depth(chain) == 16  # 14 levels of AND, then "=", then the column
    assert sum(isinstance(node, Col) for node in ast.walk(chain)) == 10_000


def test_unary_minus() -> None:
    assert where("-a * 2 < -3") == Binary("<", Binary("*", Unary("-", Col("a")), Lit(2)), Lit(-3))
    assert where("a = - -1.5") == Binary("=", Col("a"), Lit(1.5))
    assert where("a = +2") == Binary("=", Col("a"), Lit(2))


@pytest.mark.parametrize(
    ("op", "normalised"), [("=", "="), ("==", "="), ("!=", "!="), ("<>", "!="), ("<", "<"), ("<=", "<="), (">", ">"), (">=", ">=")]
)
def test_comparison_operators(op: str, normalised: str) -> None:
    assert where(f"a {op} 1") == Binary(normalised, Col("a"), Lit(1))


def test_predicates() -> None:
    assert where("a IN (1, 2.5, 'x', NULL)") == InList(Col("a"), (Lit(1), Lit(2.5), Lit("x"), Lit(None)))
    assert where("a not in (-1)") == InList(Col("a"), (Lit(-1),), negated=True)
    assert where("a BETWEEN 1 AND 2 + 3") == Between(Col("a"), Lit(1), Binary("+", Lit(2), Lit(3)))
    assert where("a NOT BETWEEN 1 AND 2") == Between(Col("a"), Lit(1), Lit(2), negated=True)
    assert where("name LIKE 'd10%'") == Like(Col("name"), "d10%")
    assert where("name not like \"a\\_b\"") == Like(Col("name"), "a\\_b", negated=True)
    assert where("a IS NULL") == IsNull(Col("a"))
    assert where("a is not null") == IsNull(Col("a"), negated=True)


def test_between_binds_tighter_than_and() -> None:
    assert where("a BETWEEN 1 AND 2 AND b = 1") == Binary(
        "AND", Between(Col("a"), Lit(1), Lit(2)), Binary("=", Col("b"), Lit(1))
    )


def test_literals_in_expressions() -> None:
    assert where("a = 'x''y'") == Binary("=", Col("a"), Lit("x'y"))
    assert where("a = \"dq\"") == Binary("=", Col("a"), Lit("dq"))
    assert where("a = TRUE OR b = false OR c = null") == Binary(
        "OR",
        Binary("OR", Binary("=", Col("a"), Lit(True)), Binary("=", Col("b"), Lit(False))),
        Binary("=", Col("c"), Lit(None)),
    )
    assert where("ts > '2024-01-01 00:00:00'") == Binary(">", Col("ts"), Lit("2024-01-01 00:00:00"))


def test_functions_and_cast() -> None:
    assert where("ABS(a) > Round(b, 1) + length(concat(c, 'x'))") == Binary(
        ">",
        Call("abs", (Col("a"),)),
        Binary("+", Call("round", (Col("b"), Lit(1))), Call("length", (Call("concat", (Col("c"), Lit("x"))),))),
    )
    assert where("now() > 0") == Binary(">", Call("now", ()), Lit(0))
    assert where("CAST(a AS BIGINT UNSIGNED) = cast(b as binary(8))") == Binary(
        "=", Cast(Col("a"), ColumnTypeRef("BIGINT UNSIGNED")), Cast(Col("b"), ColumnTypeRef("VARCHAR", 8))
    )


def test_cast_to_unknown_type() -> None:
    with pytest.raises(SqlSyntaxError, match="unknown type STRING"):
        where("CAST(a AS STRING) = 'x'")


def test_identifiers_case_and_backquotes() -> None:
    assert where("MyCol = 1 AND `MyCol` = 2 AND `with space` = 3 AND TBNAME = 'd1'") == Binary(
        "AND",
        Binary("AND", Binary("=", Col("mycol"), Lit(1)), Binary("=", Col("MyCol"), Lit(2))),
        Binary("AND", Binary("=", Col("with space"), Lit(3)), Binary("=", Col("tbname"), Lit("d1"))),
    )


# ------------------------------------------------------------------ limits (issue 13, item 2)


@pytest.mark.parametrize("nesting", ["NOT {}", "-({})", "abs({})", "CAST({} AS INT)", "({}) + 1"])
def test_expression_depth_is_bounded(nesting: str) -> None:
    """A 490-deep NOT chain crashed CPython; every kind of nesting counts, up to the limit and not one more."""
    expr = "v"
    while ast.depth(where(f"{expr} > 0")) < MAX_EXPR_DEPTH:
        expr = nesting.format(expr)
    assert ast.depth(where(f"{expr} > 0")) == MAX_EXPR_DEPTH
    with pytest.raises(LimitExceeded, match=f"expression nested {MAX_EXPR_DEPTH + 1} levels deep: the limit is 64"):
        parse(f"SELECT * FROM t WHERE {nesting.format(expr)} > 0")
    with pytest.raises(LimitExceeded, match="nested"):  # the select list too, and topics
        parse(f"CREATE TOPIC t AS SELECT {nesting.format(expr)} > 0 FROM m")


def test_deep_parentheses_alone_do_not_count() -> None:
    assert where("(" * 10_000 + "a = 1" + ")" * 10_000) == Binary("=", Col("a"), Lit(1))


def test_statement_size_is_bounded_except_insert() -> None:
    with pytest.raises(LimitExceeded, match=f"statement of {MAX_STATEMENT_CHARS + 1} characters"):
        parse("SELECT * FROM t WHERE s = '" + "x" * (MAX_STATEMENT_CHARS - 27) + "'")
    assert parse("SELECT * FROM t WHERE s = '" + "x" * (MAX_STATEMENT_CHARS - 28) + "'")
    with pytest.raises(LimitExceeded, match=f"more than {MAX_STATEMENT_TOKENS} tokens"):
        parse("SELECT * FROM t WHERE a IN (" + ",".join(["1"] * (MAX_STATEMENT_TOKENS // 2)) + ")")
    big = parse("-- rows\n insert INTO t VALUES " + "(1, 'x')" * 140_000)  # 1.1 MB: the request size bounds it
    assert isinstance(big, Insert) and len(big.targets[0].rows) == 140_000


def test_lone_surrogates_are_refused() -> None:
    with pytest.raises(SqlSyntaxError, match="not valid Unicode text: a lone surrogate at position 22"):
        parse("SELECT * FROM t WHERE \ud800 = 1")


def test_comments_and_whitespace() -> None:
    statement = parse("-- leading comment\nSELECT a -- the column\n\tFROM\n t\n-- trailing\n;")
    assert statement == Select((SelectItem(Col("a")),), Name("t"))


# --------------------------------------------------------------------- errors


def test_syntax_error_names_token_position_expected_and_statement() -> None:
    with pytest.raises(SqlSyntaxError) as info:
        parse("CREATE DATABSE power")
    assert info.value.message == (
        "syntax error: unexpected 'DATABSE', expected one of DATABASE, STABLE, TABLE, TOPIC, USER "
        "(line 1, column 8); statement: CREATE DATABSE power"
    )


def test_syntax_error_on_second_line() -> None:
    with pytest.raises(SqlSyntaxError, match="unexpected 'FORM', expected one of ',', FROM \\(line 2, column 1\\)"):
        parse("SELECT *\nFORM t")


def test_syntax_error_at_end_of_statement() -> None:
    with pytest.raises(SqlSyntaxError, match="unexpected end of statement, expected identifier \\(line 1, column 14\\)"):
        parse("SELECT * FROM ")


def test_unexpected_character() -> None:
    with pytest.raises(SqlSyntaxError, match="unexpected character '!', expected one of .*comparison operator"):
        parse("SELECT * FROM t WHERE a ! 1")


def test_trailing_garbage() -> None:
    with pytest.raises(SqlSyntaxError, match="unexpected 'extra', expected one of ';', end of statement"):
        parse("DROP TOPIC t extra")


def test_only_one_statement() -> None:
    with pytest.raises(SqlSyntaxError, match="unexpected 'USE'"):
        parse("USE a; USE b")


@pytest.mark.parametrize("sql", ["", "   ", ";", " ; "])
def test_empty_statement(sql: str) -> None:
    with pytest.raises(SqlSyntaxError, match="empty statement"):
        parse(sql)


def test_errors_are_never_raw_lark_exceptions() -> None:
    for sql in ["SELECT", "CREATE TABLE t (", "INSERT INTO", "SHOW", "'", "`unterminated", "ALTER STABLE st RENAME x"]:
        with pytest.raises(SqlSyntaxError, match="statement: "):
            parse(sql)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_arbitrary_text_only_raises_storage_errors(text: str) -> None:
    try:
        parse(text)
    except StorageError as e:
        assert "statement" in e.message or e.message == "empty statement"


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="(),'\"\\ 1a.-+nowNULL", max_size=30))
def test_arbitrary_values_only_raise_storage_errors(text: str) -> None:
    try:
        parse(f"INSERT INTO d1 VALUES ({text})")
    except StorageError as e:
        assert "statement: INSERT INTO d1 VALUES" in e.message


def test_error_codes() -> None:
    with pytest.raises(SqlSyntaxError) as syntax:
        parse("SELEC 1")
    assert syntax.value.code == 0x2600
    with pytest.raises(Unsupported) as unsupported:
        parse("CREATE TOPIC t AS SELECT max(a) FROM st")
    assert unsupported.value.code == 0x2610


@pytest.mark.parametrize("clause", ["ORDER BY {}", "GROUP BY {}", "PARTITION BY {}", "HAVING {} > 0"])
def test_query_clauses_keep_the_nesting_limit(clause: str) -> None:
    deep = "abs(" * 70 + "a" + ")" * 70
    with pytest.raises(LimitExceeded, match="expression nested 7[12] levels deep: the limit is 64"):
        parse(f"SELECT count(*) FROM t {clause.format(deep)}")


def test_user_statements() -> None:
    assert parse("CREATE USER alice PASS 'it''s'") == ast.CreateUser("alice", "it's")
    assert parse("create user `Bob` pass \"pw\";") == ast.CreateUser("Bob", "pw")
    assert parse("ALTER USER alice PASS 'new'") == ast.AlterUser("alice", "new")
    assert parse("DROP USER alice") == ast.DropUser("alice")
    assert parse("SHOW USERS") == ast.ShowUsers()
    assert "it's" not in repr(parse("CREATE USER alice PASS 'it''s'"))  # the password is never shown
    for bad in ("CREATE USER alice", "CREATE USER alice PASS", "ALTER USER alice", "DROP USER", "CREATE USER PASS 'x'"):
        with pytest.raises(SqlSyntaxError):
            parse(bad)
