"""Group commit, storage's half: what appends left to be made durable, and the syncs that make it so.

Without group commit (an engine opened alone: tools, tests) a WAL_LEVEL 2 (``WAL_FSYNC_PERIOD 0``) append and a
consumer-group commit fdatasync before they return, on the calling thread. With it (:meth:`Engine.open` with
``group_commit``; the gateway), they return once written to the OS and *note* here what must become durable before
their caller may answer: a :data:`Need`, (file, target). The caller takes the notes of its call (:meth:`Unsynced.take`)
and waits for them; whoever makes files durable (the gateway's sync service) asks a file for a :class:`Sync` of
everything written to it so far (:meth:`Syncable.take_sync`, on its owner lane), runs it anywhere
(:meth:`Sync.run`: the fdatasync, never raising) and hands it back (:meth:`Sync.done`, on its owner lane). One
fdatasync thus covers every append and commit written before it was taken.

A need ``(file, target)`` is met once ``target <= file.durable_to``; it is refused when a sync whose ``covers`` is at
least ``target`` failed (``sync.error``) before it was met. Targets grow with every write of a file; a file has at
most one sync taken and not yet done. Storage stays synchronous and starts no thread: this module holds no lock; a
file's syncs are taken and marked done by the call that owns it (a vnode's WAL: a storage-lane call holding its
vnode; the coordinator and share logs: the coordinator lane).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

__all__ = ["Need", "Sync", "Syncable", "Unsynced"]


class Sync(Protocol):
    """An fdatasync of everything a file held when the sync was taken."""

    error: OSError | None  # set by run() when the fdatasync failed
    covers: int  # the targets this sync makes durable, or refuses when it fails: every target <= covers

    def run(self) -> None:
        """The fdatasync, through a descriptor of its own (any thread; never raises: sets ``error``)."""

    def done(self) -> None:
        """Mark what it covered durable, or handle its failure (its owner lane, after :meth:`run`)."""


class Syncable(Protocol):
    """A file written with group commit (a vnode's WAL, a coordinator partition's committed offsets)."""

    @property
    def durable_to(self) -> int:
        """Every target up to this one is durable."""

    def take_sync(self) -> Sync | None:
        """A sync of everything written so far (None: nothing is left to sync, or a sync is taken and not done)."""


Need = tuple[Syncable, int]
"""(file, target): what a write must wait for before its caller answers."""


class Unsynced:
    """The needs noted since the last :meth:`take` *on the calling thread*, the latest per file (targets grow, so it
    covers the earlier ones; after a WAL undo the latest is the file's end again); ``wake(owner)`` is called when a
    WAL's versions become durable (readers of level-2 data see them only then).

    Per thread: calls on vnode lanes run at once on threads of their own (:mod:`walgate.storage.lanes`), each call on
    one thread from start to end, and each takes at its end exactly what its own writes noted, never another call's.
    Each thread's notes are written by that thread only (one dict operation each, atomic)."""

    def __init__(self, wake: Callable[[tuple[str, int]], None]) -> None:
        self._notes: dict[int, dict[int, Need]] = {}  # thread ident -> id(file) -> need
        self.wake = wake

    def note(self, file: Syncable, target: int) -> None:
        notes = self._notes.get(threading.get_ident())
        if notes is None:
            notes = self._notes[threading.get_ident()] = {}
        notes[id(file)] = (file, target)

    def take(self) -> list[Need]:
        """The needs the calling thread noted since its last call (cleared)."""
        notes = self._notes.get(threading.get_ident())
        if not notes:
            return []
        needs = list(notes.values())
        notes.clear()
        return needs
