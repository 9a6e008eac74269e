"""meta.db's row format with the create version in its own column (issue 23, step 5): a store of the first format
(made by the last release writing it, ``meta_v1_datadir.py``) is migrated in place at its first writable open, in
one SQLite transaction that changes only the schema; a kill -9 at any point of it leaves a store that opens, migrates
and answers every table; a migration SQLite refuses leaves the old format working; a damaged old store ends in the
damage/rebuild path; a reader (``MetaReader``) reads both formats, never migrating."""

from __future__ import annotations

import logging
import os
import random
import shutil
import sqlite3
import tarfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from meta_v1_datadir import OLD_COMMIT, summary
from old_release import killed_when_paused, made_by

from walgate.storage import meta_store
from walgate.storage.engine import Engine
from walgate.storage.meta_reader import MetaReader
from walgate.storage.meta_store import META_STORE, check, has_version_column

HERE = Path(__file__).parent
FIXTURE = HERE / "meta_v1_datadir.tar.gz"


def unpack(tmp_path: Path) -> tuple[Path, list[Any]]:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "data", orjson.loads((tmp_path / "expected.json").read_bytes())


def stores(data: Path) -> list[Path]:
    found = sorted(data.glob(f"db/*/vnode*/{META_STORE}"))
    assert len(found) == 2
    return found


def versioned(path: Path) -> bool:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return has_version_column(conn)
    finally:
        conn.close()


def tables(e: Engine) -> list[Any]:
    return orjson.loads(orjson.dumps(summary(e)))


def check_migrated(data: Path, expected: list[Any]) -> None:
    """``data`` opens with every table the old code wrote, its stores migrated and sound, nothing reported."""
    e = Engine.open(data)
    try:
        assert tables(e) == expected and e.damage() == []
        e.execute("INSERT INTO db.fresh USING db.st TAGS (7, 'new') VALUES (5000, 1)")
        for v in e.vnodes["db"]:
            v.end_write()
        after = tables(e)
    finally:
        e.close()
    assert len(after) == len(expected) + 1
    for path in stores(data):
        assert versioned(path) and check(path) is None
    e = Engine.open(data)
    try:
        assert tables(e) == after and e.damage() == []
    finally:
        e.close()


def test_an_old_store_is_read_by_a_reader_then_migrated_at_open(tmp_path: Path):
    data, expected = unpack(tmp_path)
    assert not any(versioned(p) for p in stores(data))
    by_vnode: dict[int, dict[str, Any]] = {}
    for index, path in enumerate(stores(data)):  # a planner's reader of the old store, before any open
        names = [row[1] for row in expected if row[0] == index]
        with MetaReader.open(path, 1 << 40) as reader:
            by_vnode[index] = {n: [t.stable, t.tags, t.version, t.created_ts, t.dropped]
                               for n, t in reader.lookup([*names, "absent"]).items()}
    assert sorted(by_vnode[0]) != [] and sum(len(v) for v in by_vnode.values()) == len(expected)
    # (the vnode dirs are in index order: vnode0, vnode1)
    assert {(i, n): row for i, rows in by_vnode.items() for n, row in rows.items()} == {
        (r[0], r[1]): [r[2], r[3], r[4], r[5], r[6]] for r in expected}
    check_migrated(data, expected)  # (creates db.fresh after the migration)
    rows: dict[str, Any] = {}
    for path in stores(data):
        conn = sqlite3.connect(path)
        rows.update((name, version) for name, version in conn.execute("SELECT name, version FROM tables"))
        conn.close()
        with MetaReader.open(path, 1 << 40) as reader:  # both kinds of row: the old ones and db.fresh
            found = reader.lookup(rows)
            assert all(found[n].version == v for n, v in rows.items() if v is not None and n in found)
    assert rows.pop("fresh") is not None and set(rows.values()) == {None}
    assert sum(len(r) for r in by_vnode.values()) + 1 == len(rows) + 1


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to run the old release")
def test_a_store_made_by_the_old_release_migrates(tmp_path: Path):
    """The same, with a data dir the old release's own code writes now (the fixture is its frozen copy)."""
    data, expected = made_by(OLD_COMMIT, HERE / "meta_v1_datadir.py", tmp_path)
    assert not any(versioned(p) for p in stores(data))
    check_migrated(data, expected)


PAUSING = r"""
import sqlite3, sys, time
from pathlib import Path
from walgate.storage import meta_store
prefix, nth = sys.argv[2].rsplit(":", 1)
seen = [0]
def pause():
    print("paused", flush=True)
    time.sleep(600)
class Pausing(sqlite3.Connection):
    def execute(self, sql, *args):
        cursor = super().execute(sql, *args)
        if sql.startswith(prefix):
            seen[0] += 1
            if seen[0] == int(nth):
                pause()
        return cursor
class Sqlite:
    def __getattr__(self, name):
        return getattr(sqlite3, name)
    @staticmethod
    def connect(*args, **kwargs):
        return sqlite3.connect(*args, factory=Pausing, **kwargs)
meta_store.sqlite3 = Sqlite()
"""
"""A child's start (argv: the data dir, then ``prefix:n``): the meta stores' connections pause (print ``paused``,
then sleep) after the ``n``-th statement starting with ``prefix`` that they ran."""
CHILD = PAUSING + r"""
from walgate.storage.engine import Engine
Engine.open(Path(sys.argv[1]))
pause()
"""


