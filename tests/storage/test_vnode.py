"""The table checkpoint (``tables.ckpt``) is written atomically, and a damaged one is rebuilt from the WAL's meta
entries (issue 13, item 4)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from faults import Faults

from walgate.storage.engine import Engine
from walgate.storage.vnode import CHECKPOINT


def make(tmp_path: Path, *, small_segments: bool = False) -> Engine:
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE db VGROUPS 1 WAL_RETENTION_PERIOD 0")
    e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    e.execute("CREATE TABLE db.plain (ts TIMESTAMP, v INT)")
    vnode = e.vnodes["db"][0]
    if small_segments:  # every append rolls a segment, so retention has sealed segments to delete
        vnode.wal.options = dataclasses.replace(vnode.wal.options, segment_bytes=64)
    for i in range(6):
        e.execute(f"INSERT INTO db.t{i} USING db.st TAGS ({i}) VALUES ({1000 + i}, {i})")
    return e


def tables(e: Engine) -> list[list[object]]:
    return [r[:1] + r[3:] for r in e.execute("SHOW TABLES", "db").rows]


def corrupt_checkpoint(tmp_path: Path) -> None:
    [path] = tmp_path.glob(f"db/*/vnode0/{CHECKPOINT}")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x20
    path.write_bytes(bytes(data))


def test_a_damaged_checkpoint_is_rebuilt_from_the_wal(tmp_path: Path):
    e = make(tmp_path)
    before = tables(e)
    e.close()
    corrupt_checkpoint(tmp_path)
    e = Engine.open(tmp_path)
    assert tables(e) == before
    [damage] = e.damage()
    assert damage.file.endswith(CHECKPOINT) and damage.action == "rebuilt" and "missing" not in damage.reason
    e.close()
    e = Engine.open(tmp_path)  # checkpointed again on close
    assert tables(e) == before and e.damage() == []
    e.close()


def test_the_report_says_when_retention_took_meta_entries_the_rebuild_needed(tmp_path: Path):
    e = make(tmp_path, small_segments=True)
    vnode = e.vnodes["db"][0]
    assert vnode.apply_retention(time.time() + 10) and vnode.wal.first_version > 0
    e.close()
    corrupt_checkpoint(tmp_path)
    e = Engine.open(tmp_path)
    [damage] = e.damage()
    assert f"retention deleted versions below {e.vnodes['db'][0].wal.first_version}" in damage.reason
    e.close()


def test_retention_deletes_nothing_when_the_checkpoint_cannot_be_written(tmp_path: Path):
    e = make(tmp_path, small_segments=True)
    vnode = e.vnodes["db"][0]
    segments = len(vnode.wal.segments)
    faults = Faults()
    with faults.active():
        faults.fail("write")
        assert not vnode.apply_retention(time.time() + 10)
    assert len(vnode.wal.segments) == segments and vnode.wal.first_version == 0
    before = tables(e)
    e.close()
    e = Engine.open(tmp_path)
    assert tables(e) == before and e.damage() == []
    e.close()
