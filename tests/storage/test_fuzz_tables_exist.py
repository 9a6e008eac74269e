"""Fuzzing the question which tables exist (``Store.tables_exist``, which a node answers another at
``/cluster/v1/tables``: gateway/sql_forward.py): generated ``(database, table)`` pairs against the seeded engine are
answered a bool per pair, true exactly for the normal tables and subtables there (never a supertable), or a
StorageError (an unknown database), never another exception, and change nothing. Seeded and bounded
(fuzzing.fuzz_settings)."""

from __future__ import annotations

from pathlib import Path

from fuzzing import fuzz_settings, seeded_engine, state
from hypothesis import given
from hypothesis import strategies as st

from walgate.storage.errors import NotFound

TABLES = {("x", "a"), ("x", "b"), ("x", "nt"), ("x", "c"), ("y", "d")}  # fuzzing.SEED's (x.m, x.alt, y.m: stables)
DATABASES = st.sampled_from(["x", "y", "nosuch", ""]) | st.text(max_size=4)
NAMES = st.sampled_from(["a", "b", "nt", "c", "d", "m", "alt", "A"]) | st.text(max_size=12)


def test_tables_exist(tmp_path: Path) -> None:
    engine = seeded_engine(tmp_path)
    before = state(engine)

    @fuzz_settings(300)
    @given(st.lists(st.tuples(DATABASES, NAMES), max_size=6))
    def run(tables: list[tuple[str, str]]) -> None:
        try:
            exist = engine.store.tables_exist(tables)
        except NotFound:
            assert any(db not in ("x", "y") for db, _ in tables)
            return
        assert exist == [(db, name) in TABLES for db, name in tables]

    try:
        run()
        assert state(engine) == before
    finally:
        engine.close()
