"""Cutting a WAL back to a version, durably and all or nothing across a crash (:meth:`Wal.truncate_to`).

A cut may span segments (the later ones deleted, the one holding the cut cut short), which no single file operation
does. So it is written first as an *intent*: ``wal/truncation``, one checksummed line (:mod:`walgate.storage.lines`)
naming the version, the segment that holds it and the byte position of its entry, written with
:func:`~walgate.storage.fileio.replace_file` (write new, fsync, rename, fsync the directory). Until the intent is
durable, nothing was cut (a crash reopens the WAL as it was). Once it is, :func:`finish` carries it out: deletes
every later segment (newest first, index before log), removes the holding segment's index (its seal: it is the
active segment again), cuts its log at the position and fdatasyncs it, fsyncs the directory, and only then removes the intent. :func:`finish` is idempotent and runs
again at the next open before recovery reads any segment, so a crash anywhere after the intent reopens the WAL
cut (never between, never a torn entry: the position is an entry's first byte).

An intent that does not verify (a flipped byte: :func:`~walgate.storage.fileio.replace_file` never leaves a torn
one) is reported and removed; recovery then opens what the disk holds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from walgate.storage import fileio, lines
from walgate.storage.fileio import SyncLatency
from walgate.storage.wal_format import SEGMENT_NAME, Segment

__all__ = ["INTENT", "Cut", "finish", "write_intent"]

INTENT = "truncation"


class Cut(NamedTuple):
    """Cut the WAL back to ``version``: segments after ``segment`` (a first version) go, its log ends at
    ``position`` (the first byte of the entry at ``version``, or its size)."""

    version: int
    segment: int
    position: int


def write_intent(directory: Path, cut: Cut, syncs: SyncLatency) -> None:
    """Record ``cut`` durably (raises OSError, and then the WAL is as it was)."""
    fileio.replace_file(directory / INTENT, lines.encode(cut._asdict()), syncs=syncs)


def _read(path: Path, report: Callable[[Path, int, int, str, str, bytes], None]) -> Cut | None:
    """The intent at ``path``; None (reported) when it does not verify."""
    raw = path.read_bytes()
    try:
        rec = lines.decode(raw.rstrip(b"\n"))
        cut = Cut(*(rec[k] for k in Cut._fields))
        if any(type(v) is not int or v < 0 for v in cut) or cut.segment > cut.version:
            raise ValueError(f"cut {cut}")
    except (ValueError, KeyError, TypeError) as exc:
        report(path, 0, len(raw), f"WAL truncation intent: {exc}; ignored (the WAL opens as the disk holds it)",
               "ignored", raw)
        return None
    return cut


def finish(directory: Path, syncs: SyncLatency,
           report: Callable[[Path, int, int, str, str, bytes], None]) -> Cut | None:
    """Carry out the intent in ``directory``, if any (see the module docstring): the cut made, or None when there
    was none (or it did not verify). Raises OSError, the intent then kept for the next try."""
    path = directory / INTENT
    if not path.exists():
        return None
    cut = _read(path, report)
    if cut is not None:
        later: dict[int, list[Path]] = {}
        with os.scandir(directory) as it:
            for item in it:
                m = SEGMENT_NAME.fullmatch(item.name)
                if m and int(m[1]) > cut.segment:
                    later.setdefault(int(m[1]), []).append(Path(item.path))
        for first in sorted(later, reverse=True):  # newest first, its index before its log
            for p in sorted(later[first], key=lambda p: p.suffix != ".idx"):
                fileio.unlink(p, missing_ok=True)
        held = Segment(directory, cut.segment)
        fileio.unlink(held.index_path, missing_ok=True)  # (it is the active segment again: a seal would be stale)
        log_path = held.path
        fd = os.open(log_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size > cut.position:
                fileio.truncate(fd, cut.position)
            fileio.fdatasync(fd, syncs=syncs)
        finally:
            os.close(fd)
        fileio.fsync_dir(directory, syncs=syncs)
    fileio.unlink(path)
    fileio.fsync_dir(directory, syncs=syncs)
    return cut
