"""The meta stores' whole-file checks, left by a node's start for after it (issue 23: a restart with millions of
subtables must not read every store whole before it serves).

:meth:`MetaStore.open <walgate.storage.meta_store.MetaStore.open>` checks what it can without reading the whole file
(the schema, the covered version); SQLite's ``quick_check``, the names against their definitions and the name index
against the rows read all of it: ~25 s for a vnode of 2.5 million subtables. An engine opened with
``whole_stores=False`` (:meth:`Engine.open <walgate.storage.engine.Engine.open>`; the gateway does) leaves those to
:class:`MetaCheck` objects: :meth:`MetaCheck.run` on any thread (a read-only connection of its own, one snapshot of
the store), then :func:`apply_check` on the storage thread, which reports a damaged store and rebuilds it from the WAL's
meta entries, as a damaged store found at open is. Until then a damaged store is used as it is: a definition is
checksummed whole and verified when read (a damaged one is found and rebuilt then), so what the deferred checks
add is damage in SQLite's structure or the name index, which can make a lookup miss a table that exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from walgate.storage.meta_store import MetaStore, check
from walgate.storage.vnode import Vnode

__all__ = ["MetaCheck", "apply_check", "pending"]


@dataclass(frozen=True)
class MetaCheck:
    """The whole-file checks of one vnode's meta store as it was opened."""

    vnode: Vnode
    store: MetaStore

    def run(self, stopped: Callable[[], bool] = lambda: False) -> str | None:
        """The damage found, None when there is none (StorageUnavailable when the file cannot be read, or once
        ``stopped()``). Any thread."""
        return check(self.store.path, stopped)


def pending(vnodes: Mapping[str, list[Vnode]]) -> list[MetaCheck]:
    """A check for the store of each of ``vnodes`` (database -> its vnodes)."""
    return [MetaCheck(v, v.store) for db_vnodes in vnodes.values() for v in db_vnodes]


def apply_check(vnodes: Mapping[str, list[Vnode]], meta_check: MetaCheck, problem: str | None) -> None:
    """On the storage thread: a damaged store is reported and rebuilt, if its vnode is still open (among ``vnodes``)
    and the store still the one checked (not rebuilt or dropped meanwhile)."""
    vnode = meta_check.vnode
    if problem is not None and vnode.store is meta_check.store and \
            any(v is vnode for v in vnodes.get(vnode.db.name, [])):
        vnode.rebuild_store(problem)
