"""Fuzzing JSON rows produced into TDengine topics: ``Engine.write_json_rows`` (see fuzzing.py).

Each record is (subtable name, fields, record timestamp ms) as the Produce handler passes it after ``json.loads``:
names of every JSON type (the handler refuses non-strings too, but the engine must not rely on it), field
objects naming columns, tags and unknown keys with values of every JSON type (nested objects and lists, integers
past every range, NaN and infinities as Python's json module reads them, strings that are dates past year 9999),
and record timestamps over all of int64.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fuzzing import Attack, fuzz_settings, seeded_engine
from hypothesis import given
from hypothesis import strategies as st

KEYS = ["ts", "v", "f", "s", "b", "n", "u", "ti", "fl", "t", "loc", "g", "nosuch", "tbname", "TS", "", "\x00"]
json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=20),
        st.sampled_from([0, 1, -1, 127, 128, 2**31, 2**63, 2**64, 1700000000000, 253402300800000, -62135596800001,
                         "1700000000000", "2023-11-14T22:13:20Z", "10000-01-01T00:00:00Z", "true", "1.5", "1e309",
                         "x" * 17, "{\"k\":1}", 3.4e38, 3.5e38]),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=5,
)
_odd_names = [st.sampled_from(["`q`", "a/../b", "n\x00", "x" * 200, "", "\ud800"]), st.text(max_size=10), json_values]
names = st.integers(0, 9).flatmap(  # mostly names that exist or may: the rows then reach the typing of values
    lambda i: st.sampled_from(["a", "b", "d1", "d2", "ü", "nt", "c"]) if i < 7 else _odd_names[i - 7]
)
plausible = st.sampled_from([1, -5, 2.5, "7", "2023-11-14T22:13:20Z", 1700000000123, True, None, "text", 255])
records = st.tuples(
    names,
    st.dictionaries(st.integers(0, 3).flatmap(lambda i: st.sampled_from(KEYS if i == 0 else KEYS[:11])),
                    st.integers(0, 3).flatmap(lambda i: json_values if i == 0 else plausible), max_size=5),
    st.integers(0, 3).flatmap(lambda i: st.integers(-(2**63), 2**63 - 1) if i == 0 else st.integers(0, 2**42)),
)


def test_json_rows(tmp_path: Path, caplog: Any) -> None:
    attack = Attack("json rows", seeded_engine(tmp_path), caplog)

    @fuzz_settings(1500)
    @given(rows=st.lists(records, min_size=1, max_size=4), stable=st.sampled_from(["m", "m", "m", "alt", "nosuch", "nt"]),
           db=st.sampled_from(["x", "x", "x", "y"]))
    def run(rows: list[tuple[Any, Any, int]], stable: str, db: str) -> None:
        attack.feed(lambda engine: engine.write_json_rows(db, stable, rows))

    run()
    attack.reopen(tmp_path)
