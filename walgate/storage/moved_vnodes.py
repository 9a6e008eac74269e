"""The files of a vnode this node no longer holds after a replica move (issue 26, docs/cluster.md "Moving replicas"),
deleted so that a kill -9 at any point leaves what the next start finishes.

The order of operations (:meth:`Engine.drop_moved_vnode <walgate.storage.engine.Engine.drop_moved_vnode>`):

1. the catalog record placing the vgroup on other nodes is durable in ``catalog.log`` (it was applied), and the
   replica manager no longer leads or follows the vnode (:mod:`walgate.gateway.replicas`);
2. the vnode is closed and its topics' offset indexes and producer state forgotten (memory only);
3. ``vnode<i>/`` is renamed ``vnode<i>.deleted/`` and the database's directory fsynced: from here on no open finds
   it, so a vnode is never opened half deleted (:func:`delete_vnode_dir`);
4. ``vnode<i>.deleted/`` is removed.

Opening a database placed by the cluster's catalog (:meth:`Store.open_database
<walgate.storage.store.Store.open_database>`) first runs :func:`remove_leftovers`: step 4 of every ``*.deleted/``
(a crash during it), and steps 3-4 of every ``vnode<i>/`` the catalog does not place here (a crash between steps 1
and 3), so a start after a crash at any step comes up as if the delete had finished.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Collection
from pathlib import Path

from walgate.storage.fileio import SyncLatency, fsync_dir

__all__ = ["DELETED", "delete_vnode_dir", "remove_leftovers"]

DELETED = ".deleted"
"""The suffix of a vnode directory being deleted (step 3 done)."""
_VNODE_DIR = re.compile(r"vnode(\d+)")


def delete_vnode_dir(vnode_dir: Path, syncs: SyncLatency) -> None:
    """Steps 3 and 4 of the module docstring for the (closed) vnode directory ``vnode_dir``; nothing when it is
    gone already. OSError when the disk refuses (a start finishes it)."""
    gone = vnode_dir.with_name(vnode_dir.name + DELETED)
    shutil.rmtree(gone, ignore_errors=True)  # (a crash's leftover of an earlier move of this vgroup)
    try:
        os.replace(vnode_dir, gone)
    except FileNotFoundError:
        return
    fsync_dir(vnode_dir.parent, syncs=syncs)
    shutil.rmtree(gone)


def remove_leftovers(db_dir: Path, placed: Collection[int], syncs: SyncLatency) -> list[str]:
    """Finish every delete a crash left in database directory ``db_dir`` whose vgroups ``placed`` are this node's
    (the module docstring); the names of the directories deleted."""
    if not db_dir.is_dir():
        return []
    removed = []
    for entry in sorted(db_dir.iterdir()):
        match = _VNODE_DIR.fullmatch(entry.name)
        if entry.name.endswith(DELETED) and entry.is_dir():
            shutil.rmtree(entry)
        elif match is not None and entry.is_dir() and int(match.group(1)) not in placed:
            delete_vnode_dir(entry, syncs)
        else:
            continue
        removed.append(entry.name)
    return removed
