"""The vectorised expression evaluator over small pyarrow tables."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from walgate.storage.errors import InvalidValue, Unsupported
from walgate.storage.expr import compile_expr, compile_filter, referenced_columns
from walgate.storage.sql.ast import Binary, Call, Col, Expr, InList, Lit, Select
from walgate.storage.sql.parser import parse

T0 = 1_704_067_200_000  # 2024-01-01 00:00:00 UTC in ms


def columns() -> dict[str, Any]:
    """Four rows of a meters subtable, with NULLs, plus its tags as scalars."""
    return {
        "ts": pa.array([T0, T0 + 1000, T0 + 2000, None], pa.timestamp("ms")),
        "current": pa.array([10.5, None, -2.5, 7.0], pa.float32()),
        "voltage": pa.array([220, 218, None, -7], pa.int32()),
        "phase": pa.array([0.25, 0.5, 0.75, 1.0]),
        "location": pa.array(["SF", "s_f%", None, "LA"]),
        "tbname": pa.scalar("d1001"),
        "groupid": pa.scalar(2, pa.int32()),
    }


def expr(sql: str) -> Expr:
    """The expression of ``SELECT <sql> FROM t``."""
    statement = parse(f"SELECT {sql} FROM t")
    assert isinstance(statement, Select) and statement.items[0].expr is not None
    return statement.items[0].expr


def evaluate(sql: str, data: dict[str, Any] | None = None) -> Any:
    result = compile_expr(expr(sql))(columns() if data is None else data)
    return result.as_py() if isinstance(result, pa.Scalar) else result.to_pylist()


def keep(condition: str, data: dict[str, Any] | None = None) -> list[bool]:
    result = compile_filter(expr(condition))(columns() if data is None else data)
    assert isinstance(result, pa.BooleanArray) and result.null_count == 0
    return result.to_pylist()


# ---------------------------------------------------------------- arithmetic


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("voltage + 1", [221, 219, None, -6]),
        ("voltage - phase", [219.75, 217.5, None, -8.0]),
        ("voltage * 2 + 1", [441, 437, None, -13]),
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("-voltage", [-220, -218, None, 7]),
        ("voltage / 4", [55.0, 54.5, None, -1.75]),
        ("voltage / 0", [None, None, None, None]),
        ("voltage % 3", [1.0, 2.0, None, -1.0]),
        ("7.5 % 2", 1.5),
        ("-7 % 3", -1.0),
        ("voltage % 0", [None, None, None, None]),
        ("1 / 2", 0.5),
    ],
)
def test_arithmetic(sql: str, expected: Any) -> None:
    assert evaluate(sql) == expected


def test_division_always_yields_double() -> None:
    result = compile_expr(expr("voltage / 2"))(columns())
    assert result.type == pa.float64()


def test_arithmetic_with_tag_scalar_broadcasts() -> None:
    assert evaluate("voltage + groupid") == [222, 220, None, -5]
    assert evaluate("groupid * 10") == 20


# --------------------------------------------------------------- comparisons


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("voltage > 218", [True, False, False, False]),
        ("voltage >= 218", [True, True, False, False]),
        ("voltage < 0", [False, False, False, True]),
        ("voltage <= 218", [False, True, False, True]),
        ("voltage = 218", [False, True, False, False]),
        ("voltage == 218", [False, True, False, False]),
        ("voltage != 218", [True, False, False, True]),
        ("voltage <> 218", [True, False, False, True]),
        ("218 < voltage", [True, False, False, False]),
        ("current > 5", [True, False, False, True]),
        ("current > phase * 10", [True, False, False, False]),
        ("location = 'SF'", [True, False, False, False]),
        ("voltage = '218'", [False, True, False, False]),
        ("voltage = null", [False, False, False, False]),
    ],
)
def test_comparisons(condition: str, expected: list[bool]) -> None:
    assert keep(condition) == expected


def test_comparison_keeps_null_in_expression_result() -> None:
    assert evaluate("voltage > 218") == [True, False, None, False]


def test_kleene_logic() -> None:
    # NULL OR TRUE is TRUE, NULL AND FALSE is FALSE, otherwise NULL stays NULL
    assert evaluate("voltage > 0 OR phase > 0.6") == [True, True, True, True]
    assert evaluate("voltage > 0 AND phase > 0.6") == [False, False, None, False]
    assert evaluate("NOT voltage > 219") == [False, True, None, True]
    assert keep("NOT voltage > 219") == [False, True, False, True]


def test_precedence_is_respected_by_evaluation() -> None:
    assert keep("voltage < 0 OR voltage > 219 AND phase > 0.3") == [False, False, False, True]
    assert keep("(voltage < 0 OR voltage > 219) AND phase > 0.3") == [False, False, False, True]
    assert keep("(voltage < 0 OR voltage > 219) AND phase < 0.3") == [True, False, False, False]


# ---------------------------------------------------------------- timestamps


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("ts >= '2024-01-01 00:00:01'", [False, True, True, False]),
        ("ts > '2024-01-01 00:00:00.500'", [False, True, True, False]),
        ("ts = '2024-01-01T00:00:01Z'", [False, True, False, False]),
        ("ts = '2024-01-01T08:00:02+08:00'", [False, False, True, False]),
        ("ts < '2024-01-01 00:00:00'", [False, False, False, False]),
        ("ts = '2023-12-31T19:30:01-0430'", [False, True, False, False]),
        (f"ts = '{T0 + 2000}'", [False, False, True, False]),
        (f"ts = {T0 + 1000}", [False, True, False, False]),
        (f"ts BETWEEN {T0} AND '2024-01-01 00:00:01'", [True, True, False, False]),
        (f"ts IN ('2024-01-01 00:00:02', {T0})", [True, False, True, False]),
        ("ts IS NULL", [False, False, False, True]),
    ],
)
def test_timestamp_literals_are_coerced(condition: str, expected: list[bool]) -> None:
    assert keep(condition) == expected


def test_timestamp_coercion_follows_the_column_unit() -> None:
    data = {"ts": pa.array([1_000_000_001, 2_000_000_000], pa.timestamp("ns"))}
    assert keep("ts = '1970-01-01 00:00:01.000000001'", data) == [True, False]
    assert keep("ts = 2000000000", data) == [False, True]
    micros = {"ts": pa.array([1_500_000], pa.timestamp("us"))}
    assert keep("ts = '1970-01-01 00:00:01.5'", micros) == [True]


def test_bad_timestamp_literal() -> None:
    with pytest.raises(InvalidValue, match="invalid value for TIMESTAMP: 'yesterday'"):
        keep("ts > 'yesterday'")
    with pytest.raises(InvalidValue, match="invalid value for TIMESTAMP: '2024-02-30 00:00:00'"):
        keep("ts > '2024-02-30 00:00:00'")


# ----------------------------------------------------------------- predicates


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("voltage IN (220, -7)", [True, False, False, True]),
        ("voltage IN (220, 2.5)", [True, False, False, False]),
        ("voltage NOT IN (220, -7)", [False, True, False, False]),
        ("voltage NOT IN (220, NULL)", [False, False, False, False]),
        ("voltage IN (NULL)", [False, False, False, False]),
        ("location IN ('LA', 'SF')", [True, False, False, True]),
        ("tbname IN ('d1001', 'd1002')", [True, True, True, True]),
        ("voltage BETWEEN 0 AND 219", [False, True, False, False]),
        ("voltage NOT BETWEEN 0 AND 219", [True, False, False, True]),
        ("phase BETWEEN 0.3 AND 0.8", [False, True, True, False]),
        ("location LIKE 'S%'", [True, False, False, False]),
        ("location LIKE 's_f\\%'", [False, True, False, False]),
        ("location LIKE '_F'", [True, False, False, False]),
        ("location NOT LIKE 'S%'", [False, True, False, True]),
        ("location IS NULL", [False, False, True, False]),
        ("location IS NOT NULL", [True, True, False, True]),
        ("current IS NULL OR voltage IS NULL", [False, True, True, False]),
    ],
)
def test_predicates(condition: str, expected: list[bool]) -> None:
    assert keep(condition) == expected


def test_in_keeps_sql_null_semantics_in_expression_result() -> None:
    assert evaluate("voltage IN (220, NULL)") == [True, None, None, None]
    assert evaluate("voltage NOT IN (220)") == [False, True, None, True]


def test_in_list_must_be_literals() -> None:
    with pytest.raises(Unsupported, match="IN \\(...\\) accepts only literal values"):
        compile_expr(InList(Col("a"), (Col("b"),)))


def test_in_list_of_incompatible_literals() -> None:
    with pytest.raises(InvalidValue):
        keep("location IN ('a', 1)")


# ------------------------------------------------------------------ functions


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("abs(voltage)", [220, 218, None, 7]),
        ("ceil(phase * 3)", [1.0, 2.0, 3.0, 3.0]),
        ("floor(phase * 3)", [0.0, 1.0, 2.0, 3.0]),
        ("round(current)", [11.0, None, -3.0, 7.0]),
        ("round(phase, 1)", [0.3, 0.5, 0.8, 1.0]),
        ("sqrt(16)", 4.0),
        ("pow(voltage, 2)", [48400.0, 47524.0, None, 49.0]),
        ("log(8, 2)", 3.0),
        ("log10(1000)", 3.0),
        ("round(ln(1), 3)", 0.0),
        ("lower(location)", ["sf", "s_f%", None, "la"]),
        ("upper(location)", ["SF", "S_F%", None, "LA"]),
        ("length('héllo')", 6),
        ("char_length('héllo')", 5),
        ("concat(location, '-', tbname)", ["SF-d1001", "s_f%-d1001", None, "LA-d1001"]),
        ("concat_ws('/', location, tbname)", ["SF/d1001", "s_f%/d1001", "d1001", "LA/d1001"]),
        ("ltrim('  x ')", "x "),
        ("rtrim('  x ')", "  x"),
        ("substr(tbname, 2)", "1001"),
        ("substr(tbname, 2, 2)", "10"),
        ("substr(tbname, -3, 2)", "00"),
        ("cast(voltage as varchar(8))", ["220", "218", None, "-7"]),
        ("cast('12' as bigint) + 1", 13),
        ("cast(ts as bigint)", [T0, T0 + 1000, T0 + 2000, None]),
        ("cast(voltage as double) / 8", [27.5, 27.25, None, -0.875]),
    ],
)
def test_functions(sql: str, expected: Any) -> None:
    assert evaluate(sql) == expected


def test_unknown_function() -> None:
    with pytest.raises(Unsupported, match="unsupported function nosuch\\(\\)"):
        compile_expr(expr("nosuch(voltage)"))


def test_wrong_argument_count() -> None:
    with pytest.raises(InvalidValue, match="abs\\(\\) takes 1 arguments, got 2"):
        compile_expr(expr("abs(voltage, 1)"))
    with pytest.raises(InvalidValue, match="concat\\(\\) takes 2 to 8 arguments, got 1"):
        compile_expr(expr("concat(location)"))


def test_constant_arguments_required() -> None:
    with pytest.raises(InvalidValue, match="ROUND's second argument must be an integer constant"):
        evaluate("round(phase, voltage)")


# --------------------------------------------------------------------- errors


def test_unknown_column_is_named() -> None:
    evaluator = compile_expr(expr("nosuch + 1"))
    with pytest.raises(InvalidValue, match="unknown column 'nosuch'"):
        evaluator(columns())


def test_type_mismatch_is_invalid_value() -> None:
    with pytest.raises(InvalidValue, match="cannot evaluate =\\(string, int64\\)"):
        keep("location = 1")
    with pytest.raises(InvalidValue, match="cannot evaluate NOT\\(int32\\)"):
        keep("NOT voltage")


def test_filter_must_be_boolean() -> None:
    with pytest.raises(InvalidValue, match="condition must be boolean, got int32"):
        keep("voltage")


# ---------------------------------------------------------------- filter shape


def test_filter_on_tags_only_broadcasts_to_batch_length() -> None:
    assert keep("groupid = 2 AND tbname LIKE 'd10%'") == [True, True, True, True]
    assert keep("groupid = 3") == [False, False, False, False]


def test_filter_on_scalars_only_has_length_one() -> None:
    tags = {"groupid": pa.scalar(2, pa.int32()), "location": pa.scalar(None, pa.string())}
    assert keep("groupid = 2", tags) == [True]
    assert keep("location = 'SF'", tags) == [False]


def test_filter_over_chunked_arrays() -> None:
    data = {"v": pa.chunked_array([[1, 2], [3, None]])}
    assert keep("v >= 2", data) == [False, True, True, False]


def test_filter_with_null_literal_only() -> None:
    assert keep("NULL", {"v": pa.array([1, 2])}) == [False, False]


def test_evaluator_is_reusable_across_batches() -> None:
    evaluator = compile_filter(expr("v IN (1, 3)"))
    assert evaluator({"v": pa.array([1, 2, 3])}).to_pylist() == [True, False, True]
    assert evaluator({"v": pa.array([3.0, 4.0])}).to_pylist() == [True, False]


# ---------------------------------------------------------------- referenced


def test_referenced_columns() -> None:
    condition = expr("abs(current) > 1 AND location IN ('a') OR tbname LIKE 'd%' AND ts BETWEEN 1 AND 2 "
                     "AND CAST(phase AS INT) IS NOT NULL AND -voltage < 0")
    assert referenced_columns(condition) == frozenset(
        {"current", "location", "tbname", "ts", "phase", "voltage"}
    )
    assert referenced_columns(Binary("+", Lit(1), Call("abs", (Lit(2),)))) == frozenset()


# ------------------------------------------------- total evaluation (issue 13, item 3)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("cast(location as int)", [None, None, None, None]),  # no string here is a number
        ("cast('12x' as int)", None),
        ("cast(current as tinyint)", [10, None, -2, 7]),  # truncated toward zero
        ("cast(voltage as tinyint)", [None, None, None, -7]),  # 220 does not fit
        ("cast(phase * 1e30 as bigint)", [None, None, None, None]),
        ("cast(cast(voltage * 10000000000 as timestamp) as bigint)", [2_200_000_000_000, 2_180_000_000_000, None, -70_000_000_000]),
        ("cast(voltage * 1000000000000000 as timestamp)", [None, None, None, None]),  # past year 9999 / before year 1
    ],
)
def test_values_that_do_not_convert_are_null(sql: str, expected: Any) -> None:
    assert evaluate(sql) == expected


def test_rows_an_operation_fails_on_are_null_and_the_others_are_computed() -> None:
    data = {"i": pa.array([125, 100, None, -128, 7], pa.int8())}
    assert evaluate("round(i, -1)", data) == [None, 100, None, None, 10]  # 130 and -130 overflow a TINYINT
    assert keep("round(i, -1) = 100", data) == [False, True, False, False, False]
    many = {"i": pa.array([100] * 5_000 + [125] + [100] * 5_000, pa.int8())}
    result = evaluate("round(i, -1)", many)
    assert result[5_000] is None and result.count(None) == 1


def test_many_failing_rows_cost_a_bounded_number_of_evaluations() -> None:
    data = {"i": pa.array([125, 100] * 5_000, pa.int8())}
    result = evaluate("round(i, -1)", data)  # past the budget a failing part is NULL whole: fast, deterministic
    assert len(result) == 10_000 and result[0] is None and set(result) <= {None, 100}
    assert evaluate("round(i, -1)", data) == result


@pytest.mark.parametrize("sql", ["sqrt(location)", "location / 2", "pow(2, location)", "location % 2"])
def test_arithmetic_on_strings_is_a_type_error_even_without_rows(sql: str) -> None:
    empty = {name: value.slice(0, 0) if isinstance(value, pa.Array) else value for name, value in columns().items()}
    with pytest.raises(InvalidValue, match="expected a number, got string"):
        evaluate(sql, empty)


def test_in_list_on_timestamps_takes_timestamps_only() -> None:
    """Found by fuzzing: `ts IN (0.0)` raised AttributeError (a float has no ticks), a 500 instead of an error."""
    assert keep("ts IN (1704067200000, '2024-01-01 00:00:01')") == [True, True, False, False]
    for literal, shown in (("0.0", "0.0"), ("TRUE", "True")):
        with pytest.raises(InvalidValue, match=f"IN \\(...\\) on timestamp\\[ms\\]: {shown} is not a timestamp"):
            keep(f"ts IN (1, {literal})")
