"""Meta stores hold a bounded number of open connections (issue 23): a node with thousands of vnodes (a Kafka-native
topic of 400 partitions) must not run out of descriptors, and a store whose connection was closed reads and writes
as before."""

from __future__ import annotations

import os
from pathlib import Path

from walgate.storage.meta_store import MetaStore, OpenStores, TableDef


def _open_meta_fds(root: Path) -> int:
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        fds += target.startswith(str(root))
    return fds


def _table(i: int) -> TableDef:
    return TableDef(f"d{i}", "meters", {"loc": f"room {i}"}, None, i + 1, 1_000 + i)


def test_at_most_capacity_stores_keep_their_connection_and_closed_ones_still_read_and_write(tmp_path: Path) -> None:
    stores = OpenStores(capacity=3)
    metas = []
    for i in range(12):
        meta = MetaStore.open(tmp_path / f"meta{i}.db", stores)  # (this test's own bound, not the process's)
        meta.write([], [_table(i)], covered=i + 2, live=1)
        metas.append(meta)
        assert len(stores) <= 3
    assert _open_meta_fds(tmp_path) <= 3 * 3  # meta.db, -wal, -shm of each open store (12 * 3 without the bound)
    for i, meta in enumerate(metas):  # every store, most of them closed meanwhile: read back, written again
        assert meta.get(f"d{i}") == _table(i) and meta.covered == i + 2
        meta.write([], [_table(100 + i)], covered=i + 3, live=2)
        assert [t.name for t in meta.all()] == [f"d{i}", f"d{100 + i}"]
        assert len(stores) <= 3
    reading = metas[0].all()
    assert next(reading).name == "d0"  # a read in progress: its connection is not closed under it
    for meta in metas[1:]:
        assert meta.get("nothing") is None
    assert [t.name for t in reading] == ["d100"]
    for meta in metas:
        meta.close()
    assert len(stores) == 0 and _open_meta_fds(tmp_path) == 0
    again = MetaStore.open(tmp_path / "meta5.db")  # what was written is on disk
    assert again.get("d105") == _table(105) and again.covered == 8
    again.close()
