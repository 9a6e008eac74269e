"""The meta stores' whole-file checks left for after an engine's open (``Engine.open(whole_stores=False)``, as the
gateway opens it; issue 23: a restart with 10 million subtables read every store whole before it served, 91 of its
104 s): a damaged store is still found, reported and rebuilt from the WAL once the checks run, losing no table; a
check can be stopped; a check of a store rebuilt meanwhile changes nothing."""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.storage.test_vnode import damaged_copy, make, rows, store_path, tables
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable
from walgate.storage.meta_store import META_STORE, MetaStore, OpenStores, TableDef, check


def checked(e: Engine) -> int:
    """Run the checks the open left, as the gateway does (each's run, then meta_checked); how many ran."""
    checks = e.meta_checks()
    for c in checks:
        e.meta_checked(c, c.run())
    assert e.meta_checks() == []  # handed out once
    return len(checks)


@pytest.mark.parametrize("seed", range(2))
def test_a_damaged_store_is_found_by_the_checks_after_the_open_and_loses_no_table(tmp_path: Path, seed: int):
    template = tmp_path / "template"
    e = make(template)
    before, before_rows = tables(e), rows(e)
    e.close()
    size = store_path(template).stat().st_size
    rng = random.Random(seed)
    cases = [("flip", at) for at in sorted(rng.sample(range(size), 12))]
    cases += [("truncate", rng.randrange(size)), ("zeros", 0), ("name", 0)]
    reported = 0
    for n, (op, at) in enumerate(cases):
        root = tmp_path / f"case{n}"
        if op == "name":  # a row whose definition is not its name's: only a whole read of the store finds it
            shutil.copytree(template, root)
            with sqlite3.connect(store_path(root)) as conn:
                conn.execute("UPDATE tables SET def = CAST('00000000 {}' AS BLOB) WHERE name = 't3'")
        else:
            damaged_copy(template, root, op, at)
        e = Engine.open(root, whole_stores=False)
        if op == "name":
            assert e.damage() == []  # not read at open
        assert checked(e) == 1
        assert tables(e) == before and rows(e) == before_rows, (op, at)
        for d in e.damage():
            assert d.file.endswith(META_STORE) and d.action == "rebuilt", (op, at)
        reported += bool(e.damage())
        if op != "flip":
            assert e.damage(), (op, at)
        e.close()
        e = Engine.open(root)  # written again on close, and sound whole
        assert tables(e) == before and e.damage() == []
        e.close()
    assert reported >= 3


def test_a_check_of_a_store_rebuilt_meanwhile_changes_nothing(tmp_path: Path):
    e = make(tmp_path)
    e.close()
    e = Engine.open(tmp_path, whole_stores=False)
    [c] = e.meta_checks()
    e.vnodes["db"][0].rebuild_store("a test's")
    e.meta_checked(c, "damage found in the store before its rebuild")
    assert [d.reason.split(";")[0] for d in e.damage()] == ["table meta store: a test's"]  # one rebuild, not two
    assert len(tables(e)) == 7
    e.close()


def test_a_check_stops_when_asked(tmp_path: Path):
    store = MetaStore.open(tmp_path / META_STORE, OpenStores())
    store.write({}, [TableDef(f"d{i}", "m", {"loc": f"room {i}"}, None, i + 1, 1_000 + i) for i in range(20_000)],
                20_001, 20_000, durable=True)
    assert check(store.path) is None
    with pytest.raises(StorageUnavailable, match="interrupt"):
        check(store.path, stopped=lambda: True)
    store.close()
