"""The vnode snapshots a leader keeps while its followers page them (VnodeSnapshot, docs/plans/vnode-snapshot.md).

A snapshot (:mod:`walgate.storage.vnode_snapshot`) is taken for one follower of one vnode in one leader epoch and
paged by that follower alone, as Kafka's leader serves a KRaft snapshot to a fetching voter (KIP-630). Invariants:

* at most one per (vnode, follower): a follower's new begin displaces its earlier snapshot of the vnode (a follower
  that restarted, or one whose snapshot went stale, begins again);
* a snapshot is answered only to the follower it was taken for, of its vnode, in its leader epoch: a page asked in
  another epoch, or of a snapshot not held, is SNAPSHOT_NOT_FOUND and the follower begins again;
* each is held :data:`IDLE_MS` after its last page, then dropped; at most :data:`LIMIT` in all (the oldest dropped
  first), so that the disk a leader spends on them is bounded whatever its followers do.

Every change returns the snapshots it dropped: the caller removes their directories. Used on the storage lanes of
the vnodes paged (the handler's calls), which may run at once: each method holds a lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from pathlib import Path

from walgate.storage.vnode_snapshot import Manifest

__all__ = ["IDLE_MS", "LIMIT", "Held", "HeldSnapshots"]

IDLE_MS = 300_000
"""How long a snapshot no follower pages is held."""
LIMIT = 16
"""The most snapshots a leader holds at once."""


@dataclass(frozen=True)
class Held:
    """Snapshot ``manifest`` in ``directory`` of vgroup ``vgroup`` of database ``db_id``, taken for follower
    ``replica`` in ``leader_epoch``, dropped at ``expires_ms`` unless paged again."""

    db_id: str
    vgroup: int
    replica: int
    leader_epoch: int
    directory: Path
    manifest: Manifest
    expires_ms: int


class HeldSnapshots:
    """The snapshots held (see the module docstring)."""

    def __init__(self, idle_ms: int = IDLE_MS, limit: int = LIMIT) -> None:
        self.idle_ms = idle_ms
        self.limit = limit
        self._held: dict[str, Held] = {}  # by snapshot id, oldest first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    def add(self, held: Held, now_ms: int) -> list[Held]:
        """Hold ``held`` (its ``expires_ms`` set from ``now_ms``); the snapshots it displaced, expired or pushed out."""
        gone = self.expire(now_ms)
        with self._lock:
            return gone + self._add(held, now_ms)

    def _add(self, held: Held, now_ms: int) -> list[Held]:
        gone = []
        for sid, h in list(self._held.items()):
            if (h.db_id, h.vgroup, h.replica) == (held.db_id, held.vgroup, held.replica):
                gone.append(self._held.pop(sid))
        while len(self._held) >= self.limit:
            gone.append(self._held.pop(next(iter(self._held))))
        self._held[held.manifest.snapshot_id] = replace(held, expires_ms=now_ms + self.idle_ms)
        return gone

    def page(self, snapshot_id: str, db_id: str, vgroup: int, replica: int, leader_epoch: int,
             now_ms: int) -> Held | None:
        """Snapshot ``snapshot_id`` when it is held for this follower of this vnode in this leader epoch (its expiry
        moved on from ``now_ms``), else None."""
        with self._lock:
            h = self._held.get(snapshot_id)
            if h is None or h.expires_ms <= now_ms or (h.db_id, h.vgroup, h.replica, h.leader_epoch) != (
                    db_id, vgroup, replica, leader_epoch):
                return None
            self._held[snapshot_id] = h = replace(h, expires_ms=now_ms + self.idle_ms)
            return h

    def expire(self, now_ms: int) -> list[Held]:
        """Drop the snapshots not paged for :attr:`idle_ms`; those dropped."""
        with self._lock:
            gone = [h for h in self._held.values() if h.expires_ms <= now_ms]
            for h in gone:
                del self._held[h.manifest.snapshot_id]
            return gone
