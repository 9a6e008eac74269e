"""A replicated vnode's high watermark on disk (Kafka's ``replication-offset-checkpoint``, here one file per vnode;
issue 25, docs/plans/replication-wiring.md step 5).

The replica manager (:mod:`walgate.gateway.replicas`) writes the visible version of each vnode it leads or follows
(its high watermark as this node knows it) periodically when it changed, and at shutdown; a replica whose WAL was
just opened starts from it (the floor of a follower's truncation, the first high watermark of a leader's view)
rather than from its log start. The file may be older than the high watermark the cluster reached since: that hides
committed records until the replica learns the newer one, and never makes an uncommitted entry visible nor refuses a
truncation the leader's log needs (what this node saw as its high watermark was never above the leader's, and a
leader's high watermark is held durably by every ISR member, so no later leader's log diverges below it).

File: ``replication-offset-checkpoint`` in the vnode's directory, one checksummed line (:mod:`walgate.storage.lines`)
``{"hw": version}``, replaced whole and atomically (:func:`fileio.replace_file <walgate.storage.fileio.replace_file>`:
a crash or a refused write leaves the old file or the new one, never a mix; a leftover ``.tmp`` is overwritten by the
next write). A missing file (a vnode never replicated, or one from before this file existed) reads as none; one that
does not verify (checksum, shape, a negative version) or cannot be read is reported (the DamageLog, its bytes kept)
and reads as none too: the replica then starts from its log start.
"""

from __future__ import annotations

import logging
from pathlib import Path

from walgate.storage import fileio, lines
from walgate.storage.damage import DamageLog
from walgate.storage.fileio import SyncLatency

__all__ = ["HW_FILE", "read", "write"]

log = logging.getLogger("walgate.replication")

HW_FILE = "replication-offset-checkpoint"


def read(directory: Path, damage: DamageLog | None = None) -> int | None:
    """The high watermark last written in vnode directory ``directory``; None when there is none (missing) or it
    cannot be trusted (unreadable, damaged: reported). Never raises for the file."""
    path = directory / HW_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        _report(path, damage, f"high watermark checkpoint cannot be read ({exc})", b"")
        return None
    try:
        return lines.decode_int(raw, "hw", 0)
    except ValueError as exc:
        _report(path, damage, f"high watermark checkpoint: {exc}", raw)
        return None


def write(directory: Path, hw: int, *, syncs: SyncLatency) -> None:
    """Record ``hw`` as the high watermark of the vnode in ``directory``, durably; OSError when the disk refuses (the
    file then holds the old value or ``hw``)."""
    fileio.replace_file(directory / HW_FILE, lines.encode({"hw": hw}), syncs=syncs)


def _report(path: Path, damage: DamageLog | None, reason: str, raw: bytes) -> None:
    action = "the replica starts from its log start"
    if damage is None:
        log.warning("%s: %s; %s", path, reason, action)
    else:
        damage.report(path, 0, len(raw), reason, action, raw)
