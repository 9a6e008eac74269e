"""A vnode of a database of one copy whose vgroup a move made replicated (issue 26, docs/cluster.md "Moving
replicas"): its WAL takes the group-commit settings as the ``place_vgroup`` record applies (``Vnode.reconfigure``),
and what it had appended without syncing is noted for the next group sync at once, so its visible version (durable
only, from then on) does not wait for a later write to come back to what it served before."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from walgate.storage.catalog import DB_DEFAULTS, DatabaseDef
from walgate.storage.durability import Unsynced
from walgate.storage.vnode import Vnode
from walgate.storage.wal import KIND_DATA


def test_a_moved_one_copy_vnode_commits_in_groups_and_syncs_what_it_had_served(tmp_path: Path) -> None:
    db = DatabaseDef("d", {**DB_DEFAULTS, "VGROUPS": 1}, 0, "d0", replicas=((1,),))
    ledger = Unsynced(lambda _owner: None)
    vnode = Vnode.open(db, 0, tmp_path / "vnode0", unsynced=ledger)
    try:
        wal = vnode.wal
        assert not db.replicated(0) and not wal.group_commit and vnode.epochs.single_node
        for i in range(3):
            wal.append([(KIND_DATA, 1, i, b"row %d" % i)])
        assert wal.visible_version == 3 and ledger.take() == []  # (WAL_LEVEL 1: served unsynced)

        moved = replace(db, placed_anew={0: (2, 1)})  # (the record of a move to node 2: the union)
        assert moved.replicated(0) and moved.replication_factor == 1
        vnode.reconfigure(moved)
        assert wal.group_commit
        assert ledger.take() == [(wal, 3)]  # (without the note: nothing to sync until the next write)
        sync = wal.take_sync()
        assert sync is not None
        sync.run()
        sync.done()
        assert wal.visible_version == 3
    finally:
        vnode.wal.close()
