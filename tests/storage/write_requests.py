"""Write requests and helpers shared by the tests of planning a write apart from applying it
(tests/storage/test_write_plan.py, tests/gateway/test_ingest_workers.py)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from tests.storage.clocks import ManualClock
from tests.storage.fuzzing import SEED
from walgate.storage import write_plan
from walgate.storage.engine import Engine
from walgate.storage.stored_tables import StoredTables
from walgate.storage.write_plan import CsvRequest, InsertRequest, LinesRequest, NeedTables, PreparedWrite, WriteRequest

NOW = 1_700_000_100_000_000_000


def seeded_engine(path: Path) -> Engine:
    """fuzzing's seeded engine, on a clock that stands still: two of them write the same bytes."""
    engine = Engine.open(path, clock=ManualClock())
    for sql in SEED:
        engine.execute(sql)
    return engine


def planned(engine: Engine, request: WriteRequest) -> PreparedWrite:
    """``request`` planned as a worker plans it: against a pickled snapshot (its tables read from the vnodes' stores,
    and those it asked for looked up by the node)."""
    keys: list[tuple[str, str]] = []
    while True:
        snapshot = pickle.loads(pickle.dumps(engine.ingest.worker_snapshot(keys)))
        try:
            prepared = write_plan.plan(snapshot, pickle.loads(pickle.dumps(request)))
        except NeedTables as exc:
            assert exc.keys and not set(exc.keys) & set(keys)
            keys += exc.keys
            continue
        finally:
            assert isinstance(snapshot.tables, StoredTables)
            snapshot.tables.close()
        copy = pickle.loads(pickle.dumps(prepared))
        assert isinstance(copy, PreparedWrite)
        return copy


def wal(engine: Engine) -> list[Any]:
    """Every entry of every vnode WAL (version, kind, bytes...)."""
    return [raw for db in sorted(engine.catalog.databases) for vnode in engine.vnodes[db]
            for raw in vnode.wal.read_from(0)]


def since(engine: Engine, start: list[int]) -> list[Any]:
    """The entries each vnode's WAL holds from ``start`` (its next version then, per vnode in :func:`marks` order)."""
    vnodes = [vnode for db in sorted(engine.catalog.databases) for vnode in engine.vnodes[db]]
    return [raw for vnode, first in zip(vnodes, start) for raw in vnode.wal.read_from(first)]


def marks(engine: Engine) -> list[int]:
    return [vnode.wal.next_version for db in sorted(engine.catalog.databases) for vnode in engine.vnodes[db]]


REQUESTS: list[WriteRequest] = [
    InsertRequest("INSERT INTO x.a VALUES (1700000000100, 5, 1.5, 's', true, 'n', 1, 2, 3.5) "
                  "x.new1 USING x.m TAGS (4, 'la') (ts, v) VALUES (1700000000101, 6) (1700000000102, 7) "
                  "x.nt VALUES (1700000000103, 8, 'eight') x.c USING x.alt TAGS (9, 'h') VALUES (1700000000104, 9, 'n')",
                  None, NOW),
    LinesRequest("x", b"fresh,k=a x=1,y=\"s\" 1700000000201000000\nfresh,k=b x=2 1700000000202000000\n"
                      b"fresh,k=a x=3\nfresh,k=c x=4 1700000000203000000\n", "ns", NOW),
    CsvRequest("x", b"tbname,ts,v,t,loc\na,1700000000300,1,,\nnew2,1700000000301,2,5,ny\nnew2,1700000000302,3,5,ny\n",
               None, "m", NOW),
    CsvRequest("x", b"ts,v,s\n1700000000400,4,four\n1700000000401,5,five\n", "nt", None, NOW),
    LinesRequest("x", b"fresh,k=a x=5,w=1i 1700000000204000000\nfresh,k=d x=6\n", "ns", NOW),  # widens x.fresh
]
