"""The data dir's format: recorded in ``walgate.json``, a newer one refused with a clear message, and format 1
(walgate up to commit 5852923) migrated once, crash-safely, with everything in it (issue 13, "The data dir's
format")."""

from __future__ import annotations

import os
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from format1_datadir import OLD_COMMIT, summary
from old_release import made_by

from walgate.storage import datadir, lines
from walgate.storage.coordinator_partitions import DEFAULT_PARTITIONS
from walgate.storage.damage import DamageLog
from walgate.storage.datadir import UnsupportedFormat
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError
from walgate.storage.names import is_db_id, is_topic_id
from walgate.storage.sql import ast

HERE = Path(__file__).parent
FIXTURE = HERE / "format1_datadir.tar.gz"
CURRENT = {"format": datadir.FORMAT, "coordinator_partitions": DEFAULT_PARTITIONS}
NAMES = ("power", "odd-name", "orders", "topic_meters", "topic_db", "meters", "offsets.jsonl", "tables.json")


def unpack(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "data", orjson.loads((tmp_path / "expected.json").read_bytes())


def fmt(data: Path) -> Any:
    """The record of ``walgate.json`` (one checksummed line)."""
    return lines.decode((data / "walgate.json").read_bytes().removesuffix(b"\n"))


def check_migrated(data: Path, expected: dict[str, Any]) -> None:
    e = Engine.open(data)
    try:
        assert summary(e) == expected
        assert e.producer_ids.allocate() > 0  # producer id 0 was handed out by the old release
    finally:
        e.close()
    assert fmt(data) == CURRENT
    files = [str(p.relative_to(data)) for p in data.rglob("*")]
    assert not [f for f in files if any(n in f for n in NAMES)]  # no name is a path any more
    assert not (data / "catalog.jsonl").exists() and not (data / "producer_ids.json").exists()
    assert not list(data.glob("db/*/vnode*/commits.log")) and not (data / "groups.log").exists()  # format 2's
    assert sorted(p.name for p in (data / "coordinator").iterdir()) == ["offsets-0.log"]
    assert all(is_db_id(p.name) for p in (data / "db").iterdir())
    assert all(is_topic_id(p.stem) for p in data.glob("db/*/vnode*/topics/*"))


def test_a_new_data_dir_records_its_format(tmp_path: Path):
    Engine.open(tmp_path).close()
    assert fmt(tmp_path) == CURRENT


def test_a_newer_format_is_refused_with_a_clear_message(tmp_path: Path):
    (tmp_path / "walgate.json").write_bytes(lines.encode({"format": 99}))  # verified: a newer release wrote it
    with pytest.raises(UnsupportedFormat, match=r"has format 99, written by a newer walgate; this release reads") as info:
        Engine.open(tmp_path)
    assert isinstance(info.value, StorageError)  # the CLI answers StorageError with one line, no traceback
    assert os.listdir(tmp_path) == ["walgate.json"]


def test_a_format1_data_dir_migrates_with_everything_in_it(tmp_path: Path):
    data, expected = unpack(tmp_path)
    check_migrated(data, expected)
    check_migrated(data, expected)  # once: the second start finds format 3


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to run the format-1 release")
def test_a_data_dir_made_by_the_format1_release_migrates(tmp_path: Path):
    """The same, with a data dir the old release's own code writes now (the fixture above is its frozen copy)."""
    data, expected = made_by(OLD_COMMIT, HERE / "format1_datadir.py", tmp_path)
    assert (data / "catalog.jsonl").exists() and not (data / "walgate.json").exists()
    check_migrated(data, expected)


class Crash(BaseException):
    """A kill -9 at this point of the migration."""


def crash_after(monkeypatch: pytest.MonkeyPatch, n: int) -> list[int]:
    """Make the ``n``-th file system change from now (write, rename, replace, unlink) raise :class:`Crash`."""
    seen = [0]

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def op(*args: Any, **kwargs: Any) -> Any:
            seen[0] += 1
            if seen[0] == n:
                raise Crash()
            return real(*args, **kwargs)
        return op

    for name in ("write", "rename", "replace", "unlink"):
        monkeypatch.setattr(os, name, wrap(getattr(os, name)))
    return seen


def test_a_kill_at_any_point_of_the_migration_leaves_a_data_dir_that_migrates(tmp_path: Path):
    n = 0
    while True:
        n += 1
        data, expected = unpack(tmp_path / str(n))
        with pytest.MonkeyPatch.context() as mp:
            crash_after(mp, n)
            try:
                datadir.prepare(data, DamageLog(data))
                crashed = False
            except Crash:
                crashed = True
        check_migrated(data, expected)
        if not crashed:
            break
        shutil.rmtree(tmp_path / str(n))
    assert n > 30  # every rename, conversion and removal was a crash point


def test_a_format1_database_named_as_a_path_is_never_followed(tmp_path: Path):
    data = tmp_path / "data"
    (data / "db").mkdir(parents=True)
    outside = tmp_path / "x" / "vnode0"  # where format 1 put `../../x`: outside the data dir
    outside.mkdir(parents=True)
    (outside / "sentinel").write_text("not walgate's")
    options = {"VGROUPS": 1, "PRECISION": "ms", "WAL_LEVEL": 1, "WAL_FSYNC_PERIOD": 3000, "WAL_RETENTION_PERIOD": -1,
               "WAL_RETENTION_SIZE": -1, "WAL_SEGMENT_SIZE": 64}
    (data / "catalog.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [
        {"op": "create_db", "name": "../../x", "options": options, "created_ms": 0},
        {"op": "create_db", "name": "ok", "options": options, "created_ms": 0},
    ]))
    e = Engine.open(data)
    [damage] = e.damage()
    assert damage.action == "not migrated" and "../../x" in damage.reason
    e.ddl.drop_database(ast.DropDatabase("../../x"), None)
    assert sorted(e.catalog.databases) == ["ok"]
    e.close()
    assert (outside / "sentinel").read_text() == "not walgate's"  # DROP removed nothing outside db/


def test_a_damaged_format_file_is_reported_and_the_format_found_from_the_files(tmp_path: Path):
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE d VGROUPS 1")
    e.close()
    (tmp_path / "walgate.json").write_bytes(b"\x00{garbage")
    e = Engine.open(tmp_path)
    assert "d" in e.catalog.databases and [d.file for d in e.damage()] == ["walgate.json"]
    e.close()
    assert fmt(tmp_path) == CURRENT


@pytest.mark.parametrize("bit", range(8))
def test_a_flipped_bit_in_the_format_file_is_reported_never_read_as_a_newer_format(tmp_path: Path, bit: int):
    """The sweep's "flip walgate.json": a "3" read as "7" refused to start as "written by a newer walgate"."""
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE d VGROUPS 1")
    e.close()
    data = bytearray((tmp_path / "walgate.json").read_bytes())
    data[data.index(b'"format":') + 9] ^= 1 << bit  # the format digit
    (tmp_path / "walgate.json").write_bytes(bytes(data))
    e = Engine.open(tmp_path)
    assert "d" in e.catalog.databases
    [damage] = e.damage()
    assert damage.file == "walgate.json" and (tmp_path / damage.kept).read_bytes() == bytes(data)
    e.close()
    assert fmt(tmp_path) == CURRENT


def test_a_new_data_dir_has_its_producer_id_file(tmp_path: Path):
    Engine.open(tmp_path).close()
    assert lines.decode((tmp_path / "producer_ids.log").read_bytes()[:-1]) == {"next_block": 0}
