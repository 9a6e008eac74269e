"""Plan, then apply (walgate.storage.write_plan, Ingest.apply): a write planned against a snapshot the way an ingest
worker plans it (the catalog copied, only the tables the node looked up known, everything pickled both ways) writes
the same WAL bytes as the same write planned and written at once on the storage thread; and a plan whose databases,
supertables or tables changed between plan and apply is planned again at apply, so it gets today's answer: the
rows written against the new schema, or today's refusal with nothing written. Ordering, not timing: each test
plans, then commits the conflicting change, then applies."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.storage.write_requests import NOW, REQUESTS, marks, planned, seeded_engine, since, wal
from walgate.storage.engine import Engine
from walgate.storage.entry import decode_entry
from walgate.storage.errors import InvalidValue, NotFound, StorageError
from walgate.storage.write_plan import CsvRequest, InsertRequest, PreparedWrite


def creations(engine: Engine, name: str) -> int:
    return sum(1 for raw in wal(engine) if (m := decode_entry(raw).meta) is not None
               and m.get("op") == "create_table" and m.get("name") == name)


def count(engine: Engine, table: str) -> int:
    return int(engine.execute(f"SELECT COUNT(*) FROM {table}").rows[0][0])




def refused_as_today(engine: Engine, prepared: PreparedWrite, request: CsvRequest, error: StorageError) -> None:
    """Applying ``prepared`` (``request`` planned before a conflicting change) plans it again and refuses it with
    ``error``, as the same body sent now is refused, writing nothing."""
    before = wal(engine)
    with pytest.raises(type(error)) as today:
        engine.write_csv(request.db, request.body, table=request.table, stable=request.stable)
    with pytest.raises(type(error)) as refused:
        engine.apply_write(prepared, request)
    assert refused.value.message == today.value.message == error.message
    assert engine.ingest.replans == 1 and wal(engine) == before


def test_a_plan_made_like_a_workers_writes_what_a_plan_made_here_writes(tmp_path: Path) -> None:
    here, elsewhere = seeded_engine(tmp_path / "here"), seeded_engine(tmp_path / "elsewhere")
    start = marks(here)
    assert since(here, [0] * len(start)) == since(elsewhere, [0] * len(start))
    for request in REQUESTS:
        assert here.ingest.write(request) == elsewhere.apply_write(planned(elsewhere, request), request)
        assert since(here, start) == since(elsewhere, start)
    assert len(since(here, start)) > len(REQUESTS)
    assert elsewhere.ingest.replans == 0
    assert creations(elsewhere, "new1") == creations(elsewhere, "new2") == 1


def test_a_plan_whose_table_was_dropped_is_refused_as_today_and_writes_nothing(tmp_path: Path) -> None:
    engine = seeded_engine(tmp_path / "data")
    request = REQUESTS[3]  # into the normal table x.nt
    assert isinstance(request, CsvRequest)
    prepared = planned(engine, request)
    engine.execute("DROP TOPIC normal")
    engine.execute("DROP TABLE x.nt")
    refused_as_today(engine, prepared, request, NotFound("Table does not exist: x.nt"))


def test_a_plan_whose_supertable_was_altered_is_planned_again_against_the_new_columns(tmp_path: Path) -> None:
    engine = seeded_engine(tmp_path / "data")
    request = InsertRequest("INSERT INTO x.a (ts, v) VALUES (1700000000100, 5) "
                            "x.new1 USING x.m TAGS (4, 'la') (ts, v) VALUES (1700000000101, 6) (1700000000102, 7)",
                            None, NOW)
    prepared = planned(engine, request)
    engine.execute("ALTER STABLE x.m ADD COLUMN extra INT")
    assert engine.apply_write(prepared, request) == 3
    assert engine.ingest.replans == 1
    assert engine.execute("SELECT v, extra FROM x.new1 ORDER BY ts").rows == [[6, None], [7, None]]


def test_a_measurement_created_meanwhile_is_planned_again_and_widened(tmp_path: Path) -> None:
    engine = seeded_engine(tmp_path / "data")
    request = REQUESTS[1]  # creates the supertable x.fresh (fields x, y)
    prepared = planned(engine, request)
    engine.write_lines("x", b"fresh,k=c x=5,z=1i 1700000000500000000\n")  # creates it first, with z
    assert engine.apply_write(prepared, request) == 4
    assert engine.ingest.replans == 1
    assert [c[0] for c in engine.execute("DESCRIBE x.fresh").rows][:5] == ["_ts", "x", "z", "y", "k"]
    assert count(engine, "x.fresh") == 1 + 4


def test_a_subtable_created_meanwhile_is_written_not_created_twice(tmp_path: Path) -> None:
    engine = seeded_engine(tmp_path / "data")
    request = REQUESTS[2]  # creates x.new2
    prepared = planned(engine, request)
    engine.write_csv("x", b"tbname,ts,v,t,loc\nnew2,1700000000600,9,5,ny\n", stable="m")
    assert engine.apply_write(prepared, request) == 3
    assert engine.ingest.replans == 0  # the same supertable: the plan holds, without its creation
    assert creations(engine, "new2") == 1 and count(engine, "x.new2") == 3


def test_a_subtable_created_meanwhile_under_another_supertable_is_refused_as_today(tmp_path: Path) -> None:
    engine = seeded_engine(tmp_path / "data")
    request = REQUESTS[2]
    assert isinstance(request, CsvRequest)
    prepared = planned(engine, request)
    engine.execute("CREATE TABLE x.new2 USING x.alt TAGS (1, 'g')")
    refused_as_today(engine, prepared, request, InvalidValue("CSV line 3: table new2 is not a subtable of m"))
