"""Fuzzing what another node answers for its part of a SELECT the node asked merges as JSON (walgate.gateway.
sql_forward: ``select_here``'s check of the answer, ``merge_rows``; the Arrow parts: tests/storage/
test_fuzz_select_merge.py): any JSON value under any status, and rows of any shape, order-less values and other
columns beside a good answer.

Invariants, per input: an answer ``select_here`` keeps is one the node asked can use without an exception (an
error's ``code`` an integer, as ``_merge_select`` reads it; a 200's rows merged, sorted or not, by ``merge_rows``),
which answers them or raises StorageUnavailable (different columns: the 503 "retry the statement"); never another
exception (a 500 and a traceback). Seeded and bounded (tests/storage/fuzzing.py's settings).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from walgate.gateway.sql_forward import HERE, SCAN, _walgate_answer, merge_rows
from walgate.storage.errors import StorageUnavailable

sys.path.insert(0, str(Path(__file__).parents[1] / "storage"))
from fuzzing import fuzz_settings  # noqa: E402

GOOD = {"code": 0, "column_meta": [["name", "VARCHAR", 192]], "data": [["d1"], ["d0"]], "rows": 2}
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                         max_size=3), max_leaves=12)
ANSWERS = st.one_of(
    JSON,
    st.fixed_dictionaries({}, optional={"code": JSON | st.integers(), "desc": JSON, "column_meta": JSON,
                                        "data": JSON | st.lists(st.lists(SCALARS, max_size=3), max_size=4),
                                        "rows": JSON, "outcome": JSON}),
    st.lists(st.lists(SCALARS, max_size=2), max_size=4).map(lambda rows: GOOD | {"data": rows}),
    st.sampled_from([GOOD | {"column_meta": [["name", "VARCHAR", 64]]}, GOOD | {"data": [[1], ["a"], [None]]},
                     {"code": "0x2603", "desc": "x"}, {"code": True}, {"code": 1.5}, []]))


@fuzz_settings(500)
@given(st.sampled_from([200, 400, 403, 500, 503, 204]), ANSWERS, st.sampled_from([HERE, SCAN]), st.booleans(),
       st.none() | st.integers(0, 3))
@example(200, GOOD | {"data": [[1], ["a"]]}, HERE, True, None).via("rows whose values do not order: TypeError")
@example(400, {"code": "0x2603"}, HERE, False, None).via("a code that is no integer: int() ValueError")
@example(200, {"code": 0, "data": [[1]]}, HERE, False, None).via("no column_meta: KeyError")
def test_an_answer_kept_is_merged_or_refused_as_retriable(status: int, answered: Any, part: str, ordered: bool,
                                                          limit: int | None) -> None:
    if not _walgate_answer(status, answered, part):
        return
    assert isinstance(answered, dict)
    int(answered.get("code", 0))  # as _merge_select reads an error's code
    str(answered.get("desc", ""))
    if status != 200:
        return
    for answers in ([answered], [GOOD, answered], [answered, GOOD]):
        try:
            merged = merge_rows(limit, answers, ordered)
        except StorageUnavailable as exc:
            assert "different columns" in exc.message
            continue
        assert merged["rows"] == len(merged["data"]) <= sum(len(a["data"]) for a in answers)