@pytest.mark.parametrize("point", ["BEGIN IMMEDIATE:1", "ALTER TABLE:1", "COMMIT:1", "ALTER TABLE:2", "opened:1"])
def test_a_kill_at_any_point_of_the_migration_leaves_a_store_that_migrates(tmp_path: Path, point: str):
    """A real kill -9 of a process migrating the stores: inside the first store's transaction (before and after its
    schema change), right after its commit, inside the second store's, and once the engine is open."""
    data, expected = unpack(tmp_path)
    killed_when_paused(CHILD, str(data), point)
    migrated = [versioned(p) for p in stores(data)]
    assert migrated == {"BEGIN IMMEDIATE:1": [False, False], "ALTER TABLE:1": [False, False],
                        "COMMIT:1": [True, False], "ALTER TABLE:2": [True, False],
                        "opened:1": [True, True]}[point]
    check_migrated(data, expected)


def refusing(prefix: str, code: int, message: str) -> Any:
    """``sqlite3`` whose connections' statements starting with ``prefix`` fail as SQLite fails a write the disk
    refuses (``code``, e.g. SQLITE_FULL for ENOSPC, SQLITE_IOERR for EIO; ``message``), every other one taken."""

    class Refusing(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            self._refused(sql)
            return super().execute(sql, *args)

        def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
            self._refused(sql)
            return super().executemany(sql, *args)

        def _refused(self, sql: str) -> None:
            if sql.startswith(prefix):
                exc = sqlite3.OperationalError(message)
                exc.sqlite_errorcode = code
                raise exc

    class Sqlite:
        def __getattr__(self, name: str) -> Any:
            return getattr(sqlite3, name)

        @staticmethod
        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            return sqlite3.connect(*args, factory=Refusing, **kwargs)

    return Sqlite()


@pytest.mark.parametrize("code, message", [(sqlite3.SQLITE_FULL, "database or disk is full"),
                                           (sqlite3.SQLITE_IOERR, "disk I/O error")])
def test_a_refused_migration_leaves_the_old_format_working_and_the_next_open_migrates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int, message: str):
    data, expected = unpack(tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(meta_store, "sqlite3", refusing("ALTER TABLE", code, message))  # (the migration's one write)
        with caplog.at_level(logging.WARNING, "walgate.meta_store"):
            e = Engine.open(data)
        assert f"keeps its old row format until a next open: {message}" in caplog.text
        assert tables(e) == expected and e.damage() == []
        assert not any(v.store.versioned for v in e.vnodes["db"])
        for i in range(5):  # written in the old format
            e.execute(f"INSERT INTO db.late{i} USING db.st TAGS ({i}, 'late') VALUES (6000, {i})")
        for v in e.vnodes["db"]:
            v.end_write()
            assert v.store.covered == v.meta_version
        old_format = tables(e)
        e.close()
    assert not any(versioned(p) for p in stores(data)) and all(check(p) is None for p in stores(data))
    e = Engine.open(data)
    try:
        assert tables(e) == old_format and len(old_format) == len(expected) + 5 and e.damage() == []
    finally:
        e.close()
    assert all(versioned(p) and check(p) is None for p in stores(data))


def test_flipped_and_truncated_old_stores_end_in_the_rebuild_path(tmp_path: Path):
    """Whatever a byte of an old ``meta.db`` becomes, or wherever it is cut: the engine opens (the store migrated,
    or reported and rebuilt from the WAL) and answers every table; nothing else is raised."""
    template, expected = unpack(tmp_path / "template")
    path = stores(template)[0]
    size = path.stat().st_size
    rng = random.Random(23)
    cases = [("flip", at) for at in sorted(rng.sample(range(size), 24))] + [
        ("truncate", at) for at in (0, 100, rng.randrange(size))]
    rebuilt = 0
    for n, (op, at) in enumerate(cases):
        data = tmp_path / f"case{n}"
        shutil.copytree(template, data)
        case = stores(data)[0]
        if op == "flip":
            raw = bytearray(case.read_bytes())
            raw[at] ^= 0x10
            case.write_bytes(bytes(raw))
        else:
            os.truncate(case, at)
        e = Engine.open(data)
        try:
            assert tables(e) == expected, (op, at)
            damage = e.damage()
            assert all(d.action == "rebuilt" and d.file.endswith(META_STORE) for d in damage), (op, at)
            rebuilt += bool(damage)
        finally:
            e.close()
        assert versioned(case) and check(case) is None, (op, at)
    assert rebuilt


def test_a_reader_open_across_the_migration_answers_from_its_snapshot(tmp_path: Path):
    """A planner's reader that opened the old store before a node migrated it and wrote new rows still answers
    from what it first read (the old rows, none of the new), and a reader opened after answers both kinds."""
    data, expected = unpack(tmp_path)
    path = stores(data)[0]
    names = [row[1] for row in expected if row[0] == 0]
    with MetaReader.open(path, 1 << 40) as before:
        first = before.lookup(names[:3])
        e = Engine.open(data)  # migrates both stores
        try:
            created = [f"fresh{i}" for i in range(40)]
            for name in created:
                e.execute(f"INSERT INTO db.{name} USING db.st TAGS (1, 'f') VALUES (7000, 1)")
            for v in e.vnodes["db"]:
                v.end_write()
            assert versioned(path)
            assert before.lookup([*names, *created]) == before.lookup(names) and len(before.lookup(names)) == len(names)
            assert before.lookup(names[:3]) == first
            with MetaReader.open(path, e.vnodes["db"][0].meta_version) as after:
                found = after.lookup([*names, *created])
            assert {n: found[n] for n in names} == before.lookup(names)
            assert 0 < len(found) - len(names) < len(created)  # the new ones of vnode 0 (the others are in vnode 1)
        finally:
            e.close()
